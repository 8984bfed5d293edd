package operator_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
	"github.com/effectively-once/webhooks/internal/queue"
)

func TestBadInputExitsNonZeroWithAClearError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dead("stripe", "evt_1", "invoice.paid")
	notCP := filepath.Join(t.TempDir(), "not-a-checkpoint.json")
	if err := os.WriteFile(notCP, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "Usage:"},
		{[]string{"bogus"}, 2, `webhookctl: usage: unknown command "bogus" (webhookctl --help)`},
		{[]string{"events"}, 2, "webhookctl: usage: events needs a subcommand: list, show"},
		{[]string{"events", "show", "stripe"}, 2, "webhookctl: usage: events show takes SOURCE EVENT_ID, got 1 arguments (webhookctl events show --help)"},
		{[]string{"events", "list", "--nope"}, 2, "webhookctl: usage: events list: flag provided but not defined: -nope (webhookctl events list --help)"},
		{[]string{"events", "list", "--status", "LOST"}, 2, `webhookctl: usage: unknown status "LOST" (want one of RECEIVED, PROCESSING, RETRY_WAIT, DEAD, QUARANTINED, PROCESSED)`},
		{[]string{"events", "list", "--older-than", "soon"}, 2, `webhookctl: usage: --older-than "soon": want a duration like 90m, 6h or 2d`},
		{[]string{"events", "list", "--limit", "x"}, 2, `invalid value "x" for flag -limit`},
		{[]string{"replay", "stripe", "evt_1"}, 2, "webhookctl: usage: --reason is required: it goes into the audit trail"},
		{[]string{"replay"}, 2, "webhookctl: usage: replay takes SOURCE EVENT_ID, or --status DEAD|QUARANTINED for a bulk replay"},
		{[]string{"replay", "stripe"}, 2, "webhookctl: usage: replay takes [SOURCE EVENT_ID], got 1 arguments"},
		{[]string{"replay", "stripe", "evt_1", "--status", "DEAD", "--reason", "x"}, 2, "webhookctl: usage: give SOURCE EVENT_ID or --status, not both"},
		{[]string{"replay", "--status", "RECEIVED", "--reason", "x"}, 2, `webhookctl: usage: bulk replay takes --status DEAD or QUARANTINED, not "RECEIVED"`},
		{[]string{"replay", "--status", "DEAD"}, 2, "webhookctl: usage: --reason is required: it goes into the audit trail of every event replayed"},
		{[]string{"replay", "--status", "DEAD", "--reason", "x", "--rate", "0/s"}, 2, `webhookctl: usage: --rate "0/s": want a number between 0 and 1000 per second or minute, like 5/s`},
		{[]string{"replay", "--status", "DEAD", "--reason", "x", "--checkpoint", notCP}, 2, "webhookctl: usage: " + notCP + " is not a webhookctl checkpoint"},
		{[]string{"replay", "stripe", "evt_missing", "--reason", "x"}, 1, "webhookctl: replay stripe/evt_missing: ledger: not found"},
		{[]string{"quarantine", "stripe", "evt_1"}, 2, "webhookctl: usage: --reason is required"},
		{[]string{"release", "stripe", "evt_1"}, 2, "webhookctl: usage: --reason is required"},
		{[]string{"intents", "resolve", "op-1", "--outcome", "failed"}, 2, "webhookctl: usage: --reason is required: say what you verified downstream"},
		{[]string{"intents", "show", "op-missing"}, 1, "webhookctl: get intent op-missing: ledger: not found"},
		{[]string{"intents", "list", "--status", "SUCCEEDED"}, 2, `webhookctl: usage: unknown or finished intent status "SUCCEEDED"`},
		{[]string{"--retention-days", "2", "stats"}, 2, "webhookctl: configuration: --retention-days must be at least 4"},
	}
	for _, tc := range tests {
		out, errOut, code := f.run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("webhookctl %s: exit %d (want %d)\nstdout: %s\nstderr: %s\nwant stderr containing: %s", strings.Join(tc.args, " "), code, tc.code, out, errOut, tc.stderr)
		}
	}
	if ev := f.event("stripe", "evt_1"); ev.Status != ledger.StatusDead || len(ev.Audit) != 3 {
		t.Fatalf("bad input changed the event: %s %v", ev.Status, actions(ev.Audit))
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, cmd := range [][]string{{}, {"events", "list"}, {"events", "show"}, {"replay"}, {"quarantine"}, {"release"},
		{"intents", "list"}, {"intents", "show"}, {"intents", "resolve"}, {"stats"}, {"dlq", "status"}, {"projections", "show"}, {"warehouse", "backfill"}} {
		out, errOut, code := f.run(append(cmd, "--help")...)
		want := "Usage: webhookctl " + strings.Join(cmd, " ")
		if len(cmd) == 0 {
			want = "Usage:\n  webhookctl [connection flags] COMMAND"
		}
		if code != 0 || errOut != "" || !strings.Contains(out, want) || !strings.Contains(out, "-json") || !strings.Contains(out, "-table") {
			t.Fatalf("%v --help: exit %d\n%s%s", cmd, code, out, errOut)
		}
	}
}

