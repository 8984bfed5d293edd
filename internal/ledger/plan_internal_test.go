package ledger

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The plans are pure: these tests build them on a ledger without a store
// (any request would panic) and compare the expressions they would send.

var planT0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// offline is a ledger whose plans can be built but that sends nothing.
func offline(t *testing.T) *Ledger {
	t.Helper()
	l, err := New(struct{ DynamoDB }{}, Options{Table: "ledger", Clock: NewManualClock(planT0), Actor: "intake"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustCheck fails the test when u's placeholders are not as DynamoDB
// requires (every one used is defined, every one defined is used).
func mustCheck(t *testing.T, u *update) {
	t.Helper()
	if err := u.check(); err != nil {
		t.Fatalf("%v\nupdate: %s\ncondition: %s", err, u.expression(), aws.ToString(u.condition()))
	}
}

func TestUpdateRendersClausesAndChecksPlaceholders(t *testing.T) {
	u := (&update{}).Name("#status", "status").Value(":to", sv("DONE")).Value(":one", nv(1))
	u.Add("n :one").Remove("lease").Set("#status = :to").If("#status <> :to", "(a = :one OR attribute_not_exists(a))")
	if got, want := u.expression(), "SET #status = :to REMOVE lease ADD n :one"; got != want {
		t.Fatalf("expression %q, want %q", got, want)
	}
	if got, want := aws.ToString(u.condition()), "#status <> :to AND (a = :one OR attribute_not_exists(a))"; got != want {
		t.Fatalf("condition %q, want %q", got, want)
	}
	mustCheck(t, u)

	empty := (&update{}).Set("a = b")
	if empty.condition() != nil || empty.attrNames() != nil || empty.attrValues() != nil {
		t.Fatalf("an update without a condition, names or values must send none (DynamoDB refuses empty maps)")
	}
	in := empty.input("ledger", eventKey("s", "e"))
	if in.ConditionExpression != nil || in.ExpressionAttributeNames != nil || in.ExpressionAttributeValues != nil {
		t.Fatalf("input %+v", in)
	}

	for _, tc := range []struct {
		name string
		u    *update
		want string
	}{
		{"undefined value", (&update{}).Set("a = :x"), ":x is not defined"},
		{"undefined name", (&update{}).Set("#a = b"), "#a is not defined"},
		{"unused value", (&update{}).Set("a = b").Value(":x", nv(1)), ":x is defined but not used"},
		{"unused name", (&update{}).Set("a = b").Name("#a", "a"), "#a is defined but not used"},
		{"redefined", (&update{}).Set("a = :x").Value(":x", nv(1)).Value(":x", nv(2)), ":x is defined twice"},
	} {
		if err := tc.u.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
	if err := (&update{}).Set("a = :x").Value(":x", nv(1)).Value(":x", nv(1)).check(); err != nil {
		t.Fatalf("the same value defined twice: %v", err)
	}
}

func TestUpsertPlan(t *testing.T) {
	l := offline(t)
	const base = "SET #status = if_not_exists(#status, :status), #item = if_not_exists(#item, :itemev), " +
		"#source = if_not_exists(#source, :source), event_id = if_not_exists(event_id, :eid), " +
		"event_type = if_not_exists(event_type, :etype), received_at = if_not_exists(received_at, :now), " +
		"attempts = if_not_exists(attempts, :zero), total_attempts = if_not_exists(total_attempts, :zero), " +
		"payload_hash = if_not_exists(payload_hash, :hash), payload_size = if_not_exists(payload_size, :size), " +
		"payload_chunks = if_not_exists(payload_chunks, :chunks), payload_enc = if_not_exists(payload_enc, :enc), " +
		"audit = if_not_exists(audit, :audit), due_shard = if_not_exists(due_shard, if_not_exists(done_shard, :shard)), " +
		"due_at = if_not_exists(due_at, :now), "
	const sameFormNoAttrs = "(attribute_not_exists(#attrs.#form0) AND attribute_not_exists(#attrs.#form1))"
	big := []byte(strings.Repeat(`{"n":"`+strings.Repeat("x", 97)+`"}`, 4000)) // compresses above InlinePayloadMax
	tests := []struct {
		name      string
		d         Delivery
		update    string // the whole update expression; "" to check only has/hasNot
		has       []string
		hasNot    []string
		condition string
		vals      map[string]types.AttributeValue
	}{
		{
			name:      "a plain delivery",
			d:         Delivery{Source: "stripe", EventID: "evt_1", EventType: "invoice.paid", Payload: []byte(`{"id":"evt_1"}`)},
			update:    base + "dh%d = :hist, payload = if_not_exists(payload, :payload) ADD delivery_count :one",
			condition: "(attribute_not_exists(pk) OR payload_hash = :hash OR (NOT " + sameFormNoAttrs + " AND NOT (#status = :quar AND error_code = :replay AND total_attempts = :zero)))",
			vals:      map[string]types.AttributeValue{":status": sv("RECEIVED"), ":etype": sv("invoice.paid"), ":chunks": nv(0), ":enc": sv("raw")},
		},
		{
			name: "every optional field, in its form",
			d: Delivery{Source: "shopify", EventID: "ev_2", EventType: "orders/updated", Subject: "order_1", VersionHint: "7", DeliveryID: "d\x1b1",
				Attributes: map[string]string{"via": "eventbridge", "shop": "s"}, Payload: []byte(`{}`)},
			has: []string{"subject = if_not_exists(subject, :subject)", "version_hint = if_not_exists(version_hint, :vhint)",
				"attrs = if_not_exists(attrs, :attrs)", "first_delivery_id = if_not_exists(first_delivery_id, :did)"},
			condition: "(attribute_not_exists(pk) OR payload_hash = :hash OR (NOT (#attrs.#form0 = :form0 AND attribute_not_exists(#attrs.#form1)) AND NOT (#status = :quar AND error_code = :replay AND total_attempts = :zero)))",
			vals:      map[string]types.AttributeValue{":did": sv(`d\x1b1`), ":form0": sv("eventbridge")},
		},
		{
			name: "a delivery without identity",
			d: Delivery{Source: "stripe", EventID: "sha256:ab", Payload: []byte(`{}`), Quarantine: "no_identity",
				QuarantineReason: "no id in the body"},
			has:       []string{"error_code = if_not_exists(error_code, :code)", "error_message = if_not_exists(error_message, :msg)"},
			condition: "(attribute_not_exists(pk) OR payload_hash = :hash OR NOT " + sameFormNoAttrs + ") AND (attribute_not_exists(pk) OR #status <> :processed)",
			vals: map[string]types.AttributeValue{":status": sv("QUARANTINED"), ":etype": sv("unknown"), ":code": sv("no_identity"),
				":shard": sv(attentionPrefix + l.dueShard("stripe", "sha256:ab"))},
		},
		{
			name:   "a payload in chunks",
			d:      Delivery{Source: "stripe", EventID: "evt_3", EventType: "t", Payload: big},
			hasNot: []string{"payload = "},
			vals:   map[string]types.AttributeValue{":chunks": nv(1), ":enc": sv("gzip")},
		},
		{
			name:   "an empty payload",
			d:      Delivery{Source: "stripe", EventID: "evt_4", EventType: "t"},
			hasNot: []string{"payload = "},
			vals:   map[string]types.AttributeValue{":size": nv(0), ":chunks": nv(0)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, err := l.acceptInput(tc.d)
			if err != nil {
				t.Fatal(err)
			}
			u := upsertPlan(in, "intake")
			mustCheck(t, u)
			got := u.expression()
			if tc.update != "" {
				if want := strings.Replace(tc.update, "%d", string(rune('0'+in.slot)), 1); got != want {
					t.Fatalf("update\n got %s\nwant %s", got, want)
				}
			}
			if !strings.HasSuffix(got, " ADD delivery_count :one") {
				t.Fatalf("update %s: every delivery counts itself", got)
			}
			for _, c := range tc.has {
				if !strings.Contains(got, c) {
					t.Errorf("update lacks %q: %s", c, got)
				}
			}
			for _, c := range tc.hasNot {
				if strings.Contains(got, c) {
					t.Errorf("update has %q: %s", c, got)
				}
			}
			if tc.condition != "" && aws.ToString(u.condition()) != tc.condition {
				t.Fatalf("condition\n got %s\nwant %s", aws.ToString(u.condition()), tc.condition)
			}
			for ph, want := range tc.vals {
				if got := u.vals[ph]; !avEqual(got, want) {
					t.Errorf("%s = %#v, want %#v", ph, got, want)
				}
			}
		})
	}
}

func TestPrepareDelivery(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Delivery
		bad  bool
		want Delivery
	}{
		{name: "no source", d: Delivery{EventID: "e"}, bad: true},
		{name: "an id with a control character", d: Delivery{Source: "s", EventID: "e\x00"}, bad: true},
		{name: "a payload over the bound", d: Delivery{Source: "s", EventID: "e", Payload: make([]byte, MaxPayloadBytes+1)}, bad: true},
		{name: "no type", d: Delivery{Source: "s", EventID: "e"}, want: Delivery{Source: "s", EventID: "e", EventType: "unknown"}},
		{
			name: "free text escaped, never refused",
			d:    Delivery{Source: "s", EventID: "e", EventType: "a\u202eb", DeliveryID: "d\n", Attributes: map[string]string{"k\t": "v\x1b"}},
			want: Delivery{Source: "s", EventID: "e", EventType: `a\u202eb`, DeliveryID: `d\n`, Attributes: map[string]string{`k\t`: `v\x1b`}},
		},
	} {
		got, err := prepareDelivery(tc.d)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
			}
			continue
		}
		if err != nil || got.EventType != tc.want.EventType || got.DeliveryID != tc.want.DeliveryID || len(got.Attributes) != len(tc.want.Attributes) {
			t.Errorf("%s: %+v %v; want %+v", tc.name, got, err, tc.want)
		}
		for k, v := range tc.want.Attributes {
			if got.Attributes[k] != v {
				t.Errorf("%s: attribute %q = %q, want %q", tc.name, k, got.Attributes[k], v)
			}
		}
	}
}

func TestJudgeDelivery(t *testing.T) {
	l := offline(t)
	mine, err := l.acceptInput(Delivery{Source: "github", EventID: "101", Payload: []byte(`{"after":"bbb"}`)})
	if err != nil {
		t.Fatal(err)
	}
	bridged := mine
	bridged.d.Attributes = map[string]string{"via": "eventbridge"}
	quarantined := mine
	quarantined.status = StatusQuarantined
	replay := &Event{Status: StatusQuarantined, ErrorCode: CodeSuspectedReplay, PayloadHash: "other"}
	attempted := &Event{Status: StatusQuarantined, ErrorCode: CodeSuspectedReplay, PayloadHash: "other", TotalAttempts: 1}
	same := &Event{Status: StatusProcessed, PayloadHash: mine.payload.hash}
	other := &Event{Status: StatusProcessed, PayloadHash: "other"}
	for _, tc := range []struct {
		name     string
		in       acceptInput
		row      *Event
		recorded bool
		want     deliveryVerdict
	}{
		{"no row", mine, nil, true, deliveryNew},
		{"the same bytes", mine, same, true, deliveryDuplicate},
		{"other bytes in another form", bridged, other, true, deliveryDuplicate},
		{"other bytes in the same form", mine, other, false, deliveryConflicts},
		{"an untouched suspected replay", mine, replay, false, deliveryDisplaces},
		{"an untouched suspected replay, delivered in another form", bridged, replay, false, deliveryDisplaces},
		{"a suspected replay already attempted", mine, attempted, false, deliveryConflicts},
		{"a quarantined delivery never displaces", quarantined, replay, false, deliveryConflicts},
		{"a quarantined delivery of a processed row", quarantined, same, false, deliveryDuplicate},
	} {
		if got := judgeDelivery(tc.in, tc.row, tc.recorded); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDisplacePlan(t *testing.T) {
	l := offline(t)
	in, err := l.acceptInput(Delivery{Source: "github", EventID: "101", EventType: "push", DeliveryID: "d-2", Payload: []byte(`{"after":"bbb"}`)})
	if err != nil {
		t.Fatal(err)
	}
	replay := Event{Status: StatusQuarantined, ErrorCode: CodeSuspectedReplay, PayloadHash: "replayhash", DeliveryCount: 2,
		Attributes: map[string]string{"replay_of": "100"}}
	reason := displaceReason(in, replay)
	u := displacePlan(in, replay, "intake", reason)
	mustCheck(t, u)
	if got, want := aws.ToString(u.condition()), "#status = :quar AND error_code = :replay AND total_attempts = :zero AND payload_hash = :oldhash"; got != want {
		t.Fatalf("condition %q, want %q", got, want)
	}
	if !avEqual(u.vals[":oldhash"], sv("replayhash")) || !avEqual(u.vals[":shard"], sv(l.dueShard("github", "101"))) {
		t.Fatalf("values %v", u.vals)
	}
	expr := u.expression()
	_, removed, _ := strings.Cut(expr, " REMOVE ")
	for _, attr := range []string{"error_code", "error_message", "conflict_count", "last_conflict", "subject", "version_hint", "attrs"} {
		if !strings.Contains(", "+removed+",", ", "+attr+",") {
			t.Errorf("%s is not removed: %s", attr, expr)
		}
	}
	for i := range DeliveryHistorySlots {
		if slot := historyAttr(i); (i == in.slot) == strings.Contains(removed, slot) {
			t.Errorf("history slot %s (this delivery's: %v): %s", slot, i == in.slot, expr)
		}
	}
	for _, set := range []string{"first_delivery_id = :did", "payload = :payload", "delivery_count = :one", "audit = list_append(audit, :audit)"} {
		if !strings.Contains(expr, set) {
			t.Errorf("update lacks %q: %s", set, expr)
		}
	}
	if !strings.Contains(reason, `a replay of "100"`) || !strings.Contains(reason, "2 deliveries") {
		t.Fatalf("reason %q", reason)
	}
	ev := displacedEvent(in, replay, "intake", reason)
	if ev.Status != StatusReceived || ev.DeliveryCount != 1 || len(ev.Audit) != 1 || ev.Audit[0].Action != "displace_replay" {
		t.Fatalf("displaced row %+v", ev)
	}
}

func avEqual(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberN:
		y, ok := b.(*types.AttributeValueMemberN)
		return ok && x.Value == y.Value
	}
	return false
}

// commitInputs are a claimed event, a revision of its projection, two
// intents, and a watch plan that contradicts a performed intent with a
// compensation and an in-flight one without.
func commitInputs() (Claim, *ProjectionWrite, []Intent, watchPlan) {
	c := Claim{Event: Event{Source: "stripe", EventID: "evt_9", Subject: "sub_1"}, Owner: "proc-1", Token: "tok-9"}
	w := &ProjectionWrite{Name: "billing/subscription", Subject: "sub_1", Version: 9, Fingerprint: "fp9", State: map[string]any{"status": "canceled"}}
	intents := []Intent{
		{OperationID: "op-revoke", Kind: "entitlement.revoke", Subject: "sub_1", Policy: PolicyLatest},
		{OperationID: "op-mail", Kind: "notify", Subject: "sub_1", Payload: map[string]any{"to": "a@example.test"}},
	}
	watch := watchPlan{contra: []contradiction{
		{entry: WatchEntry{OperationID: "op-refund", Kind: "refund", Version: 7, Compensation: "refund.reverse"},
			intent: IntentState{OperationID: "op-refund", Kind: "refund", Status: IntentStatusSucceeded}, why: "status=canceled"},
		{entry: WatchEntry{OperationID: "op-ship", Kind: "ship", Version: 8},
			intent: IntentState{OperationID: "op-ship", Kind: "ship", Status: IntentStatusDispatching, LeaseToken: "lt"}, why: "status=canceled"},
	}}
	return c, w, intents, watch
}

// plannedCommit is the transaction commitTx plans for commitInputs.
func plannedCommit(t *testing.T) (commitTx, []Intent) {
	t.Helper()
	c, w, intents, watch := commitInputs()
	tx, err := offline(t).commitTx(c, w, intents, nil, watch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tx, intents
}

func TestCommitTxPlansEachWriteWithItsRole(t *testing.T) {
	tx, _ := plannedCommit(t)
	want := []struct {
		role txRole
		key  string // the item the write concerns
	}{
		{txRole{kind: txEventLease}, "event stripe/evt_9"},
		{txRole{kind: txProjectionGuard}, "projection billing/subscription/sub_1"},
		{txRole{kind: txNewIntent, intent: 0}, "intent op-revoke"},
		{txRole{kind: txNewIntent, intent: 1}, "intent op-mail"},
		{txRole{kind: txCompensation}, "intent " + CompensationID("op-refund")},
		{txRole{kind: txWatchedIntent}, "intent op-refund"},
		{txRole{kind: txWatchedIntent}, "intent op-ship"},
	}
	if len(tx.items) != len(want) || len(tx.roles) != len(want) {
		t.Fatalf("%d writes, %d roles; want %d", len(tx.items), len(tx.roles), len(want))
	}
	for i, wnt := range want {
		if tx.roles[i] != wnt.role || transactItemName(tx.items[i]) != wnt.key {
			t.Errorf("write %d: %+v on %s; want %+v on %s", i, tx.roles[i], transactItemName(tx.items[i]), wnt.role, wnt.key)
		}
	}
	if got := strings.Join(tx.ops, ","); got != "op-revoke,op-mail,"+CompensationID("op-refund") {
		t.Errorf("ops %s", got)
	}
	if got := strings.Join(tx.contradicted, ","); got != "op-refund,op-ship" {
		t.Errorf("contradicted %s", got)
	}
	if tx.result.Intents != 3 || len(tx.result.Operations) != 3 || tx.result.Operations[2].Kind != "refund.reverse" {
		t.Errorf("result %+v: the compensation is one of the commit's operations", tx.result)
	}

	event := tx.items[0].Update
	if got, want := aws.ToString(event.ConditionExpression), "#status = :proc AND lease_token = :tok"; got != want {
		t.Errorf("event condition %q, want %q", got, want)
	}
	if got := aws.ToString(event.UpdateExpression); !strings.HasPrefix(got, "SET #status = :done, processed_at = :now, #result = :res, expires_at = :ttl, done_shard = :dshard, audit = list_append(audit, :audit) REMOVE ") {
		t.Errorf("event update %q", got)
	}
	audit := event.ExpressionAttributeValues[":audit"].(*types.AttributeValueMemberL).Value[0].(*types.AttributeValueMemberS).Value
	if !strings.Contains(audit, "contradicts refund op-refund (SUCCEEDED), ship op-ship (DISPATCHING)") {
		t.Errorf("the event's audit does not name the contradicted intents: %q", audit)
	}
	for i, it := range tx.items[2:5] {
		if got := aws.ToString(it.Put.ConditionExpression); got != "attribute_not_exists(pk)" || it.Put.ExpressionAttributeValues != nil {
			t.Errorf("new intent %d: condition %q, values %v", i, got, it.Put.ExpressionAttributeValues)
		}
	}
	if _, ok := tx.items[3].Put.Item["payload"].(*types.AttributeValueMemberM); !ok {
		t.Errorf("intent payload %T", tx.items[3].Put.Item["payload"])
	}
	if _, ok := tx.items[2].Put.Item["payload"].(*types.AttributeValueMemberNULL); !ok {
		t.Errorf("an empty payload is stored as NULL, not %T", tx.items[2].Put.Item["payload"])
	}
	if li, ok := tx.items[1].Put.Item[attrLatestPref+"entitlement"]; !ok || li == nil {
		t.Errorf("the projection does not name its latest entitlement intent")
	}
	refund, ship := tx.items[5].Update, tx.items[6].Update
	if got := aws.ToString(refund.UpdateExpression); got != "SET contradicted_by = :by, audit = list_append(if_not_exists(audit, :empty), :audit), compensated_by = :cop" {
		t.Errorf("compensated intent: %q", got)
	}
	if got := aws.ToString(ship.ConditionExpression); got != "#status = :seen AND lease_token = :tok" {
		t.Errorf("in-flight intent condition %q", got)
	}
}

func TestCommitTxContradictsAPerformedIntentWithoutCompensation(t *testing.T) {
	l := offline(t)
	c, w, _, _ := commitInputs()
	watch := watchPlan{contra: []contradiction{{entry: WatchEntry{OperationID: "op-grant", Kind: "grant", Version: 3},
		intent: IntentState{OperationID: "op-grant", Kind: "grant", Status: IntentStatusSucceeded}, why: "x"}}}
	tx, err := l.commitTx(c, w, nil, nil, watch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tx.roles) != 3 || tx.roles[2].kind != txWatchedIntent || len(tx.ops) != 0 {
		t.Fatalf("roles %+v ops %v", tx.roles, tx.ops)
	}
	u := tx.items[2].Update
	if got, want := aws.ToString(u.UpdateExpression), "SET contradicted_by = :by, audit = list_append(if_not_exists(audit, :empty), :audit), "+
		"#status = :to, error_code = :code, detail = :detail, due_shard = :ashard, due_at = :now REMOVE expires_at"; got != want {
		t.Fatalf("update\n got %s\nwant %s", got, want)
	}
	if got := u.ExpressionAttributeValues[":ashard"].(*types.AttributeValueMemberS).Value; !strings.HasPrefix(got, attentionPrefix) {
		t.Fatalf("a contradicted intent waits on the attention shards, not %q", got)
	}
}

func TestProjectionGuard(t *testing.T) {
	w := &ProjectionWrite{Name: "p", Subject: "s", Version: 5, Fingerprint: "fp5"}
	for _, tc := range []struct {
		name string
		prev *Projection
		cond string
		vals []string
	}{
		{"no watch list known", nil,
			"attribute_not_exists(pk) OR (version < :v AND terminal = :f AND fingerprint <> :fp AND attribute_not_exists(watch_n))", []string{":f", ":fp", ":v"}},
		{"the projection as read", &Projection{Version: 4, Fingerprint: "fp4"},
			"version = :pv AND fingerprint = :pfp AND terminal = :f", []string{":f", ":pfp", ":pv"}},
	} {
		u := projectionGuard(w, tc.prev)
		mustCheck(t, u)
		if got := aws.ToString(u.condition()); got != tc.cond {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.cond)
		}
		if got := strings.Join(sortedKeys(u.vals), " "); got != strings.Join(tc.vals, " ") {
			t.Errorf("%s: values %s", tc.name, got)
		}
	}
}

func TestCommitDecidesByWhatFailed(t *testing.T) {
	tx, intents := plannedCommit(t)
	// The writes: 0 event, 1 projection, 2-3 intents, 4 compensation, 5-6 watched intents.
	ok := types.CancellationReason{Code: aws.String("None")}
	failed := func(item map[string]types.AttributeValue) types.CancellationReason {
		return types.CancellationReason{Code: aws.String("ConditionalCheckFailed"), Item: item}
	}
	code := func(c string) types.CancellationReason {
		return types.CancellationReason{Code: aws.String(c), Message: aws.String("because")}
	}
	reasons := func(set map[int]types.CancellationReason) []types.CancellationReason {
		out := make([]types.CancellationReason, len(tx.items))
		for i := range out {
			out[i] = ok
			if r, is := set[i]; is {
				out[i] = r
			}
		}
		return out
	}
	old := map[string]types.AttributeValue{"version": nv(9)}
	for _, tc := range []struct {
		name     string
		reasons  []types.CancellationReason
		want     cancelVerdict
		existing []int
		item     string // cancelUnstorable: the write named
	}{
		{"the event's lease", reasons(map[int]types.CancellationReason{0: failed(nil)}), cancelLeaseLost, nil, ""},
		{"the lease beside a refused value", reasons(map[int]types.CancellationReason{0: failed(nil), 1: code("ValidationError")}), cancelLeaseLost, nil, ""},
		{"a refused projection", reasons(map[int]types.CancellationReason{1: code("ValidationError")}), cancelUnstorable, nil, "projection billing/subscription/sub_1"},
		{"a refused intent beside the guard", reasons(map[int]types.CancellationReason{1: failed(old), 3: code("ValidationError")}), cancelUnstorable, nil, "intent op-mail"},
		{"throttled", reasons(map[int]types.CancellationReason{2: code("ThrottlingError")}), cancelRetryable, nil, ""},
		{"a concurrent transaction", reasons(map[int]types.CancellationReason{5: code("TransactionConflict")}), cancelRetryable, nil, ""},
		{"the projection's guard", reasons(map[int]types.CancellationReason{1: failed(old)}), cancelGuard, nil, ""},
		{"the guard beside an existing intent", reasons(map[int]types.CancellationReason{1: failed(old), 2: failed(nil)}), cancelGuard, nil, ""},
		{"an existing intent", reasons(map[int]types.CancellationReason{3: failed(nil)}), cancelPlanAgain, []int{1}, ""},
		{"both intents exist", reasons(map[int]types.CancellationReason{2: failed(nil), 3: failed(nil)}), cancelPlanAgain, []int{0, 1}, ""},
		{"a watched intent moved", reasons(map[int]types.CancellationReason{6: failed(nil)}), cancelPlanAgain, nil, ""},
		{"the compensation exists", reasons(map[int]types.CancellationReason{4: failed(nil)}), cancelPlanAgain, nil, ""},
		{"a reason past the last write", append(reasons(nil), failed(nil)), cancelPlanAgain, nil, ""},
	} {
		d := tx.decide(&types.TransactionCanceledException{CancellationReasons: tc.reasons})
		if d.verdict != tc.want {
			t.Errorf("%s: verdict %v, want %v", tc.name, d.verdict, tc.want)
			continue
		}
		var existing []int
		for i := range d.existing {
			existing = append(existing, i)
		}
		sort.Ints(existing)
		if fmt.Sprint(existing) != fmt.Sprint(tc.existing) && !(len(existing) == 0 && len(tc.existing) == 0) {
			t.Errorf("%s: existing intents %v, want %v", tc.name, existing, tc.existing)
		}
		if tc.want == cancelGuard && !avEqual(d.projection["version"], nv(9)) {
			t.Errorf("%s: the guard's refusal does not carry the projection: %v", tc.name, d.projection)
		}
		if tc.item != "" {
			var ue *UnstorableError
			if !errors.As(d.unstorable, &ue) || ue.Item != tc.item {
				t.Errorf("%s: %v; want a refusal naming %s", tc.name, d.unstorable, tc.item)
			}
		}
	}
	if got := withoutIntents(intents, map[int]bool{0: true}); len(got) != 1 || got[0].OperationID != "op-mail" {
		t.Fatalf("withoutIntents: %+v", got)
	}
}

func TestGuardAdmits(t *testing.T) {
	w := &ProjectionWrite{Version: 5, Fingerprint: "new"}
	for _, tc := range []struct {
		cur  Projection
		want bool
	}{
		{Projection{Version: 4, Fingerprint: "old"}, true},
		{Projection{Version: 4, Fingerprint: "new"}, false}, // newer version, same state: advance
		{Projection{Version: 5, Fingerprint: "old"}, false},
		{Projection{Version: 6, Fingerprint: "old"}, false},
		{Projection{Version: 4, Fingerprint: "old", Terminal: true}, false},
	} {
		if got := guardAdmits(tc.cur, w); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.cur, got, tc.want)
		}
	}
}
