package loadgen

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Sources the generator sends to: the local stack's names for them
// (scripts/devstack.json).
const (
	SourceStripe = "stripe"
	SourceOrders = "orders"
)

// Secrets are the signing secrets of the stack's sources: the visibly fake
// local ones from scripts/devstack.json.
type Secrets struct {
	Stripe     string // LOCAL_STRIPE_WEBHOOK_SECRET
	StripeNext string // LOCAL_STRIPE_WEBHOOK_SECRET_NEXT (rotation); optional
	Orders     string // LOCAL_ORDERS_WEBHOOK_SECRET (whsec_<base64>)
}

// LocalSecrets picks the stack's secrets out of the "secrets" map of
// scripts/devstack.json.
func LocalSecrets(file map[string]string) Secrets {
	return Secrets{Stripe: file["LOCAL_STRIPE_WEBHOOK_SECRET"], StripeNext: file["LOCAL_STRIPE_WEBHOOK_SECRET_NEXT"], Orders: file["LOCAL_ORDERS_WEBHOOK_SECRET"]}
}

// Intent is an effect the model expects an applied event to create.
type Intent struct {
	OperationID string `json:"operation_id"`
	Kind        string `json:"kind"`
}

// Event is one provider fact the generator made up.
type Event struct {
	Source  string
	ID      string
	Subject string
	Step    int  // position in its subject's lifecycle, from 0
	Last    bool // the subject's final step: it must end applied
	Status  string
	Body    []byte
	// Intents are the effects the event creates when it is applied.
	Intents []Intent
}

// Key is the event's ledger identity, source/event_id.
func (e *Event) Key() string { return e.Source + "/" + e.ID }

var (
	stripeStatuses = []string{"trialing", "active", "past_due", "canceled"}
	orderStatuses  = []string{"created", "confirmed", "cancelled"}
)

// subject is one subscription or order moving through its lifecycle.
type subject struct {
	source  string
	id      string
	account string
	created int64 // Stripe: the first event's created (seconds)
	step    int
}

// model makes up events. It is deterministic for a seed and a run tag.
type model struct {
	run         string
	rng         *rand.Rand
	stripeShare float64
	open        []*subject // subjects with steps left
	maxOpen     int
	n           int
	base        int64
}

func newModel(run string, seed uint64, stripeShare float64, base time.Time) *model {
	return &model{run: run, rng: rand.New(rand.NewPCG(seed, 0x10ad)), stripeShare: stripeShare, maxOpen: 16, base: base.Unix() - 3600}
}

// next returns the next new event: a step of an open subject or the first
// step of a new one.
func (m *model) next() *Event {
	if len(m.open) > 0 && (len(m.open) >= m.maxOpen || m.rng.Float64() < 0.6) {
		i := m.rng.IntN(len(m.open))
		s := m.open[i]
		ev := m.event(s)
		if ev.Last {
			m.open = append(m.open[:i], m.open[i+1:]...)
		}
		return ev
	}
	m.n++
	s := &subject{}
	if m.rng.Float64() < m.stripeShare {
		s.source = SourceStripe
		s.id = fmt.Sprintf("sub_load%s_%05d", m.run, m.n)
		s.account = fmt.Sprintf("acct_load%s_%05d", m.run, m.n)
		s.created = m.base + int64(m.n)*10
	} else {
		s.source = SourceOrders
		s.id = fmt.Sprintf("O-L%s-%05d", m.run, m.n)
	}
	m.open = append(m.open, s)
	return m.event(s)
}

// event makes the subject's next step.
func (m *model) event(s *subject) *Event {
	step := s.step
	s.step++
	if s.source == SourceStripe {
		return stripeEvent(s, step)
	}
	return orderEvent(s, step)
}

