package capacity

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// StackRow is one Stripe event measured on the running local stack by the
// WireMeter: write units per function and phase.
type StackRow struct {
	PayloadBytes                               int
	Process, Duplicate, DuplicateAgain, Effect map[string]Totals // by function ("intake", "processor", "dispatcher")
	EventItemBytes                             int
	Owner                                      string // the processor's name, as its claim's audit entry has it
}

// ProcessedUnits is delivery → processed: every write until the event was
// PROCESSED, by intake and processor.
func (r StackRow) ProcessedUnits() int {
	return r.Process["intake"].Units() + r.Process["processor"].Units()
}

// MeasureOnStack starts the local stack (the real bootstraps under
// aws-lambda-rie, as `make dev` runs them; fast profile, the reconciler's
// schedule out of the way) with a WireMeter in front of its DynamoDB, and
// sends one signed Stripe subscription event of each size through its HTTP
// API, then the same event twice more. After each step it waits until the
// stack is done (the event PROCESSED and its effect SUCCEEDED, or the
// duplicate recorded) and quiet, and bills what every function wrote.
func MeasureOnStack(ctx context.Context, root string, log io.Writer, sizes []int) ([]StackRow, error) {
	wm := &WireMeter{}
	cfg := devstack.Config{Root: root, BuildDir: filepath.Join(os.TempDir(), "capacity-devstack"), AutoPorts: true, DynamoWrap: wm.Wrap}
	cfg.FastProfile()
	cfg.ScheduleRate = 24 * time.Hour // its drift check writes subject cursors: not this measurement's
	logs := devstack.NewLogs(log)
	if err := devstack.Build(ctx, cfg, logs); err != nil {
		return nil, err
	}
	stack, err := devstack.Start(ctx, cfg, logs)
	if err != nil {
		return nil, err
	}
	defer stack.Close()
	file, _, err := devstack.LoadFile(filepath.Join(root, "scripts", "devstack.json"))
	if err != nil {
		return nil, err
	}
	secret := file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET"]
	m := &Meter{Reader: stack.DB, Table: stack.Table(), TableKeys: []string{"pk", "sk"},
		Indexes: []Index{{Name: ledger.DueIndex, HashKey: "due_shard", RangeKey: "due_at", Projected: ledger.DueIndexAttributes}}}
	wm.SetMeter(m)
	led, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		return nil, err
	}
	post := func(body []byte, want int) error {
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()}).Header
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, stack.HTTPURL()+"/webhooks/stripe", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sig)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		if res.StatusCode != want {
			return fmt.Errorf("POST answered %d, want %d", res.StatusCode, want)
		}
		return nil
	}
	// settle waits until done holds and then until no write was billed for
	// a while, and returns the writes by function.
	settle := func(what string, done func() (bool, error)) (map[string]Totals, error) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok, err := done()
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s: not done after 60 s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var ws []WireWrite
		for quiet := 0; quiet < 10; {
			time.Sleep(100 * time.Millisecond)
			if more := wm.Writes(); len(more) > 0 {
				ws, quiet = append(ws, more...), 0
				continue
			}
			quiet++
		}
		return Sum(ws), nil
	}
	var rows []StackRow
	for _, size := range sizes {
		id := fmt.Sprintf("evt_capacity_%d", size) // as the rig names it: the same sizes
		body := PaddedSubscriptionEvent(id, size, time.Now(), Realistic)
		row := StackRow{PayloadBytes: len(body)}
		wm.Writes()
		if err := post(body, http.StatusAccepted); err != nil {
			return nil, err
		}
		processed := func() (bool, error) {
			ev, err := led.Get(ctx, "stripe", id)
			return err == nil && ev.Status == ledger.StatusProcessed, nil
		}
		if row.Process, err = settle("processing", processed); err != nil {
			return nil, err
		}
		// The processor's writes end at its commit; the dispatcher's come
		// after. Split them by function.
		row.Effect = map[string]Totals{"dispatcher": row.Process["dispatcher"]}
		delete(row.Process, "dispatcher")
		ev, err := led.Get(ctx, "stripe", id)
		if err != nil || ev.Result == nil || len(ev.Result.Operations) != 1 {
			return nil, fmt.Errorf("event %s: %+v %v", id, ev.Result, err)
		}
		op := ev.Result.Operations[0].ID
		effect, err := settle("dispatch", func() (bool, error) {
			in, err := led.GetIntentState(ctx, op)
			return err == nil && in.Status == ledger.IntentStatusSucceeded, nil
		})
		if err != nil {
			return nil, err
		}
		row.Effect = merge(row.Effect, effect)
		for _, a := range ev.Audit {
			if a.Action == "claim" {
				row.Owner = a.Actor
			}
		}
		row.EventItemBytes = m.ItemBytes(ctx, map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "EV#stripe#" + id}, "sk": &types.AttributeValueMemberS{Value: "EV"}})
		for i, dst := range []*map[string]Totals{&row.Duplicate, &row.DuplicateAgain} {
			if err := post(body, http.StatusOK); err != nil {
				return nil, fmt.Errorf("duplicate %d: %w", i+1, err)
			}
			want := ev.DeliveryCount + i + 1
			if *dst, err = settle("duplicate", func() (bool, error) {
				e, err := led.Get(ctx, "stripe", id)
				return err == nil && e.DeliveryCount >= want, nil
			}); err != nil {
				return nil, err
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func merge(a, b map[string]Totals) map[string]Totals {
	for f, t := range b {
		s := a[f]
		for op, o := range t.ByOp {
			s.add(op, o)
		}
		a[f] = s
	}
	return a
}

// WriteStackTable renders rows measured on the stack next to the
// in-process rig's rows for the same sizes, with whether they agree.
func WriteStackTable(w io.Writer, stack []StackRow, rig []Row) {
	fmt.Fprintln(w, "| payload | processor's name on the stack | event item: rig, stack | intake | processing | effect | duplicate: first, later | delivery → processed: rig, stack |")
	fmt.Fprintln(w, "|---:|---|---|---|---|---|---|---|")
	for i, s := range stack {
		r := rig[i]
		fmt.Fprintf(w, "| %d B | `%s` | %d B, %d B | %s | %s | %s | %s, %s | %d, **%d WU** |\n", s.PayloadBytes, s.Owner, r.EventItemBytes, s.EventItemBytes,
			pair(r.Intake, s.Process["intake"]), pair(r.Process, s.Process["processor"]), pair(r.Effect, s.Effect["dispatcher"]),
			pair(r.Duplicate, s.Duplicate["intake"]), pair(r.DuplicateAgain, s.DuplicateAgain["intake"]), r.ProcessedUnits(), s.ProcessedUnits())
	}
}

func pair(rig, stack Totals) string {
	mark := "="
	if rig.Units() != stack.Units() {
		mark = "≠"
	}
	return fmt.Sprintf("%d %s %d WU (%s)", rig.Units(), mark, stack.Units(), stack)
}

// Disagreements lists the phases where the stack's units differ from the
// rig's, and writes billed to a function outside its phase.
func Disagreements(stack []StackRow, rig []Row) []string {
	var out []string
	for i, s := range stack {
		r := rig[i]
		for _, c := range []struct {
			phase     string
			rig, seen Totals
		}{
			{"intake", r.Intake, s.Process["intake"]}, {"processing", r.Process, s.Process["processor"]},
			{"effect", r.Effect, s.Effect["dispatcher"]}, {"first duplicate", r.Duplicate, s.Duplicate["intake"]},
			{"later duplicate", r.DuplicateAgain, s.DuplicateAgain["intake"]},
		} {
			if c.rig.Units() != c.seen.Units() {
				out = append(out, fmt.Sprintf("%d B %s: rig %d WU (%s), stack %d WU (%s)", s.PayloadBytes, c.phase, c.rig.Units(), c.rig, c.seen.Units(), c.seen))
			}
		}
		for _, f := range functionsOf(s.Process) {
			if f != "intake" && f != "processor" {
				out = append(out, fmt.Sprintf("%d B: %q wrote while the event was processed: %s", s.PayloadBytes, f, s.Process[f]))
			}
		}
	}
	return out
}
