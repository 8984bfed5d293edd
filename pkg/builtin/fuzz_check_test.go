package builtin_test

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// fuzzProject runs one fuzz input through p and checks the contract every
// projection keeps for any verified payload: no panic; an error is always
// permanent (a retry cannot fix a payload); a result is a complete write
// (a subject the ledger accepts, a fingerprint, a version of at least
// minVersion) whose state the ledger can store, its intents have distinct
// operation ids and storable payloads (and projection.Validate, the
// processor's check, accepts it), and projecting the same event again
// gives the same result.
func fuzzProject(t *testing.T, p projection.Projection, ev projection.Event, minVersion int64) {
	t.Helper()
	res, err := p.Project(ev)
	if err != nil {
		if _, perm := projection.AsPermanent(err); !perm {
			t.Fatalf("retryable error for a payload: %v", err)
		}
		return
	}
	if err := projection.Validate(p.Name(), res); err != nil {
		t.Fatalf("the pipeline would quarantine this result: %v", err)
	}
	w := res.Write
	if w == nil || w.Name != p.Name() || w.Subject == "" || len(w.Subject) > projection.MaxIDLength || w.Fingerprint == "" || w.Version < minVersion {
		t.Fatalf("incomplete write %+v", w)
	}
	if projection.Fingerprint(w.State) != w.Fingerprint {
		t.Fatal("the fingerprint is not the state's")
	}
	if _, err := attributevalue.MarshalMap(w.State); err != nil {
		t.Fatalf("state the ledger cannot store: %v", err)
	}
	seen := map[string]bool{}
	for _, in := range res.Intents {
		if in.OperationID == "" || in.Kind == "" || in.Subject == "" || seen[in.OperationID] {
			t.Fatalf("bad intent %+v", in)
		}
		seen[in.OperationID] = true
		if _, err := attributevalue.MarshalMap(in.Payload); err != nil {
			t.Fatalf("intent payload the ledger cannot store: %v", err)
		}
	}
	again, err := p.Project(ev)
	if err != nil || !reflect.DeepEqual(res, again) {
		t.Fatalf("projecting twice differed: %v", err)
	}
}