func TestMissingConfigurationIsAUsageError(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := operator.Env{Getenv: func(string) string { return "" }, Hostname: func() (string, error) { return "h", nil }, Stdout: &out, Stderr: &errOut,
		Connect: func(context.Context, operator.Settings, func(string) string) (operator.Clients, error) {
			t.Fatal("connected without a table")
			return operator.Clients{}, nil
		}}
	if code := operator.Run(context.Background(), []string{"stats"}, env); code != 2 ||
		errOut.String() != "webhookctl: configuration: no ledger table: set --table or TABLE_NAME (or --local for the `make dev` stack)\n" {
		t.Fatalf("no table: exit %d %q", code, errOut.String())
	}
	errOut.Reset()
	// No URL and no prefix: the queue cannot be found, and nothing is replayed.
	f := newFixture(t)
	f.dead("stripe", "evt_1", "invoice.paid")
	var o2, e2 bytes.Buffer
	caller := &fakeSTS{ARN: callerARN}
	env2 := operator.Env{Getenv: func(k string) string { return map[string]string{"TABLE_NAME": "ledger", "USER": "alice"}[k] },
		Hostname: func() (string, error) { return "h", nil }, Stdout: &o2, Stderr: &e2, Clock: f.Clock,
		Connect: func(context.Context, operator.Settings, func(string) string) (operator.Clients, error) {
			return operator.Clients{DynamoDB: f.DB, SQS: f.SQS, STS: caller}, nil
		}}
	if code := operator.Run(context.Background(), []string{"replay", "stripe", "evt_1", "--reason", "x"}, env2); code != 2 ||
		e2.String() != "webhookctl: configuration: the events queue: set --events-queue-url (or EVENTS_QUEUE_URL), or --prefix to look it up by name\n" {
		t.Fatalf("no queue: exit %d %q", code, e2.String())
	}
	if ev := f.event("stripe", "evt_1"); ev.Status != ledger.StatusDead {
		t.Fatalf("replayed without a queue to enqueue on: %s", ev.Status)
	}
	// Reads need no identity: they never ask STS, even when it would fail.
	caller.Err = errors.New("no valid credential sources found")
	caller.Calls = 0
	o2.Reset()
	e2.Reset()
	if code := operator.Run(context.Background(), []string{"events", "list", "--status", "DEAD"}, env2); code != 0 || !strings.Contains(o2.String(), "evt_1") || caller.calls() != 0 {
		t.Fatalf("a read: exit %d %q, %d STS calls", code, e2.String(), caller.calls())
	}
	// Writes that cannot verify their caller write nothing (exit 1).
	for _, args := range [][]string{
		{"--prefix", f.Prefix, "replay", "stripe", "evt_1", "--reason", "x"},
		{"--prefix", f.Prefix, "replay", "--status", "DEAD", "--reason", "x"},
		{"quarantine", "stripe", "evt_1", "--reason", "x"},
		{"release", "stripe", "evt_1", "--reason", "x"},
		{"intents", "resolve", "op", "--outcome", "failed", "--reason", "x"},
	} {
		e2.Reset()
		if code := operator.Run(context.Background(), append(args, "--actor", "alice"), env2); code != 1 ||
			e2.String() != "webhookctl: unverified caller: sts:GetCallerIdentity: no valid credential sources found; nothing was written: "+
				"an operator write records your verified AWS identity (check your AWS credentials and region, or use --local for the `make dev` stack)\n" {
			t.Fatalf("%v with STS failing: exit %d %q", args, code, e2.String())
		}
	}
	if ev := f.event("stripe", "evt_1"); len(ev.Audit) != 3 || ev.Status != ledger.StatusDead {
		t.Fatalf("written without a verified caller: %s %v", ev.Status, actions(ev.Audit))
	}
}