func stripeEvent(s *subject, step int) *Event {
	status := stripeStatuses[step]
	typ, rank := "customer.subscription.updated", int64(2)
	if step == 0 {
		typ, rank = "customer.subscription.created", 1
	}
	created := s.created + int64(step)
	id := fmt.Sprintf("evt_%s_%d", s.id[4:], step)
	body := fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":%q,"livemode":false,"pending_webhooks":1,`+
		`"data":{"object":{"id":%q,"object":"subscription","customer":"cus_%s","status":%q,"cancel_at_period_end":false,"metadata":{"account_id":%q},`+
		`"items":{"object":"list","data":[{"id":"si_%s","current_period_end":1800000000,"price":{"id":"price_load_pro"}}]}}}}`,
		id, created, typ, s.id, s.id[4:], status, s.account, s.id[4:])
	kind := "entitlement.revoke"
	if status != "canceled" {
		kind = "entitlement.grant"
	}
	version := strconv.FormatInt(created*4+rank, 10)
	return &Event{Source: SourceStripe, ID: id, Subject: s.id, Step: step, Last: step == len(stripeStatuses)-1, Status: status, Body: body,
		Intents: []Intent{{OperationID: projection.ScopedOperationID(SourceStripe, projection.OperationID(builtin.StripeSubscriptionProjection, s.id, kind, version)), Kind: kind}}}
}

func orderEvent(s *subject, step int) *Event {
	status := orderStatuses[step]
	rev := step + 1
	id := fmt.Sprintf("msg_%s_r%d", s.id, rev)
	body := fmt.Appendf(nil, `{"type":"order.updated","timestamp":"2026-11-30T12:00:%02dZ","data":{"id":%q,"revision":%d,"status":%q,"customer_id":"cus_%s","currency":"eur","total_minor":4200}}`,
		rev, s.id, rev, status, s.id)
	ev := &Event{Source: SourceOrders, ID: id, Subject: s.id, Step: step, Last: step == len(orderStatuses)-1, Status: status, Body: body}
	if status == "cancelled" {
		r := strconv.Itoa(rev)
		ev.Intents = []Intent{
			{OperationID: projection.ScopedOperationID(SourceOrders, projection.OperationID(s.id, "refund_due_to_cancellation", r)), Kind: "refund"},
			{OperationID: projection.ScopedOperationID(SourceOrders, projection.OperationID(s.id, "notify_cancellation", r)), Kind: "notify_cancellation"},
		}
	}
	return ev
}

// Variant is how a delivery's headers are made: the original way, or
// another legitimate way for a re-send.
type Variant int

// The header variants.
const (
	VariantPlain    Variant = iota // Stripe-Signature with one v1; webhook-* headers
	VariantRotation                // Stripe: v1 for both active secrets; orders: svix-* headers
)

// Request is one signed delivery, ready to send.
type Request struct {
	Path    string // /webhooks/{source}
	Body    []byte
	Headers map[string]string
}

// Sign signs ev for a send at now.
func Sign(ev *Event, s Secrets, v Variant, now time.Time) (Request, error) {
	r := Request{Path: "/webhooks/" + ev.Source, Body: ev.Body, Headers: map[string]string{"Content-Type": "application/json"}}
	ts := strconv.FormatInt(now.Unix(), 10)
	switch ev.Source {
	case SourceStripe:
		if s.Stripe == "" {
			return r, fmt.Errorf("%w: no stripe secret", ErrConfig)
		}
		header := "t=" + ts + ",v1=" + stripeV1(s.Stripe, ts, ev.Body)
		if v == VariantRotation && s.StripeNext != "" {
			header += ",v1=" + stripeV1(s.StripeNext, ts, ev.Body)
		}
		r.Headers["Stripe-Signature"] = header
		r.Headers["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks) loadgen"
	case SourceOrders:
		wh, err := standardwebhooks.NewWebhook(s.Orders)
		if err != nil {
			return r, fmt.Errorf("%w: orders secret: %v", ErrConfig, err)
		}
		sig, err := wh.Sign(ev.ID, now, ev.Body)
		if err != nil {
			return r, fmt.Errorf("sign %s: %w", ev.Key(), err)
		}
		prefix := "webhook-"
		if v == VariantRotation {
			prefix = "svix-"
		}
		r.Headers[prefix+"id"] = ev.ID
		r.Headers[prefix+"timestamp"] = ts
		r.Headers[prefix+"signature"] = sig
	default:
		return r, fmt.Errorf("%w: unknown source %q", ErrConfig, ev.Source)
	}
	return r, nil
}

// stripeV1 is Stripe's v1 scheme: hex HMAC-SHA256(secret, t + "." + body).
func stripeV1(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// expected returns the intents an event's ledger row says it must have
// created: the model's intents when the row is PROCESSED applied.
func expected(ev *Event, row ledger.Event) []Intent {
	if row.Status != ledger.StatusProcessed || row.Result == nil || row.Result.Outcome != ledger.OutcomeApplied {
		return nil
	}
	return ev.Intents
}
