package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/effectively-once/webhooks"

// TestTheToolLineLoadsNoAnalyticsEngine checks what a team's module must
// resolve for `tool github.com/effectively-once/webhooks/scripts/dev`:
// `go mod tidy` there loads this command, every package of ours it
// imports, and those packages' tests. None of them may import DuckDB (cgo,
// one prebuilt library per platform, about 150 MB of module zips, every
// platform's in each team's go.sum): the local warehouse's queries live
// behind `go run .../scripts/warehouse` instead, which a team runs only if
// it wants them.
func TestTheToolLineLoadsNoAnalyticsEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/scripts/dev").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module+"/") {
			ours = append(ours, p)
		}
	}
	if len(ours) < 5 {
		t.Fatalf("go list found %d packages of ours under scripts/dev: the check saw nothing", len(ours))
	}
	// ImportPath, then its imports; a test variant's ImportPath has a
	// space ("p [p.test]"), hence the tab.
	out, err = exec.Command("go", append([]string{"list", "-deps", "-test", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}"}, ours...)...).Output()
	if err != nil {
		t.Fatalf("go list -test: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(line, "\t")
		imports[pkg] = strings.Fields(imps)
	}
	for pkg, imps := range imports {
		if !strings.HasPrefix(pkg, module+"/") {
			continue
		}
		for _, imp := range imps {
			if strings.Contains(imp, "duckdb") {
				t.Errorf("%s imports %s: every team with the tool line would download DuckDB for every platform (loaded through: %s)",
					pkg, imp, strings.Join(importers(imports, pkg), ", "))
			}
		}
	}
}

// importers lists the packages in imports that import pkg.
func importers(imports map[string][]string, pkg string) []string {
	var by []string
	for p, imps := range imports {
		for _, imp := range imps {
			if imp == pkg {
				by = append(by, p)
				break
			}
		}
	}
	return by
}
