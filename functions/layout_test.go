// Package functions_test checks the boundary between what ships and what
// tests it: the Lambda functions and the operator tool link the runtime
// packages of pkg/ only, never a harness package (internal/harness/...: the
// emulators, the pipeline harness, the local stack, the demo, chaos, load,
// capacity, plots, the fake Stripe API and the fake downstream).
package functions_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/effectively-once/webhooks"

func TestShippedBinariesLinkNoHarness(t *testing.T) {
	shipped := []string{module + "/functions/...", module + "/scripts/webhookctl"}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,DepsErrors"}, shipped...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		if strings.HasPrefix(p.ImportPath, module+"/internal/harness/") {
			t.Errorf("a shipped binary links the harness package %s", p.ImportPath)
		}
	}
	// The list holds the runtime (so the check looked at something).
	if seen < 50 || !strings.Contains(string(out), module+"/internal/ledger") {
		t.Fatalf("go list returned %d packages without the ledger: the check saw nothing", seen)
	}
}

// Every harness package really is under internal/harness: none of their
// old paths is back beside the runtime or in pkg/.
func TestHarnessPackagesLiveUnderHarness(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, old := range []string{"awstrace", "localaws", "pipelinetest", "devstack", "demo", "chaos", "loadgen", "capacity", "plot", "stripefake", "downstream"} {
		for _, line := range strings.Split(string(out), "\n") {
			for _, dir := range []string{"/pkg/", "/internal/"} {
				if line == module+dir+old || strings.HasPrefix(line, module+dir+old+"/") {
					t.Errorf("%s is beside the runtime; harness packages live under internal/harness/", line)
				}
			}
		}
	}
}

// The public packages are the ones a team imports; everything else is
// internal. A new package under pkg/ is a promise, so it is named here on
// purpose, and the projection contract depends on the standard library
// alone (writing a projection pulls in no AWS SDK).
func TestPublicPackagesAreTheOnesWePromise(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/pkg/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	public := map[string]bool{}
	for _, p := range publicPackages {
		public[module+"/pkg/"+p] = true
	}
	for _, line := range strings.Fields(string(out)) {
		if !public[line] {
			t.Errorf("%s is public but not promised: move it under internal/ or add it to publicPackages", line)
		}
	}
	deps, err := exec.Command("go", "list", "-deps", module+"/pkg/projection").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") && d != module+"/pkg/projection" {
			t.Errorf("pkg/projection depends on %s: the contract must stand on the standard library", d)
		}
	}
}

// publicPackages are the packages under pkg/ that a team imports.
var publicPackages = []string{"projection", "builtin", "provider", "app", "state", "webhookstest", "app/intake", "app/bridge", "app/processor", "app/dispatcher", "app/reconciler"}

// Each function links only what it runs: the intake, the bridge and the
// processor never link the dispatcher's AWS targets (their SDK clients
// and the warehouse sink's S3 client are most of the dispatcher's growth),
// so their size and cold start stay their own.
func TestOnlyTheDispatcherAndReconcilerLinkTheEffectTargets(t *testing.T) {
	for _, fn := range []string{"intake", "bridge", "processor"} {
		out, err := exec.Command("go", "list", "-deps", module+"/functions/"+fn).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, svc := range []string{"lambda", "sfn", "eventbridge", "s3"} {
				if d == "github.com/aws/aws-sdk-go-v2/service/"+svc || d == module+"/internal/outbox" {
					t.Errorf("functions/%s links %s", fn, d)
				}
			}
		}
	}
}
