package stack_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/reconciler"
)

// Partition keys of each kind of ledger item, as internal/ledger writes them.
const (
	stripeEvent  = "EV#stripe#evt_1" // an event of source stripe; its payload chunks share this key
	unknownEvent = "EV#elsewhere#evt_1"
	stripeBody   = "BH#stripe#9f86d081884c7d65" // the marker of a body of an unsigned-id scheme
	projection   = "PJ#orders#O-42"
	intent       = "OP#0f3a9c"
	recordIntent = "OP#warehouse.3e1f0a9c" // a warehouse record intent (warehouse.OperationID)
	cursor       = "CUR#orders#O-42#refund"
)

func TestEachFunctionWritesOnlyTheLedgerKeysItOwns(t *testing.T) {
	const put, update = "dynamodb:PutItem", "dynamodb:UpdateItem"
	for _, c := range []struct {
		variant string
		// intake's patterns: the events and body markers of the sources it
		// serves over HTTPS
		events, bodies []string
	}{
		{"default", []string{"EV#stripe#*"}, []string{"BH#stripe#*"}},
		{"full", []string{"EV#ses#*", "EV#shop#*", "EV#stripe#*"}, []string{"BH#ses#*", "BH#shop#*", "BH#stripe#*"}},
		{"warehouse", []string{"EV#stripe#*"}, []string{"BH#stripe#*"}},
	} {
		t.Run(c.variant, func(t *testing.T) {
			// GIVEN a synthesized stack
			s := stackOf(t, c.variant)
			// THEN every DynamoDB write of every function is conditioned on
			// the partition keys (dynamodb:LeadingKeys) its code writes, per
			// action: nothing else
			want := map[string]map[string][]string{
				pipeline.Intake:     {put: sorted(append(c.bodies, c.events...)), update: c.events},
				pipeline.Processor:  {put: {"OP#*", "PJ#*"}, update: {"EV#*", "OP#*", "PJ#*"}},
				pipeline.Dispatcher: {update: {"CUR#*", "OP#*"}},
				pipeline.Reconciler: {put: {"EV#*"}, update: {"CUR#*", "EV#*"}},
			}
			warehouseOn := c.variant == "warehouse"
			if warehouseOn {
				// the record intents its drift check writes or repairs, and
				// no other intent
				want[pipeline.Reconciler][put] = []string{"EV#*", "OP#warehouse.*"}
			}
			writes := map[string]map[string][]string{}
			for fn, w := range want {
				writes[fn] = s.ledgerWrites(t, s.roleOf(t, fn))
				if !reflect.DeepEqual(writes[fn], w) {
					t.Errorf("%s writes %v, want %v", fn, writes[fn], w)
				}
			}
			// AND, item by item, what an attacker holding one function's
			// credentials can and cannot write
			for _, r := range []struct {
				fn, action, pk string
				allowed        bool
			}{
				// intake: events and body markers of the sources it serves,
				// nothing else
				{pipeline.Intake, update, stripeEvent, true},
				{pipeline.Intake, put, stripeEvent, true}, // payload chunks
				{pipeline.Intake, put, stripeBody, true},
				{pipeline.Intake, update, stripeBody, false},
				{pipeline.Intake, update, unknownEvent, false},
				{pipeline.Intake, put, "BH#elsewhere#9f86d081884c7d65", false},
				{pipeline.Intake, put, intent, false},
				{pipeline.Intake, update, intent, false},
				{pipeline.Intake, put, projection, false},
				{pipeline.Intake, update, projection, false},
				{pipeline.Intake, update, cursor, false},
				// processor: the commit's event, projection and intents; it
				// never stores a payload or moves a subject's cursor
				{pipeline.Processor, update, stripeEvent, true},
				{pipeline.Processor, put, projection, true},
				{pipeline.Processor, put, intent, true},
				{pipeline.Processor, update, intent, true}, // intents a revision contradicts
				{pipeline.Processor, put, stripeEvent, false},
				{pipeline.Processor, update, cursor, false},
				{pipeline.Processor, put, stripeBody, false},
				// dispatcher: intents and cursors only
				{pipeline.Dispatcher, update, intent, true},
				{pipeline.Dispatcher, update, cursor, true},
				{pipeline.Dispatcher, update, stripeEvent, false},
				{pipeline.Dispatcher, update, projection, false},
				{pipeline.Dispatcher, put, intent, false},
				// reconciler: events (give up, accept a missed one) and
				// cursors (drift check); never an intent or a projection
				{pipeline.Reconciler, update, stripeEvent, true},
				{pipeline.Reconciler, put, unknownEvent, true}, // a removed source's events
				{pipeline.Reconciler, update, cursor, true},
				{pipeline.Reconciler, update, intent, false},
				{pipeline.Reconciler, put, intent, false}, // a PENDING refund: never
				{pipeline.Reconciler, put, recordIntent, warehouseOn},
				{pipeline.Reconciler, update, recordIntent, false},
				{pipeline.Reconciler, put, "OP#warehouse", false},
				{pipeline.Processor, put, recordIntent, true}, // the commit's record of an applied revision
				{pipeline.Dispatcher, update, recordIntent, true},
				{pipeline.Reconciler, update, projection, false},
				{pipeline.Reconciler, put, stripeBody, false},
			} {
				if got := mayWrite(writes[r.fn], r.action, r.pk); got != r.allowed {
					t.Errorf("%s %s on %s: allowed %v, want %v", r.fn, r.action, r.pk, got, r.allowed)
				}
			}
			// AND no function may delete or batch-write
			for fn := range want {
				for _, a := range []string{"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} {
					if _, ok := writes[fn][a]; ok {
						t.Errorf("%s holds %s", fn, a)
					}
				}
			}
		})
	}
}

