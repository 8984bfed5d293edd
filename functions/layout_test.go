// Package functions_test checks the boundary between what ships and what
// tests it: the Lambda functions and the operator tool link the runtime
// packages of pkg/ only, never a harness package (pkg/harness/...: the
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
		if strings.HasPrefix(p.ImportPath, module+"/pkg/harness/") {
			t.Errorf("a shipped binary links the harness package %s", p.ImportPath)
		}
	}
	// The list holds the runtime (so the check looked at something).
	if seen < 50 || !strings.Contains(string(out), module+"/pkg/ledger") {
		t.Fatalf("go list returned %d packages without the ledger: the check saw nothing", seen)
	}
}

// Every harness package really is under pkg/harness: none of their old
// paths is back beside the runtime.
func TestHarnessPackagesLiveUnderHarness(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/pkg/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, old := range []string{"awstrace", "localaws", "pipelinetest", "devstack", "demo", "chaos", "loadgen", "capacity", "plot", "stripefake", "downstream"} {
		for _, line := range strings.Split(string(out), "\n") {
			if line == module+"/pkg/"+old || strings.HasPrefix(line, module+"/pkg/"+old+"/") {
				t.Errorf("%s is beside the runtime; harness packages live under pkg/harness/", line)
			}
		}
	}
}
