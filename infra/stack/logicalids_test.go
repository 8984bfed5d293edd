package stack_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// goldenIDs holds, per variant, the logical ids of the template as deployed
// stacks know them. CloudFormation replaces a resource whose logical id
// changes, and the ledger table (a fixed name, retained on delete) cannot be
// replaced in place, so moving a construct in the tree must not move an id.
// UPDATE_LOGICAL_IDS=1 rewrites the file (only on purpose: a removed id
// is a replaced or deleted resource in every deployed stage).
const goldenIDs = "testdata/logical_ids.json"

func TestLogicalIDsOfDeployedResourcesStayWhereTheyWere(t *testing.T) {
	variants := map[string]*synthed{"default": defaultStack(t), "full": fullStack(t), "bridge": bridgeStack(t)}
	if os.Getenv("UPDATE_LOGICAL_IDS") == "1" {
		out := map[string][]string{}
		for name, s := range variants {
			out[name] = keys(s.res)
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(filepath.FromSlash(goldenIDs), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// GIVEN the logical ids the stack had before
	raw, err := os.ReadFile(filepath.FromSlash(goldenIDs))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for name, s := range variants {
		// WHEN the variant is synthesized now
		// THEN every resource it had is still there under the same id
		if len(want[name]) == 0 {
			t.Fatalf("%s: no golden ids", name)
		}
		for _, id := range want[name] {
			if _, ok := s.res[id]; !ok {
				t.Errorf("%s: logical id %s is gone (a deployed stage would replace or delete it)", name, id)
			}
		}
	}
}