func TestBridgeWritesOnlyTheEventsOfItsEventBridgeSources(t *testing.T) {
	// GIVEN stripe over HTTPS and EventBridge, shop over EventBridge only,
	// gh over HTTPS only
	s := bridgeStack(t)
	// THEN the bridge, which has no signature to check, writes only the
	// events of stripe and shop (no body markers: its ids come from AWS),
	// and intake only the events and body markers of stripe and gh
	for fn, want := range map[string]map[string][]string{
		pipeline.Bridge: {"dynamodb:PutItem": {"EV#shop#*", "EV#stripe#*"}, "dynamodb:UpdateItem": {"EV#shop#*", "EV#stripe#*"}},
		pipeline.Intake: {"dynamodb:PutItem": {"BH#gh#*", "BH#stripe#*", "EV#gh#*", "EV#stripe#*"}, "dynamodb:UpdateItem": {"EV#gh#*", "EV#stripe#*"}},
	} {
		if w := s.ledgerWrites(t, s.roleOf(t, fn)); !reflect.DeepEqual(w, want) {
			t.Errorf("%s writes %v, want %v", fn, w, want)
		}
	}
	bridge := s.ledgerWrites(t, s.roleOf(t, pipeline.Bridge))
	for pk, allowed := range map[string]bool{"EV#shop#evt_1": true, "EV#gh#evt_1": false, "EV#stripe-eu#evt_1": false, intent: false, projection: false, cursor: false, "BH#shop#9f86d081884c7d65": false} {
		if mayWrite(bridge, "dynamodb:UpdateItem", pk) != allowed {
			t.Errorf("bridge UpdateItem on %s: want allowed %v", pk, allowed)
		}
	}
}

// What each ledger method writes: per IAM action, the partition key
// prefixes (internal/ledger). Every exported method of *ledger.Ledger is either
// here or in ledgerReads, so a new method is classified before a function
// can call it.
var ledgerMethodWrites = map[string]map[string][]string{
	"Accept":         {"dynamodb:UpdateItem": {"EV#"}, "dynamodb:PutItem": {"EV#"}}, // the event, its payload chunks
	"Claim":          {"dynamodb:UpdateItem": {"EV#"}},
	"Commit":         {"dynamodb:UpdateItem": {"EV#", "PJ#", "OP#"}, "dynamodb:PutItem": {"PJ#", "OP#"}},
	"RetryLater":     {"dynamodb:UpdateItem": {"EV#"}},
	"AwaitPayload":   {"dynamodb:UpdateItem": {"EV#"}},
	"Dead":           {"dynamodb:UpdateItem": {"EV#"}},
	"Quarantine":     {"dynamodb:UpdateItem": {"EV#"}},
	"GiveUp":         {"dynamodb:UpdateItem": {"EV#"}},
	"Replay":         {"dynamodb:UpdateItem": {"EV#"}},
	"Release":        {"dynamodb:UpdateItem": {"EV#"}},
	"Hold":           {"dynamodb:UpdateItem": {"EV#"}},
	"ClaimIntent":    {"dynamodb:UpdateItem": {"OP#"}},
	"RecordIntent":   {"dynamodb:UpdateItem": {"OP#"}},
	"RecordIntentAs": {"dynamodb:UpdateItem": {"OP#"}},
	"ResolveIntent":  {"dynamodb:UpdateItem": {"OP#"}},
	"LockSubject":    {"dynamodb:UpdateItem": {"CUR#"}},
	"MarkSynced":     {"dynamodb:UpdateItem": {"CUR#"}},
	"ClaimBody":      {"dynamodb:PutItem": {"BH#"}},
	// the warehouse check's pass, one item under CUR#
	"SaveWarehousePass": {"dynamodb:UpdateItem": {"CUR#"}},
	"PutIntent":         {"dynamodb:PutItem": {"OP#warehouse."}}, // record intents only
	"BackfillIntent":    {"dynamodb:PutItem": {"OP#warehouse."}}, // webhookctl's, no function's
}

