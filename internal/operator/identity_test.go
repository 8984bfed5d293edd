package operator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
)

// fakeSTSServer answers STS's GetCallerIdentity (query protocol, XML) with
// arn, so operator.Connect's real STS client can be tested without AWS. It
// returns its URL and the Authorization header of each call.
func fakeSTSServer(t *testing.T, arn string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		if r.Method != http.MethodPost || form.Get("Action") != "GetCallerIdentity" {
			http.Error(w, "unexpected STS call "+string(body), http.StatusBadRequest)
			return
		}
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult><Arn>%s</Arn><UserId>AROAFAKE:alice</UserId><Account>123456789012</Account></GetCallerIdentityResult>
  <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ResponseMetadata>
</GetCallerIdentityResponse>`, arn)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auth...)
	}
}

func TestAuditActorNamesTheClaimBesideTheVerifiedIdentityWithinBounds(t *testing.T) {
	t.Parallel()
	longPath := "arn:aws:iam::123456789012:user/" + strings.Repeat("division/", 40) + "alice"
	for _, c := range []struct {
		name, claim, identity, want string
	}{
		{"name and ARN", "alice@ops-box", callerARN, "alice@ops-box (" + callerARN + ")"},
		{"no name: the ARN alone", "", callerARN, callerARN},
		{"local user who said who they are", "alice@laptop", "local:alice@laptop", "local:alice@laptop"},
		{"local user under another name", "ops:alice", "local:alice@laptop", "ops:alice (local:alice@laptop)"},
		{"long name: cut, the ARN whole", strings.Repeat("n", 300), callerARN, strings.Repeat("n", operator.MaxActorLen-len(callerARN)-3) + " (" + callerARN + ")"},
		{"long ARN: its middle cut, account and user kept", "alice", longPath,
			"alice (" + longPath[:64] + "..." + longPath[len(longPath)-125:] + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := operator.AuditActor(c.claim, c.identity)
			if got != c.want || len(got) > operator.MaxActorLen || !utf8.ValidString(got) {
				t.Fatalf("AuditActor(%q, %q) = %q (%d bytes), want %q", c.claim, c.identity, got, len(got), c.want)
			}
		})
	}
	// A name in a multi-byte script is cut on a character boundary.
	if got := operator.AuditActor(strings.Repeat("é", 200), callerARN); len(got) > operator.MaxActorLen || !utf8.ValidString(got) ||
		!strings.HasSuffix(got, " ("+callerARN+")") {
		t.Fatalf("cut name %q", got)
	}
	long := operator.AuditActor("alice", longPath)
	if !strings.HasPrefix(long, "alice (arn:aws:iam::123456789012:user/") || !strings.HasSuffix(long, "/alice)") {
		t.Fatalf("long ARN %q", long)
	}
}

func TestWritesRecordTheCallersVerifiedIdentity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     map[string]string
		args    []string
		sts     *fakeSTS // nil: the fixture's, which knows callerARN
		code    int
		actor   string // the audit's actor, when the replay is written
		stderr  string
		stsUsed bool
	}{
		{name: "default name", code: 0, actor: aliceActor, stsUsed: true},
		{name: "a name cannot hide the caller", args: []string{"--actor", "root"}, code: 0,
			actor: "root (" + callerARN + ")", stsUsed: true},
		{name: "$USER unset: the caller identity, not exit 2", env: map[string]string{"USER": "", "LOGNAME": ""}, code: 0,
			actor: callerARN, stsUsed: true},
		{name: "$LOGNAME when $USER is unset", env: map[string]string{"USER": "", "LOGNAME": "al"}, code: 0,
			actor: "al@ops-box (" + callerARN + ")", stsUsed: true},
		{name: "a name imitating an identity", args: []string{"--actor", "bob (arn:aws:iam::123456789012:root)"}, code: 2,
			stderr: `webhookctl: usage: --actor "bob (arn:aws:iam::123456789012:root)": control characters and parentheses are not allowed (the audit puts your verified identity in parentheses after it)` + "\n"},
		{name: "STS fails", sts: &fakeSTS{Err: errors.New("ExpiredToken: the security token included in the request is expired")}, code: 1,
			stderr: "webhookctl: unverified caller: sts:GetCallerIdentity: ExpiredToken: the security token included in the request is expired; nothing was written: " +
				"an operator write records your verified AWS identity (check your AWS credentials and region, or use --local for the `make dev` stack)\n", stsUsed: true},
		{name: "STS answers no ARN", sts: &fakeSTS{ARN: ""}, code: 1,
			stderr: `webhookctl: unverified caller: sts:GetCallerIdentity answered no ARN ("")`, stsUsed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// GIVEN a DEAD event and an operator whose credentials STS knows
			// (or does not)
			f := newFixture(t)
			f.Env = c.env
			if c.sts != nil {
				f.STS = c.sts
			}
			f.dead("stripe", "evt_1", "invoice.paid")
			// WHEN they replay it
			_, errOut, code := f.run(append([]string{"replay", "stripe", "evt_1", "--reason", "downstream fixed"}, c.args...)...)
			// THEN the audit names them with the identity STS verified, or
			// nothing is written at all
			if code != c.code || !strings.Contains(errOut, c.stderr) || (c.stderr == "" && errOut != "") {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, c.code, errOut, c.stderr)
			}
			ev := f.event("stripe", "evt_1")
			last := ev.Audit[len(ev.Audit)-1]
			switch {
			case c.code == 0 && (ev.Status != ledger.StatusReceived || last.Action != "replay" || last.Actor != c.actor):
				t.Fatalf("replayed: %s, audit %+v, want actor %q", ev.Status, last, c.actor)
			case c.code != 0 && (ev.Status != ledger.StatusDead || count(ev.Audit, "replay") != 0 || len(f.pointers(f.Events.Queue)) != 0):
				t.Fatalf("refused, yet written: %s %v", ev.Status, actions(ev.Audit))
			}
			if used := f.STS.calls() > 0; used != c.stsUsed {
				t.Fatalf("STS asked %d times", f.STS.calls())
			}
		})
	}
}

func TestBulkReplayVerifiesTheCallerOnce(t *testing.T) {
	t.Parallel()
	// GIVEN three DEAD events
	f := newFixture(t)
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		f.dead("stripe", id, "invoice.paid")
	}
	// WHEN an operator without $USER replays them in bulk
	f.Env = map[string]string{"USER": ""}
	f.mustRun("replay", "--status", "DEAD", "--reason", "INC-12 downstream fixed")
	// THEN STS was asked once, and every replay names the caller
	if n := f.STS.calls(); n != 1 {
		t.Fatalf("STS asked %d times", n)
	}
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		if e := f.event("stripe", id).Audit; e[len(e)-1].Actor != callerARN || e[len(e)-1].Action != "replay" {
			t.Fatalf("%s: %+v", id, e[len(e)-1])
		}
	}
	// AND a dry run writes nothing and asks nothing
	f.dead("stripe", "evt_d", "invoice.paid")
	f.STS = &fakeSTS{Err: errors.New("must not be called")}
	f.mustRun("replay", "--status", "DEAD", "--reason", "look first", "--dry-run")
	if f.STS.calls() != 0 || f.event("stripe", "evt_d").Status != ledger.StatusDead {
		t.Fatalf("dry run: %d STS calls", f.STS.calls())
	}
}

// --local has no AWS identity: a write records the local user (the
// operating system's, else $USER) at the host, through operator.Connect and
// the `make dev` stack's emulators.
func TestLocalWritesRecordTheLocalUser(t *testing.T) {
	ctx := context.Background()
	e := newEmulated(t, operator.LocalTable, operator.LocalPrefix)
	drain(t, e.SQS, e.Events.Queue) // goaws keeps queues for the whole test binary
	l, err := ledger.New(e.DB, ledger.Options{Table: operator.LocalTable})
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{"DEV_DYNAMODB_ADDR": strings.TrimPrefix(e.DynamoURL, "http://"), "DEV_SQS_ADDR": strings.TrimPrefix(e.SQSURL, "http://")}
	osUser := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	for i, c := range []struct {
		name      string
		user      string // $USER
		localUser func() (string, error)
		args      []string
		want      string
	}{
		{"the local user, once", "alice", osUser("alice", nil), nil, "local:alice@laptop"},
		{"another name beside the local user", "alice", osUser("alice", nil), []string{"--actor", "ops:alice"}, "ops:alice (local:alice@laptop)"},
		{"$USER unset: the operating system's user", "", osUser("carol", nil), nil, "local:carol@laptop"},
		{"no user known: the hostname, not exit 2", "", osUser("", errors.New("user: unknown userid 1001")), nil, "local:laptop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// GIVEN a DEAD event on the dev stack
			id := fmt.Sprintf("evt_local_%d", i)
			if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: id, EventType: "invoice.paid", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			cl, err := l.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Dead(ctx, cl, "x", "y"); err != nil {
				t.Fatal(err)
			}
			vars := map[string]string{"USER": c.user}
			for k, v := range addrs {
				vars[k] = v
			}
			var out, errOut bytes.Buffer
			env := operator.Env{Getenv: func(k string) string { return vars[k] }, Hostname: func() (string, error) { return "laptop", nil },
				LocalUser: c.localUser, Stdout: &out, Stderr: &errOut, Connect: operator.Connect}
			// WHEN it is replayed with --local
			if code := operator.Run(ctx, append([]string{"--local", "replay", "stripe", id, "--reason", "dev"}, c.args...), env); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			// THEN the audit names the local user
			if ev, _ := l.Get(ctx, "stripe", id); ev.Status != ledger.StatusReceived || ev.Audit[len(ev.Audit)-1].Actor != c.want {
				t.Fatalf("after replay: %s %+v, want actor %q", ev.Status, ev.Audit[len(ev.Audit)-1], c.want)
			}
		})
	}
}
