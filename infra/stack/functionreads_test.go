package stack_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// What each ledger method reads, as DynamoDB authorizes it: GetItem of
// items under these partition key prefixes, "index" for a Query of the
// due index (its partition key is due_shard, not the table's), "*" for a
// Scan of the table (a Scan names no partition key, so no
// dynamodb:LeadingKeys condition can allow it). A read made only when a
// refused write returned no item (DynamoDB returns it with
// ReturnValuesOnConditionCheckFailure, an emulator may not; see the
// ledger's package doc) is a read the code can make, so it is here too.
// Every exported method of *ledger.Ledger is here, so a new one is
// classified before a function can call it.
var ledgerMethodReads = map[string]map[string][]string{
	"Accept":                 {"dynamodb:GetItem": {"EV#"}}, // the existing row, when the refusal returned none
	"ClaimBody":              {"dynamodb:GetItem": {"BH#"}}, // the existing marker, likewise
	"Claim":                  {"dynamodb:GetItem": {"EV#"}},
	"Payload":                {"dynamodb:GetItem": {"EV#"}},        // chunks share the event's partition key
	"Commit":                 {"dynamodb:GetItem": {"PJ#", "OP#"}}, // the version guard's projection, the watched intents
	"RetryLater":             {"dynamodb:GetItem": {"EV#"}},
	"AwaitPayload":           {"dynamodb:GetItem": {"EV#"}},
	"Dead":                   {"dynamodb:GetItem": {"EV#"}},
	"Quarantine":             {"dynamodb:GetItem": {"EV#"}},
	"GiveUp":                 {"dynamodb:GetItem": {"EV#"}},
	"Replay":                 {"dynamodb:GetItem": {"EV#"}},
	"Release":                {"dynamodb:GetItem": {"EV#"}},
	"Hold":                   {"dynamodb:GetItem": {"EV#"}},
	"Get":                    {"dynamodb:GetItem": {"EV#"}},
	"GetProjection":          {"dynamodb:GetItem": {"PJ#"}},
	"GetIntentState":         {"dynamodb:GetItem": {"OP#"}},
	"GetCursor":              {"dynamodb:GetItem": {"CUR#"}},
	"ClaimIntent":            {}, // the UpdateItem's own answer
	"RecordIntent":           {"dynamodb:GetItem": {"OP#"}},
	"RecordIntentAs":         {"dynamodb:GetItem": {"OP#"}},
	"ResolveIntent":          {"dynamodb:GetItem": {"OP#"}},
	"LockSubject":            {"dynamodb:GetItem": {"CUR#", "OP#"}}, // the cursor, its holder intent
	"MarkSynced":             {},
	"ListDue":                {"dynamodb:Query": {"index"}},
	"ListDueIntents":         {"dynamodb:Query": {"index"}},
	"ListOpen":               {"dynamodb:Query": {"index"}},
	"ListSyncDue":            {"dynamodb:Query": {"index"}, "dynamodb:GetItem": {"CUR#"}},
	"ScanEvents":             {"dynamodb:Scan": {"*"}},
	"ScanProjections":        {"dynamodb:Scan": {"*"}},
	"ListProjectionsChanged": {"dynamodb:Scan": {"*"}},
	"ScanProjectionsChanged": {"dynamodb:Scan": {"*"}},
	"GetWarehousePass":       {"dynamodb:GetItem": {"CUR#"}}, // the drift check's pass, CUR#warehouse
	"SaveWarehousePass":      {},
	"MissingRecord":          {"dynamodb:GetItem": {"OP#"}},
	"PutIntent":              {},
	"BackfillIntent":         {},
	"Table":                  {},
	"Reader":                 {}, // a handle: pkg/state's reads are TestTheStateReaderNeedsOnlyTheGrantsTeamsAreTold's
}