var ledgerReads = []string{"Get", "Payload", "GetProjection", "GetIntentState", "GetCursor", "ListDue", "ListDueIntents",
	"ListOpen", "ListSyncDue", "ScanEvents", "Table", "Reader", "ListProjectionsChanged", "ScanProjections",
	"ScanProjectionsChanged", "GetWarehousePass",
	"MissingRecord"} // MissingRecord reads intents (GetItem) and writes nothing

// The ledger interfaces each function's code holds (pkg/app
// passes its *ledger.Ledger to nothing else): the reconciler also runs the
// bridge's accept path for the bridge DLQ.
var functionLedgers = map[string][]reflect.Type{
	pipeline.Intake:     {reflect.TypeFor[intake.Ledger]()},
	pipeline.Bridge:     {reflect.TypeFor[intake.Ledger]()},
	pipeline.Processor:  {reflect.TypeFor[processor.Ledger]()},
	pipeline.Dispatcher: {reflect.TypeFor[outbox.Ledger]()},
	pipeline.Reconciler: {reflect.TypeFor[reconciler.Ledger](), reflect.TypeFor[intake.Ledger]()},
}

// neverCalled are interface methods a function's code path cannot reach,
// so it gets no grant for them: the EventBridge path (the bridge, and the
// reconciler redelivering the bridge DLQ through it) never asks ClaimBody,
// since EventBridge ids come from AWS, not from the sender.
var neverCalled = map[string][]string{
	pipeline.Bridge:     {"ClaimBody"},
	pipeline.Reconciler: {"ClaimBody"},
}

// warehouseLedgers are the ledger interfaces a function's code holds
// beyond functionLedgers when the warehouse is on: the reconciler's
// warehouse check.
var warehouseLedgers = map[string][]reflect.Type{
	pipeline.Reconciler: {reflect.TypeFor[reconciler.WarehouseLedger]()},
}

func TestEveryLedgerWriteAFunctionsCodeCanMakeIsGrantedAndNoOtherIs(t *testing.T) {
	t.Run("warehouse off", func(t *testing.T) { checkLedgerWrites(t, bridgeStack(t), functionLedgers) })
	t.Run("warehouse on", func(t *testing.T) {
		with := map[string][]reflect.Type{}
		for fn, ifaces := range functionLedgers {
			with[fn] = append(slices.Clone(ifaces), warehouseLedgers[fn]...)
		}
		checkLedgerWrites(t, bridgeWarehouseStack(t), with)
	})
}

