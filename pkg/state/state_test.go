package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/state"
)

// getOnly is a client that can only read items, as a team's service role
// may be: every read of the package goes through GetItem, and, as with
// the construct's GrantReadState and GrantReadIntents, only of projection
// (PJ#) and intent (OP#) items; any other key is refused as IAM would.
type getOnly struct {
	db    *dynamodb.Client
	calls atomic.Int64
}

func (g *getOnly) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	g.calls.Add(1)
	pk, _ := in.Key["pk"].(*types.AttributeValueMemberS)
	if pk == nil || !(strings.HasPrefix(pk.Value, "PJ#") || strings.HasPrefix(pk.Value, "OP#")) {
		return nil, fmt.Errorf("AccessDeniedException: GetItem of %+v is outside GrantReadState and GrantReadIntents", in.Key["pk"])
	}
	return g.db.GetItem(ctx, in, opts...)
}

const drainTimeout, idle = 20 * time.Second, 2 * time.Second

// An order processed by the real pipeline (intake, processor, dispatcher
// against minidyn and goaws) reads back through the package: its state,
// version and time, and its refund and notice with their outcomes; then
// an operator's confirmation contradicts them, and the subject lists
// what its items record (the compensation), while the refund stays
// readable by its operation id.
func TestAnOrderReadsBackAsThePipelineWroteIt(t *testing.T) {
	ctx := context.Background()
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	db := &getOnly{db: h.DB}
	r := state.New(db, h.Table)

	before := h.Clock.Now()
	if resp := h.DeliverOrder("msg_o42_12", pt.OrderEvent("order.cancelled", "O-42", 12, "", "")); resp.Status != 202 {
		t.Fatalf("delivery: %d %s", resp.Status, resp.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	refund, notify := pt.OrderOps("O-42", 12)

	s, err := r.Subject(ctx, "orders", builtin.OrderProjection, "O-42")
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != "orders" || s.Projection != "order" || s.ID != "O-42" || s.Version != 12 || s.Terminal ||
		s.State["status"] != "cancelled" || fmt.Sprint(s.State["total_minor"]) != "12900" || s.LastEvent != "orders/msg_o42_12" {
		t.Fatalf("subject %+v", s)
	}
	if s.UpdatedAt.Before(before) || s.UpdatedAt.After(h.Clock.Now()) {
		t.Fatalf("updated at %s, want between %s and %s", s.UpdatedAt, before, h.Clock.Now())
	}
	if len(s.Intents) != 2 {
		t.Fatalf("intents %+v, want the refund and the notice", s.Intents)
	}
	kinds := map[string]state.Intent{}
	for _, in := range s.Intents {
		kinds[in.Kind] = in
	}
	for kind, op := range map[string]string{"refund": refund, "notify_cancellation": notify} {
		in := kinds[kind]
		if in.OperationID != op || in.Status != state.Succeeded || !in.Status.Done() || in.Policy != projection.PolicyWhileCurrent ||
			in.Version != 12 || in.Scope != "orders" || in.Source != "orders" || in.Causation != "orders/msg_o42_12" || in.Subject != "O-42" ||
			in.Attempts != 1 || in.CreatedAt.IsZero() || in.FinishedAt.Before(in.CreatedAt) || !in.UpdatedAt.Equal(in.FinishedAt) ||
			fmt.Sprint(in.Payload["order_id"]) != "O-42" {
			t.Fatalf("%s: %+v", kind, in)
		}
	}
	// The state alone is one read.
	n := db.calls.Load()
	st, err := r.State(ctx, "orders", builtin.OrderProjection, "O-42")
	if err != nil || st.Version != 12 || st.Intents != nil || db.calls.Load() != n+1 {
		t.Fatalf("state %+v %v after %d reads", st, err, db.calls.Load()-n)
	}

	// Another scope's O-42, and the unscoped one, are other subjects.
	for _, scope := range []string{"stripe", ""} {
		if _, err := r.Subject(ctx, scope, builtin.OrderProjection, "O-42"); !errors.Is(err, state.ErrNotFound) {
			t.Fatalf("scope %q: %v, want ErrNotFound", scope, err)
		}
	}

	// A minute later the operator confirms the order again, after both
	// were performed.
	h.Clock.Advance(time.Minute)
	if resp := h.DeliverOrder("msg_o42_13", pt.OrderEvent("order.confirmed", "O-42", 13, "confirmed", "")); resp.Status != 202 {
		t.Fatalf("delivery: %d %s", resp.Status, resp.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	s, err = r.Subject(ctx, "orders", builtin.OrderProjection, "O-42")
	if err != nil || s.Version != 13 || s.State["status"] != "confirmed" || s.LastEvent != "orders/msg_o42_13" {
		t.Fatalf("after the confirmation: %+v %v", s, err)
	}
	comp := projection.CompensationID(notify)
	if len(s.Intents) != 1 || s.Intents[0].OperationID != comp || s.Intents[0].Kind != "notify_reinstatement" ||
		s.Intents[0].Status != state.Succeeded || s.Intents[0].Policy != projection.PolicyOnce || s.Intents[0].Version != 13 {
		t.Fatalf("after the confirmation the subject lists %+v, want the compensation alone", s.Intents)
	}
	in, err := r.Intent(ctx, refund)
	if err != nil || in.Status != state.Contradicted || in.ContradictedBy != 13 || in.ErrorCode != "contradicted" ||
		!in.UpdatedAt.Equal(s.UpdatedAt) || !in.UpdatedAt.After(in.FinishedAt) {
		t.Fatalf("refund %+v %v, want CONTRADICTED by 13", in, err)
	}
	if in, err := r.Intent(ctx, notify); err != nil || in.Status != state.Succeeded || in.CompensatedBy != comp {
		t.Fatalf("notice %+v %v", in, err)
	}
	if _, err := r.Intent(ctx, "op-never-written"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("unknown intent: %v", err)
	}
}

// A state sync (latest policy) is listed through the projection item's
// newest intent of its family: the grant of an active subscription.
func TestASubscriptionListsItsLatestIntent(t *testing.T) {
	ctx := context.Background()
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	b := pt.SubscriptionEvent("evt_state_1", "customer.subscription.created", "sub_state_1", "active", pt.Start.Unix()-60, "acct_state_1")
	if resp := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); resp.Status != 202 {
		t.Fatalf("delivery: %d %s", resp.Status, resp.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	s, err := state.New(&getOnly{db: h.DB}, h.Table).Subject(ctx, "stripe", builtin.StripeSubscriptionProjection, "sub_state_1")
	if err != nil {
		t.Fatal(err)
	}
	if s.State["entitled"] != true || len(s.Intents) != 1 {
		t.Fatalf("subject %+v", s)
	}
	if in := s.Intents[0]; in.Kind != "entitlement.grant" || in.Policy != projection.PolicyLatest || in.Status != state.Succeeded ||
		in.Version != s.Version || in.Scope != "stripe" {
		t.Fatalf("grant %+v", in)
	}
}

// Names that cannot key a subject are refused before any read.
func TestNamesThatCannotKeyASubjectAreRefused(t *testing.T) {
	r := state.New(panicking{}, "ledger")
	ctx := context.Background()
	for _, c := range [][3]string{{"a/b", "order", "O-1"}, {"orders", "", "O-1"}, {"orders", "x/order", "O-1"}, {"orders", "order", ""}} {
		if _, err := r.Subject(ctx, c[0], c[1], c[2]); err == nil || errors.Is(err, state.ErrNotFound) {
			t.Errorf("%q: %v", c, err)
		}
	}
	if _, err := r.Intent(ctx, ""); err == nil {
		t.Error("an empty operation id was read")
	}
}

type panicking struct{}

func (panicking) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	panic("read")
}
