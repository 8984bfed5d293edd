package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
	"github.com/effectively-once/webhooks/internal/queue"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fixture is one isolated ledger table and queue set on the emulators,
// spoken to over the wire, with a manual clock.
type fixture struct {
	t       *testing.T
	DB      *dynamodb.Client
	SQS     *sqs.Client
	Clock   *ledger.ManualClock
	L       *ledger.Ledger // the pipeline's view, for setting up and asserting
	Prefix  string
	Events  queue.URLs
	Effects queue.URLs
	// Limiter, when set, paces bulk replays instead of the wall clock.
	Limiter operator.Limiter
	// Env adds environment variables (an empty value unsets one).
	Env map[string]string
	// STS answers GetCallerIdentity for the operator's credentials.
	STS *fakeSTS
}

// callerARN is the fixture operator's AWS identity, and aliceActor what
// the audit records for their writes by default: $USER@hostname and it.
const (
	callerARN  = "arn:aws:sts::123456789012:assumed-role/Ops/alice"
	aliceActor = "alice@ops-box (" + callerARN + ")"
)

// fakeSTS answers GetCallerIdentity with ARN, or fails with Err; it counts
// the calls.
type fakeSTS struct {
	mu    sync.Mutex
	ARN   string
	Err   error
	Calls int
}

func (s *fakeSTS) GetCallerIdentity(context.Context, *sts.GetCallerIdentityInput, ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls++
	if s.Err != nil {
		return nil, s.Err
	}
	return &sts.GetCallerIdentityOutput{Arn: aws.String(s.ARN), Account: aws.String("123456789012"), UserId: aws.String("AROAFAKE:alice")}, nil
}

func (s *fakeSTS) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Calls
}

// emulated is a ledger table and the two queue pairs on the emulators.
type emulated struct {
	DynamoURL, SQSURL string
	DB                *dynamodb.Client
	SQS               *sqs.Client
	Events, Effects   queue.URLs
}

func newEmulated(t *testing.T, table, prefix string) emulated {
	t.Helper()
	ctx := context.Background()
	d := localaws.NewDynamo()
	t.Cleanup(d.Close)
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	e := emulated{DynamoURL: d.URL, SQSURL: sq.URL, DB: d.Client(), SQS: sq.Client()}
	if err := ledger.CreateTable(ctx, e.DB, table); err != nil {
		t.Fatal(err)
	}
	if e.Events, err = queue.Create(ctx, e.SQS, queue.Events(prefix)); err != nil {
		t.Fatal(err)
	}
	if e.Effects, err = queue.Create(ctx, e.SQS, queue.Effects(prefix)); err != nil {
		t.Fatal(err)
	}
	return e
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	prefix := localaws.UniqueName("op") + "-"
	e := newEmulated(t, "ledger", prefix)
	f := &fixture{t: t, DB: e.DB, SQS: e.SQS, Clock: ledger.NewManualClock(t0), Prefix: prefix, Events: e.Events, Effects: e.Effects,
		STS: &fakeSTS{ARN: callerARN}}
	var mu sync.Mutex
	n := 0
	var err error
	f.L, err = ledger.New(f.DB, ledger.Options{Table: "ledger", Clock: f.Clock, Actor: "intake", Tokens: func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("tok-%d", n)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// run runs webhookctl against the fixture, as operator alice on ops-box
// whose AWS credentials are callerARN, with the table and the queue prefix
// given as flags.
func (f *fixture) run(args ...string) (stdout, stderr string, code int) {
	return f.runCtx(context.Background(), args...)
}

func (f *fixture) runCtx(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	var out, errOut bytes.Buffer
	env := map[string]string{"USER": "alice"}
	for k, v := range f.Env {
		env[k] = v
	}
	e := operator.Env{
		Getenv:   func(k string) string { return env[k] },
		Hostname: func() (string, error) { return "ops-box", nil },
		Stdout:   &out, Stderr: &errOut, Clock: f.Clock,
		Connect: func(context.Context, operator.Settings, func(string) string) (operator.Clients, error) {
			return operator.Clients{DynamoDB: f.DB, SQS: f.SQS, STS: f.STS}, nil
		},
	}
	if f.Limiter != nil {
		e.NewLimiter = func(time.Duration) operator.Limiter { return f.Limiter }
	} else {
		e.NewLimiter = func(time.Duration) operator.Limiter { return noWait{} }
	}
	code = operator.Run(ctx, append([]string{"--table", "ledger", "--prefix", f.Prefix}, args...), e)
	return out.String(), errOut.String(), code
}

type noWait struct{}

func (noWait) Wait(ctx context.Context) error { return ctx.Err() }

// mustRun runs a command that must succeed.
func (f *fixture) mustRun(args ...string) string {
	f.t.Helper()
	out, errOut, code := f.run(args...)
	if code != 0 {
		f.t.Fatalf("webhookctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// accept writes a RECEIVED event of source "stripe" unless src says otherwise.
func (f *fixture) accept(src, id, typ, payload string) {
	f.t.Helper()
	d := ledger.Delivery{Source: src, EventID: id, EventType: typ, DeliveryID: "d-" + id, Payload: []byte(payload)}
	if _, err := f.L.Accept(context.Background(), d); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) claim(src, id string) ledger.Claim {
	f.t.Helper()
	c, err := f.L.Claim(context.Background(), src, id, ledger.ClaimOptions{Owner: "worker-1", Lease: time.Minute, AllowRedrive: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) dead(src, id, typ string) {
	f.t.Helper()
	f.accept(src, id, typ, `{"id":"`+id+`"}`)
	if err := f.L.Dead(context.Background(), f.claim(src, id), "commit_failed", "downstream lookup timed out"); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) event(src, id string) ledger.Event {
	f.t.Helper()
	ev, err := f.L.Get(context.Background(), src, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return ev
}

// pointers drains a queue and returns the event pointers on it.
func (f *fixture) pointers(url string) []queue.Pointer {
	f.t.Helper()
	return drain(f.t, f.SQS, url)
}

// drain receives and deletes every message of a queue (localaws.Drain:
// with an explicit visibility, which a DLQ on goaws lacks, and every
// message even when an answer is lost).
func drain(t *testing.T, c *sqs.Client, url string) []queue.Pointer {
	t.Helper()
	msgs, err := localaws.Drain(context.Background(), c, url)
	if err != nil {
		t.Fatal(err)
	}
	var got []queue.Pointer
	for _, m := range msgs {
		p, err := queue.ParsePointer(aws.ToString(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	return got
}

// actions lists an audit trail's actions.
func actions(trail []ledger.AuditEntry) []string {
	out := make([]string, len(trail))
	for i, e := range trail {
		out[i] = e.Action
	}
	return out
}

// count counts the entries with one action.
func count(trail []ledger.AuditEntry, action string) int {
	n := 0
	for _, e := range trail {
		if e.Action == action {
			n++
		}
	}
	return n
}

func requireEqual(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n--- got ---\n%s\n--- want ---\n%s", what, got, want)
	}
}

// webhookctl does not link the harness, so it keeps its own copy of the
// emulators' region and fake credentials: they must stay the same.
func TestLocalConstantsMatchTheEmulators(t *testing.T) {
	if operator.LocalRegion != localaws.Region || operator.LocalAccessKey != localaws.FakeAccessKey || operator.LocalSecretKey != localaws.FakeSecretKey {
		t.Fatalf("operator's local settings %q/%q differ from localaws's %q/%q", operator.LocalRegion, operator.LocalAccessKey, localaws.Region, localaws.FakeAccessKey)
	}
}