// --local reaches the `make dev` stack's emulators (DEV_DYNAMODB_ADDR,
// DEV_SQS_ADDR), its table and its queue names, through operator.Connect.
func TestLocalTargetsTheDevStack(t *testing.T) {
	ctx := context.Background()
	e := newEmulated(t, operator.LocalTable, operator.LocalPrefix)
	events := e.Events
	drain(t, e.SQS, events.DLQ) // goaws keeps queues for the whole test binary (-count)
	l, err := ledger.New(e.DB, ledger.Options{Table: operator.LocalTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: "evt_local", EventType: "invoice.paid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := (queue.Sender{Client: e.SQS, URL: events.DLQ}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_local"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"DEV_DYNAMODB_ADDR": strings.TrimPrefix(e.DynamoURL, "http://"), "DEV_SQS_ADDR": strings.TrimPrefix(e.SQSURL, "http://"), "USER": "alice",
	}
	var out, errOut bytes.Buffer
	env := operator.Env{Getenv: func(k string) string { return vars[k] }, Hostname: func() (string, error) { return "h", nil },
		Stdout: &out, Stderr: &errOut, Connect: operator.Connect}
	if code := operator.Run(ctx, []string{"--local", "events", "list", "--json"}, env); code != 0 || !strings.Contains(out.String(), `"event_id": "evt_local"`) {
		t.Fatalf("events list --local: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := operator.Run(ctx, []string{"dlq", "status", "--local", "--json"}, env); code != 0 || !strings.Contains(out.String(), `"url": "`+events.DLQ+`"`) ||
		!strings.Contains(out.String(), `"depth": 1`) {
		t.Fatalf("dlq status --local: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// Without --local, the normal AWS configuration chain applies, and with it
// AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS: a write asks the
// region's STS who the chain's credentials are and records it. (STS is
// sts.us-east-1.amazonaws.com, which the test's HTTP client sends to a
// fake; an STS endpoint override is ignored: endpoint_test.go.)
func TestAWSConfigChainHonoursEndpointVariables(t *testing.T) {
	ctx := context.Background()
	stsURL, stsCalls := fakeSTSServer(t, callerARN)
	table := localaws.UniqueName("chain")
	e := newEmulated(t, table, localaws.UniqueName("chain")+"-")
	events := e.Events
	l, err := ledger.New(e.DB, ledger.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: "evt_chain", EventType: "invoice.paid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	awsEnv(t, map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": e.DynamoURL, "AWS_ENDPOINT_URL_SQS": e.SQSURL, "AWS_REGION": localaws.Region,
		"TABLE_NAME": table, "EVENTS_QUEUE_URL": events.Queue, "USER": "alice",
	})
	if err := l.Dead(ctx, mustClaim(t, l, "evt_chain"), "x", "y"); err != nil {
		t.Fatal(err)
	}
	regional, err := url.Parse(stsURL)
	if err != nil {
		t.Fatal(err)
	}
	dyn, _ := url.Parse(e.DynamoURL)
	sq, _ := url.Parse(e.SQSURL)
	client := &hostRecorder{pass: map[string]bool{dyn.Host: true, sq.Host: true}, route: map[string]*url.URL{"sts." + localaws.Region + ".amazonaws.com": regional}}
	var out, errOut bytes.Buffer
	env := operator.Env{Getenv: os.Getenv, Hostname: func() (string, error) { return "h", nil }, Stdout: &out, Stderr: &errOut,
		Connect: operator.ConnectWith(awsconfig.WithHTTPClient(client))}
	if code := operator.Run(ctx, []string{"replay", "stripe", "evt_chain", "--reason", "through the chain"}, env); code != 0 {
		t.Fatalf("replay via the AWS chain: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if ev, _ := l.Get(ctx, "stripe", "evt_chain"); ev.Status != ledger.StatusReceived || ev.Audit[len(ev.Audit)-1].Actor != "alice@h ("+callerARN+")" {
		t.Fatalf("after replay: %s %+v", ev.Status, ev.Audit[len(ev.Audit)-1])
	}
	// One STS call, signed with the chain's credentials.
	if got := stsCalls(); len(got) != 1 || !strings.Contains(got[0], "Credential="+localaws.FakeAccessKey+"/") {
		t.Fatalf("STS calls %q", got)
	}
	// A read asks nothing.
	out.Reset()
	if code := operator.Run(ctx, []string{"events", "show", "stripe", "evt_chain"}, env); code != 0 || len(stsCalls()) != 1 {
		t.Fatalf("events show: exit %d, %d STS calls\n%s%s", code, len(stsCalls()), out.String(), errOut.String())
	}
	for _, h := range client.asked() {
		if h != dyn.Host && h != sq.Host && h != "sts."+localaws.Region+".amazonaws.com" {
			t.Fatalf("asked %s", h)
		}
	}
}

func mustClaim(t *testing.T, l *ledger.Ledger, id string) ledger.Claim {
	t.Helper()
	c, err := l.Claim(context.Background(), "stripe", id, ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
