package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/state"
)

// projectionsOnly is a client whose role has GrantReadState alone: IAM
// authorizes a TransactGetItems as a GetItem of each item, so any item
// outside the projection items (PJ#) is refused, as IAM would.
type projectionsOnly struct {
	getOnly
	transacts atomic.Int64
}

func (p *projectionsOnly) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	p.transacts.Add(1)
	for _, it := range in.TransactItems {
		pk, _ := it.Get.Key["pk"].(*types.AttributeValueMemberS)
		if pk == nil || !strings.HasPrefix(pk.Value, "PJ#") {
			return nil, fmt.Errorf("AccessDeniedException: GetItem of %+v is outside GrantReadState", it.Get.Key["pk"])
		}
	}
	return p.db.TransactGetItems(ctx, in, opts...)
}

// A subscription fed by two event families (its own customer.subscription
// events and its invoices, projected onto the subscription id by two
// projections, each under its own version rule) reads back in one
// consistent read, and the team's combine function gives the access the
// business rule says: suspended after a failed payment, and ended once the
// subscription is deleted, even when a paid invoice comes after.
func TestASubscriptionAndItsInvoicesReadBackTogether(t *testing.T) {
	ctx := context.Background()
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	reg.Register("stripe", pt.SubscriptionPayments{}.EventTypes(), pt.SubscriptionPayments{})
	h := pt.NewChaos(t, pt.Options{Registry: reg}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	db := &projectionsOnly{getOnly: getOnly{db: h.DB}}
	r := state.New(db, h.Table)
	t0 := pt.Start.Unix() - 600
	deliver := func(body []byte) {
		t.Helper()
		if resp := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); resp.Status != 202 {
			t.Fatalf("delivery: %d %s", resp.Status, resp.Body)
		}
		h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	}
	names := []string{builtin.StripeSubscriptionProjection, pt.SubscriptionPaymentProjection}

	// No event of the subject yet: not found, and nothing but projection
	// items read.
	if _, err := r.Components(ctx, "stripe", "sub_c1", names...); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("before any event: %v, want ErrNotFound", err)
	}

	// The subscription alone: its component is there, the payments' is absent.
	deliver(pt.SubscriptionEvent("evt_c1", "customer.subscription.created", "sub_c1", "active", t0, "acct_c1"))
	c, err := r.Components(ctx, "stripe", "sub_c1", names...)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Subjects) != 1 || c.Subjects[builtin.StripeSubscriptionProjection].Version != t0*4+1 || c.Scope != "stripe" || c.ID != "sub_c1" {
		t.Fatalf("components %+v, want the subscription at version %d alone", c, t0*4+1)
	}
	if got := pt.Access(c.States())["access"]; got != "active" {
		t.Fatalf("access %v, want active", got)
	}

	// A failed payment suspends it.
	deliver(pt.InvoiceEvent("evt_c2", "invoice.payment_failed", "in_c1", "sub_c1", t0+60))
	c, err = r.Components(ctx, "stripe", "sub_c1", names...)
	if err != nil {
		t.Fatal(err)
	}
	pay := c.Subjects[pt.SubscriptionPaymentProjection]
	if pay.Version != (t0+60)*4+1 || pay.State["payment"] != "failed" || pay.LastEvent != "stripe/evt_c2" || pay.Projection != pt.SubscriptionPaymentProjection {
		t.Fatalf("payment component %+v", pay)
	}
	if got := pt.Access(c.States())["access"]; got != "suspended" {
		t.Fatalf("access %v after a failed payment, want suspended", got)
	}

	// Deleted, then the last invoice is paid: each component holds its
	// own newest version, and the subscription's end wins.
	deliver(pt.SubscriptionEvent("evt_c3", "customer.subscription.deleted", "sub_c1", "canceled", t0+120, "acct_c1"))
	deliver(pt.InvoiceEvent("evt_c4", "invoice.paid", "in_c1", "sub_c1", t0+180))
	n := db.transacts.Load()
	c, err = r.Components(ctx, "stripe", "sub_c1", names...)
	if err != nil {
		t.Fatal(err)
	}
	sub := c.Subjects[builtin.StripeSubscriptionProjection]
	if !sub.Terminal || sub.Version != builtin.DeletedVersionBase+(t0+120)*4+3 || c.Subjects[pt.SubscriptionPaymentProjection].State["payment"] != "paid" {
		t.Fatalf("components %+v", c.Subjects)
	}
	if got := pt.Access(c.States())["access"]; got != "ended" {
		t.Fatalf("access %v after the deletion and a late payment, want ended", got)
	}
	if db.transacts.Load() != n+1 || db.calls.Load() != 0 {
		t.Fatalf("%d TransactGetItems and %d GetItem calls for one read, want one TransactGetItems", db.transacts.Load()-n, db.calls.Load())
	}

	// Another scope's subject is another subject.
	if _, err := r.Components(ctx, "billing", "sub_c1", names...); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("another scope: %v, want ErrNotFound", err)
	}
}

// What cannot be read together is refused before any read, and a client
// without TransactGetItems is told so.
func TestComponentsRefuseWhatCannotBeReadTogether(t *testing.T) {
	ctx := context.Background()
	r := state.New(panicking{}, "ledger")
	for _, names := range [][]string{nil, {"a", "a"}, {"a", ""}, {"a/b"}, make([]string, state.MaxComponents+1)} {
		if _, err := r.Components(ctx, "stripe", "sub_1", names...); err == nil || errors.Is(err, state.ErrNotFound) {
			t.Errorf("%q: %v", names, err)
		}
	}
	if _, err := r.Components(ctx, "a/b", "sub_1", "x"); err == nil {
		t.Error("a scope with / was read")
	}
	if _, err := r.Components(ctx, "stripe", "", "x"); err == nil {
		t.Error("an empty subject was read")
	}
	_, err := r.Components(ctx, "stripe", "sub_1", "x", "y")
	if err == nil || !strings.Contains(err.Error(), "TransactGetter") {
		t.Fatalf("a client without TransactGetItems: %v", err)
	}
}