func checkLedgerWrites(t *testing.T, s *synthed, functionLedgers map[string][]reflect.Type) {
	// GIVEN every method of the ledger, classified
	l := reflect.TypeFor[*ledger.Ledger]()
	for i := range l.NumMethod() {
		if m := l.Method(i).Name; ledgerMethodWrites[m] == nil && !slices.Contains(ledgerReads, m) {
			t.Errorf("ledger.%s is neither in ledgerMethodWrites nor in ledgerReads (infra/stack/iam_test.go): say what it writes, "+
				"and grant those keys to the functions that call it (grants in infra/stack/stack.go)", m)
		}
	}
	// WHEN each function's write grant is compared with what the ledger
	// interfaces its code holds can write (every function, the bridge
	// included)
	for fn, ifaces := range functionLedgers {
		need := map[string][]string{}
		for _, it := range ifaces {
			for i := range it.NumMethod() {
				if slices.Contains(neverCalled[fn], it.Method(i).Name) {
					continue
				}
				for a, prefixes := range ledgerMethodWrites[it.Method(i).Name] {
					need[a] = append(need[a], prefixes...)
				}
			}
		}
		for a := range need {
			need[a] = sorted(need[a])
		}
		granted := map[string][]string{}
		for a, patterns := range s.ledgerWrites(t, s.roleOf(t, fn)) {
			for _, p := range patterns {
				// "EV#stripe#*" and "EV#*" are both event keys;
				// "OP#warehouse.*" is the record intents' own shape
				prefix, rest, _ := strings.Cut(p, "#")
				if prefix == "OP" && strings.HasPrefix(rest, "warehouse.") {
					granted[a] = append(granted[a], "OP#warehouse.")
					continue
				}
				granted[a] = append(granted[a], prefix+"#")
			}
			granted[a] = sorted(granted[a])
		}
		// THEN each write the code can make is granted (no AccessDenied in
		// AWS), and nothing more is
		if !reflect.DeepEqual(granted, need) {
			t.Errorf("%s: granted writes %v, its code writes %v", fn, granted, need)
		}
	}
	if fns := keys(functionLedgers); !slices.Equal(fns, sortedFunctions(s)) {
		t.Errorf("functions with ledger interfaces %v, functions in the stack %v", fns, sortedFunctions(s))
	}
}

func sortedFunctions(s *synthed) []string {
	var out []string
	for _, f := range s.ofType("AWS::Lambda::Function") {
		out = append(out, strings.TrimPrefix(props(f)["FunctionName"].(string), s.stack.Config.Prefix()))
	}
	sort.Strings(out)
	return out
}

func TestContextTargetsGrantTheDispatcherEachTargetsActionsOnItsARNOnly(t *testing.T) {
	// GIVEN context effects on a Lambda function, an SQS FIFO queue with a
	// customer managed key, an EventBridge bus and a Step Functions state
	// machine
	s := targetsStack(t)
	// THEN the dispatcher holds its allowlist and, beyond it, exactly each
	// target's actions on that target's ARN
	want := map[string][]string{
		"lambda:InvokeFunction":       {targetFunction},
		"sqs:GetQueueUrl":             {targetQueue},
		"sqs:SendMessage":             {targetQueue},
		"kms:Decrypt":                 {targetKey},
		"kms:GenerateDataKey":         {targetKey},
		"events:PutEvents":            {targetBus},
		"states:StartExecution":       {targetMachine},
		"states:DescribeStateMachine": {targetMachine},
		"states:DescribeExecution":    {"arn:aws:states:eu-west-1:123456789012:execution:fulfil:*"},
	}
	acts := s.roleActions(t, s.roleOf(t, pipeline.Dispatcher))
	for a, rs := range want {
		if !slices.Equal(acts[a], rs) {
			t.Errorf("dispatcher %s on %v, want %v", a, acts[a], rs)
		}
	}
	// sqs:GetQueueAttributes: its own effects queue (the mapping) and the
	// target queue
	if rs := acts["sqs:GetQueueAttributes"]; len(rs) != 2 || !slices.Contains(rs, targetQueue) {
		t.Errorf("dispatcher sqs:GetQueueAttributes on %v", rs)
	}
	for a := range acts {
		if _, ok := want[a]; !ok && !slices.Contains(allowed[pipeline.Dispatcher], a) {
			t.Errorf("dispatcher holds %s", a)
		}
	}
	// AND no other function holds anything on a target
	targets := []string{targetFunction, targetQueue, targetKey, targetBus, targetMachine, "arn:aws:states:eu-west-1:123456789012:execution:fulfil:*"}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Reconciler} {
		for a, rs := range s.roleActions(t, s.roleOf(t, fn)) {
			for _, r := range rs {
				if slices.Contains(targets, r) {
					t.Errorf("%s holds %s on %s", fn, a, r)
				}
			}
		}
	}
	// AND the dispatcher's EFFECTS names the targets as configured
	if doc := s.env(t, pipeline.Dispatcher)["EFFECTS"]; !strings.Contains(doc, `"target":"`+targetMachine+`"`) {
		t.Errorf("EFFECTS %s", doc)
	}
}