func TestEachFunctionReadsOnlyTheLedgerKeysItsCodeReads(t *testing.T) {
	// GIVEN every method of the ledger, classified by what it reads
	l := reflect.TypeFor[*ledger.Ledger]()
	for i := range l.NumMethod() {
		if m := l.Method(i).Name; ledgerMethodReads[m] == nil {
			t.Errorf("ledger.%s is not in ledgerMethodReads (infra/stack/reads_test.go): say what it reads, "+
				"and grant those keys to the functions that call it (infra/pipeline grants)", m)
		}
	}
	for _, c := range []struct {
		name string
		s    func(testing.TB) *synthed
		fns  map[string][]reflect.Type
	}{
		{"warehouse off", bridgeStack, functionLedgers},
		{"warehouse on", bridgeWarehouseStack, withWarehouseLedgers()},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s(t)
			// WHEN each function's read grants are compared with what the
			// ledger interfaces its code holds can read
			for fn, ifaces := range c.fns {
				need := map[string][]string{}
				for _, it := range ifaces {
					for i := range it.NumMethod() {
						if slices.Contains(neverCalled[fn], it.Method(i).Name) {
							continue
						}
						for a, prefixes := range ledgerMethodReads[it.Method(i).Name] {
							need[a] = append(need[a], prefixes...)
						}
					}
				}
				for a := range need {
					need[a] = sorted(need[a])
				}
				granted := map[string][]string{}
				for a, patterns := range s.ledgerReads(t, s.roleOf(t, fn)) {
					for _, p := range patterns {
						switch {
						case strings.HasPrefix(p, onIndex):
							granted[a] = append(granted[a], "index")
						case p == "*":
							granted[a] = append(granted[a], "*")
						default:
							// "EV#stripe#*" and "EV#*" are both event keys
							prefix, _, _ := strings.Cut(p, "#")
							granted[a] = append(granted[a], prefix+"#")
						}
					}
					granted[a] = sorted(granted[a])
				}
				// THEN each read the code can make is granted, on the key
				// prefixes it reads and no other
				if !reflect.DeepEqual(granted, need) {
					t.Errorf("%s: granted reads %v, its code reads %v", fn, granted, need)
				}
			}
		})
	}
	// AND, item by item, what one function's credentials can read: above
	// all, the dispatcher, which calls third parties, reads no event and
	// none of its payload chunks (they share the event's partition key)
	s := bridgeWarehouseStack(t)
	const get = "dynamodb:GetItem"
	for _, r := range []struct {
		fn, pk  string
		allowed bool
	}{
		{pipeline.Dispatcher, stripeEvent, false},
		{pipeline.Dispatcher, stripeBody, false},
		{pipeline.Dispatcher, intent, true},
		{pipeline.Dispatcher, projection, true},
		{pipeline.Dispatcher, cursor, true},
		{pipeline.Intake, stripeEvent, true}, // its own source's events
		{pipeline.Intake, stripeBody, true},
		{pipeline.Intake, unknownEvent, false},
		{pipeline.Intake, "EV#shop#evt_1", false}, // shop is delivered through EventBridge only
		{pipeline.Intake, intent, false},
		{pipeline.Intake, projection, false},
		{pipeline.Intake, cursor, false},
		{pipeline.Bridge, "EV#shop#evt_1", true},
		{pipeline.Bridge, "EV#gh#evt_1", false},
		{pipeline.Bridge, intent, false},
		{pipeline.Bridge, projection, false},
		{pipeline.Processor, stripeEvent, true}, // the payload it projects
		{pipeline.Processor, projection, true},
		{pipeline.Processor, intent, true},
		{pipeline.Processor, cursor, false},
		{pipeline.Processor, stripeBody, false},
		{pipeline.Reconciler, stripeEvent, true},
		{pipeline.Reconciler, cursor, true},
		{pipeline.Reconciler, stripeBody, false},
	} {
		if got := mayRead(s.ledgerReads(t, s.roleOf(t, r.fn)), get, r.pk); got != r.allowed {
			t.Errorf("%s GetItem on %s: allowed %v, want %v", r.fn, r.pk, got, r.allowed)
		}
	}
	// AND only the reconciler's warehouse check may Scan (a Scan has no
	// leading keys, so it is unconditioned), and no function may
	// BatchGetItem
	for _, fn := range sortedFunctions(s) {
		reads := s.ledgerReads(t, s.roleOf(t, fn))
		if _, ok := reads["dynamodb:Scan"]; ok != (fn == pipeline.Reconciler) {
			t.Errorf("%s holds dynamodb:Scan: %v", fn, ok)
		}
		if _, ok := reads["dynamodb:BatchGetItem"]; ok {
			t.Errorf("%s holds dynamodb:BatchGetItem", fn)
		}
	}
}

// withWarehouseLedgers is functionLedgers with the warehouse on.
func withWarehouseLedgers() map[string][]reflect.Type {
	with := map[string][]reflect.Type{}
	for fn, ifaces := range functionLedgers {
		with[fn] = append(slices.Clone(ifaces), warehouseLedgers[fn]...)
	}
	return with
}
