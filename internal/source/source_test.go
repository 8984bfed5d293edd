package source_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/effectively-once/webhooks/internal/source"
)

const (
	smARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:stripe-whsec-AbCdEf"

	// Visibly fake secret values; none of them is ever a real credential.
	fakeSecretA = "whsec_test_FAKE_primary"
	fakeSecretB = "whsec_test_FAKE_rotated"
)

const validDoc = `{
  "sources": [
    {
      "name": "stripe",
      "kind": "stripe",
      "secrets": ["` + smARN + `", "sm:stripe-whsec-next"],
      "tolerance_seconds": 120,
      "max_body_bytes": 65536,
      "options": {"account_metadata_key": "account_id"}
    },
    {
      "name": "stripe-eu-2",
      "kind": "stripe",
      "secrets": ["env:STRIPE_WHSEC"]
    }
  ]
}`

// doc builds a one-source document from a JSON object literal for the source.
func doc(sourceJSON string) string {
	return `{"sources":[` + sourceJSON + `]}`
}

func TestParseValid(t *testing.T) {
	set, err := source.Parse([]byte(validDoc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := set.Names(), []string{"stripe", "stripe-eu-2"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}

	tests := []struct {
		name          string
		source        string
		wantKind      string
		wantSecrets   []string
		wantTolerance time.Duration
		wantBodyLimit int
		wantOptions   map[string]string
	}{
		{
			name:          "explicit options are kept",
			source:        "stripe",
			wantKind:      "stripe",
			wantSecrets:   []string{smARN, "sm:stripe-whsec-next"},
			wantTolerance: 120 * time.Second,
			wantBodyLimit: 65536,
			wantOptions:   map[string]string{"account_metadata_key": "account_id"},
		},
		{
			name:          "omitted tolerance and body cap take the defaults",
			source:        "stripe-eu-2",
			wantKind:      "stripe",
			wantSecrets:   []string{"env:STRIPE_WHSEC"},
			wantTolerance: 0, // 0: the provider scheme applies its own default
			wantBodyLimit: 1 << 20,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, ok := set.Lookup(tc.source)
			if !ok {
				t.Fatalf("Lookup(%q) not found", tc.source)
			}
			if src.Kind != tc.wantKind {
				t.Errorf("Kind = %q, want %q", src.Kind, tc.wantKind)
			}
			if !slices.Equal(src.Secrets, tc.wantSecrets) {
				t.Errorf("Secrets = %v, want %v", src.Secrets, tc.wantSecrets)
			}
			if got := src.Tolerance(); got != tc.wantTolerance {
				t.Errorf("Tolerance() = %v, want %v", got, tc.wantTolerance)
			}
			if got := src.BodyLimit(); got != tc.wantBodyLimit {
				t.Errorf("BodyLimit() = %d, want %d", got, tc.wantBodyLimit)
			}
			for k, v := range tc.wantOptions {
				if src.Options[k] != v {
					t.Errorf("Options[%q] = %q, want %q", k, src.Options[k], v)
				}
			}
		})
	}

	t.Run("unknown source is not found", func(t *testing.T) {
		if _, ok := set.Lookup("github"); ok {
			t.Fatal(`Lookup("github") found a source that is not configured`)
		}
	})
}

func TestParseAcceptsBoundaries(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{"name of 63 characters", doc(`{"name":"` + strings.Repeat("a", 63) + `","kind":"stripe","secrets":["sm:x"]}`)},
		{"name starting with a digit", doc(`{"name":"0-stripe","kind":"stripe","secrets":["sm:x"]}`)},
		{"aws-cn ARN", doc(`{"name":"s","kind":"stripe","secrets":["arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:x"]}`)},
		{"aws-us-gov ARN", doc(`{"name":"s","kind":"stripe","secrets":["arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:x"]}`)},
		{"tolerance 0 means default", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"tolerance_seconds":0}`)},
		{"tolerance 3600", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"tolerance_seconds":3600}`)},
		{"max_body_bytes 1 MiB", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"max_body_bytes":1048576}`)},
		{"retry horizon of 30 days", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"retry_horizon_hours":720}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := source.Parse([]byte(tc.doc)); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		// wantIn are fragments the error must contain, so it says what and where.
		wantIn []string
	}{
		{
			name:   "not JSON",
			doc:    `sources: []`,
			wantIn: []string{"not valid JSON"},
		},
		{
			name:   "unknown top-level field",
			doc:    `{"sources":[{"name":"s","kind":"stripe","secrets":["sm:x"]}],"extra":1}`,
			wantIn: []string{"extra"},
		},
		{
			name:   "unknown source field",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"tolerance":300}`),
			wantIn: []string{"tolerance"},
		},
		{
			name:   "empty sources",
			doc:    `{"sources":[]}`,
			wantIn: []string{"no sources"},
		},
		{
			name:   "no sources key",
			doc:    `{}`,
			wantIn: []string{"no sources"},
		},
		{
			name:   "empty name",
			doc:    doc(`{"name":"","kind":"stripe","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", "name"},
		},
		{
			name:   "upper-case name",
			doc:    doc(`{"name":"Stripe","kind":"stripe","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", `"Stripe"`, "name"},
		},
		{
			name:   "name with a slash",
			doc:    doc(`{"name":"stripe/eu","kind":"stripe","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", "name"},
		},
		{
			name:   "name starting with a hyphen",
			doc:    doc(`{"name":"-stripe","kind":"stripe","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", "name"},
		},
		{
			name:   "name of 64 characters",
			doc:    doc(`{"name":"` + strings.Repeat("a", 64) + `","kind":"stripe","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", "name"},
		},
		{
			name: "duplicate name",
			doc: `{"sources":[
				{"name":"stripe","kind":"stripe","secrets":["sm:a"]},
				{"name":"stripe","kind":"stripe","secrets":["sm:b"]}]}`,
			wantIn: []string{"sources[1]", `"stripe"`, "duplicate"},
		},
		{
			name:   "unknown kind",
			doc:    doc(`{"name":"gh","kind":"carrier-pigeon","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", `"carrier-pigeon"`, "kind"},
		},
		{
			name:   "missing kind",
			doc:    doc(`{"name":"s","secrets":["sm:x"]}`),
			wantIn: []string{"sources[0]", "kind"},
		},
		{
			name:   "no secrets",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":[]}`),
			wantIn: []string{"sources[0]", "secret"},
		},
		{
			name:   "secrets omitted",
			doc:    doc(`{"name":"s","kind":"stripe"}`),
			wantIn: []string{"sources[0]", "secret"},
		},
		{
			name:   "literal secret instead of a reference",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["whsec_abc"]}`),
			wantIn: []string{"sources[0]", "secrets[0]", "never the secret itself"},
		},
		{
			name:   "literal secret after a valid reference",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x","whsec_test_FAKE_literal"]}`),
			wantIn: []string{"sources[0]", "secrets[1]"},
		},
		{
			name:   "sm: without a name",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:"]}`),
			wantIn: []string{"secrets[0]"},
		},
		{
			name:   "env: without a variable",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["env:"]}`),
			wantIn: []string{"secrets[0]"},
		},
		{
			name:   "ARN of another service",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["arn:aws:ssm:eu-west-1:123456789012:parameter/x"]}`),
			wantIn: []string{"secrets[0]"},
		},
		{
			name:   "negative tolerance",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"tolerance_seconds":-1}`),
			wantIn: []string{"sources[0]", "tolerance_seconds"},
		},
		{
			name:   "negative retry horizon",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"retry_horizon_hours":-1}`),
			wantIn: []string{"sources[0]", "retry_horizon_hours"},
		},
		{
			name:   "retry horizon above 30 days",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"retry_horizon_hours":721}`),
			wantIn: []string{"sources[0]", "retry_horizon_hours"},
		},
		{
			name:   "tolerance above an hour",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"tolerance_seconds":3601}`),
			wantIn: []string{"sources[0]", "tolerance_seconds"},
		},
		{
			name:   "negative max_body_bytes",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"max_body_bytes":-1}`),
			wantIn: []string{"sources[0]", "max_body_bytes"},
		},
		{
			name:   "max_body_bytes above 1 MiB",
			doc:    doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"max_body_bytes":1048577}`),
			wantIn: []string{"sources[0]", "max_body_bytes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := source.Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded with %v, want an error", set.Names())
			}
			if !errors.Is(err, source.ErrConfig) {
				t.Errorf("error %q does not wrap source.ErrConfig", err)
			}
			for _, frag := range tc.wantIn {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("error %q does not mention %q", err, frag)
				}
			}
		})
	}
}

func TestParseNeverEchoesALiteralSecret(t *testing.T) {
	// A literal secret pasted into the document is refused; the error must
	// say where it is without repeating it into the logs.
	const literal = "whsec_test_FAKE_pasted_by_mistake"
	_, err := source.Parse([]byte(doc(`{"name":"s","kind":"stripe","secrets":["` + literal + `"]}`)))
	if err == nil {
		t.Fatal("Parse accepted a literal secret")
	}
	if strings.Contains(err.Error(), literal) {
		t.Fatalf("error %q repeats the secret", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	goodFile := filepath.Join(dir, "sources.json")
	if err := os.WriteFile(goodFile, []byte(validDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badFile, []byte(`{"sources":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	otherDoc := doc(`{"name":"from-env","kind":"stripe","secrets":["sm:x"]}`)

	tests := []struct {
		name      string
		env       map[string]string
		wantNames []string
		wantErrIn string // non-empty: an error wrapping ErrConfig containing this
	}{
		{
			name:      "SOURCES",
			env:       map[string]string{"SOURCES": validDoc},
			wantNames: []string{"stripe", "stripe-eu-2"},
		},
		{
			name:      "SOURCES_FILE",
			env:       map[string]string{"SOURCES_FILE": goodFile},
			wantNames: []string{"stripe", "stripe-eu-2"},
		},
		{
			name:      "SOURCES wins over SOURCES_FILE",
			env:       map[string]string{"SOURCES": otherDoc, "SOURCES_FILE": goodFile},
			wantNames: []string{"from-env"},
		},
		{
			name:      "neither set",
			env:       map[string]string{},
			wantErrIn: "SOURCES",
		},
		{
			name:      "SOURCES_FILE missing",
			env:       map[string]string{"SOURCES_FILE": filepath.Join(dir, "absent.json")},
			wantErrIn: "SOURCES_FILE",
		},
		{
			name:      "SOURCES_FILE invalid",
			env:       map[string]string{"SOURCES_FILE": badFile},
			wantErrIn: "no sources",
		},
		{
			name:      "SOURCES invalid",
			env:       map[string]string{"SOURCES": `{"sources":[{"name":"s"}]}`},
			wantErrIn: "kind",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := source.Load(mapEnv(tc.env))
			if tc.wantErrIn != "" {
				if err == nil {
					t.Fatalf("Load succeeded with %v, want an error", set.Names())
				}
				if !errors.Is(err, source.ErrConfig) {
					t.Errorf("error %q does not wrap source.ErrConfig", err)
				}
				if !strings.Contains(err.Error(), tc.wantErrIn) {
					t.Errorf("error %q does not mention %q", err, tc.wantErrIn)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := set.Names(); !slices.Equal(got, tc.wantNames) {
				t.Errorf("Names() = %v, want %v", got, tc.wantNames)
			}
		})
	}
}

// --- Secrets ---

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// fakeSM is a Secrets Manager that serves values from a map and counts calls.
type fakeSM struct {
	mu     sync.Mutex
	values map[string]string // SecretId -> SecretString
	err    error             // when set, every call fails with it
	calls  map[string]int
}

var _ source.SecretsManager = (*fakeSM)(nil)

func (f *fakeSM) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := aws.ToString(in.SecretId)
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[id]++
	if f.err != nil {
		return nil, f.err
	}
	v, ok := f.values[id]
	if !ok {
		return nil, fmt.Errorf("ResourceNotFoundException: secret %s not found", id)
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

func (f *fakeSM) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

func (f *fakeSM) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// clock is an injected, manually advanced clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *clock { return &clock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func TestSecretsForResolvesValues(t *testing.T) {
	tests := []struct {
		name    string
		refs    []string
		env     map[string]string
		sm      map[string]string
		want    []string
		wantIDs []string // SecretIds the fake Secrets Manager must have been asked for
	}{
		{
			name: "env reference",
			refs: []string{"env:STRIPE_WHSEC"},
			env:  map[string]string{"STRIPE_WHSEC": fakeSecretA},
			want: []string{fakeSecretA},
		},
		{
			name: "env value that is a JSON array yields every secret",
			refs: []string{"env:STRIPE_WHSEC"},
			env:  map[string]string{"STRIPE_WHSEC": `["` + fakeSecretA + `", "` + fakeSecretB + `"]`},
			want: []string{fakeSecretA, fakeSecretB},
		},
		{
			name: "blank entries of an array are dropped and values trimmed",
			refs: []string{"env:STRIPE_WHSEC"},
			env:  map[string]string{"STRIPE_WHSEC": ` [" ` + fakeSecretA + ` ", "", "` + fakeSecretB + `"] `},
			want: []string{fakeSecretA, fakeSecretB},
		},
		{
			name: "surrounding whitespace of a plain value is trimmed",
			refs: []string{"env:STRIPE_WHSEC"},
			env:  map[string]string{"STRIPE_WHSEC": "  " + fakeSecretA + "\n"},
			want: []string{fakeSecretA},
		},
		{
			name:    "sm: name is passed without its prefix",
			refs:    []string{"sm:stripe-whsec"},
			sm:      map[string]string{"stripe-whsec": fakeSecretA},
			want:    []string{fakeSecretA},
			wantIDs: []string{"stripe-whsec"},
		},
		{
			name:    "bare ARN is passed whole",
			refs:    []string{smARN},
			sm:      map[string]string{smARN: `["` + fakeSecretA + `","` + fakeSecretB + `"]`},
			want:    []string{fakeSecretA, fakeSecretB},
			wantIDs: []string{smARN},
		},
		{
			name:    "several references are all active, in order",
			refs:    []string{"sm:old", "env:NEW"},
			env:     map[string]string{"NEW": fakeSecretB},
			sm:      map[string]string{"old": fakeSecretA},
			want:    []string{fakeSecretA, fakeSecretB},
			wantIDs: []string{"old"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sm := &fakeSM{values: tc.sm}
			s := &source.Secrets{SM: sm, Getenv: mapEnv(tc.env), Now: newClock().Now}
			got, err := s.For(t.Context(), source.Source{Name: "stripe", Secrets: tc.refs}, false)
			if err != nil {
				t.Fatalf("For: %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("For = %q, want %q", got, tc.want)
			}
			for _, id := range tc.wantIDs {
				if n := sm.count(id); n != 1 {
					t.Errorf("Secrets Manager asked %d times for %q, want 1", n, id)
				}
			}
		})
	}
}

func TestSecretsForErrors(t *testing.T) {
	smFailure := errors.New("AccessDeniedException: not authorized to perform secretsmanager:GetSecretValue")
	tests := []struct {
		name       string
		secrets    *source.Secrets
		refs       []string
		wantIn     []string
		mustNotSay []string
	}{
		{
			name:    "empty environment variable",
			secrets: &source.Secrets{Getenv: mapEnv(map[string]string{})},
			refs:    []string{"env:STRIPE_WHSEC"},
			wantIn:  []string{"stripe", "STRIPE_WHSEC"},
		},
		{
			name:    "env references without a Getenv",
			secrets: &source.Secrets{},
			refs:    []string{"env:STRIPE_WHSEC"},
			wantIn:  []string{"stripe"},
		},
		{
			name:    "sm reference without a client",
			secrets: &source.Secrets{},
			refs:    []string{"sm:stripe-whsec"},
			wantIn:  []string{"stripe"},
		},
		{
			name:       "Secrets Manager failure after an env secret resolved",
			secrets:    &source.Secrets{SM: &fakeSM{err: smFailure}, Getenv: mapEnv(map[string]string{"A": fakeSecretA})},
			refs:       []string{"env:A", "sm:stripe-whsec"},
			wantIn:     []string{"stripe", "stripe-whsec", "AccessDenied"},
			mustNotSay: []string{fakeSecretA},
		},
		{
			name:    "value that is an empty array",
			secrets: &source.Secrets{Getenv: mapEnv(map[string]string{"A": "[]"})},
			refs:    []string{"env:A"},
			wantIn:  []string{"stripe", "empty"},
		},
		{
			name:    "value that is only whitespace",
			secrets: &source.Secrets{SM: &fakeSM{values: map[string]string{"blank": "  \n"}}},
			refs:    []string{"sm:blank"},
			wantIn:  []string{"stripe", "empty"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.secrets.For(t.Context(), source.Source{Name: "stripe", Secrets: tc.refs}, false)
			if err == nil {
				t.Fatalf("For succeeded with %d secrets, want an error", len(got))
			}
			if !errors.Is(err, source.ErrSecrets) {
				t.Errorf("error %q does not wrap source.ErrSecrets", err)
			}
			for _, frag := range tc.wantIn {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("error %q does not mention %q", err, frag)
				}
			}
			for _, secret := range tc.mustNotSay {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains a secret value", err)
				}
			}
		})
	}
}

func TestSecretsForCaching(t *testing.T) {
	const id = "stripe-whsec"
	src := source.Source{Name: "stripe", Secrets: []string{"sm:" + id}}

	tests := []struct {
		name string
		ttl  time.Duration // 0: the default, five minutes
		// steps run in order after a first, fetching call at time zero.
		steps []cacheStep
	}{
		{
			name: "within the TTL the cache answers",
			ttl:  time.Minute,
			steps: []cacheStep{
				{advance: 59 * time.Second, wantFetches: 1},
			},
		},
		{
			name: "at the TTL the value is fetched again",
			ttl:  time.Minute,
			steps: []cacheStep{
				{advance: time.Minute, wantFetches: 2},
				{advance: time.Second, wantFetches: 2},
			},
		},
		{
			name: "default TTL is five minutes",
			steps: []cacheStep{
				{advance: 5*time.Minute - time.Second, wantFetches: 1},
				{advance: time.Second, wantFetches: 2},
			},
		},
		{
			name: "fresh does not refetch a value at most five seconds old",
			ttl:  time.Minute,
			steps: []cacheStep{
				{advance: 0, fresh: true, wantFetches: 1},
				{advance: 5 * time.Second, fresh: true, wantFetches: 1},
			},
		},
		{
			name: "fresh refetches a value older than five seconds, then caches it",
			ttl:  time.Minute,
			steps: []cacheStep{
				{advance: 6 * time.Second, fresh: true, wantFetches: 2},
				{advance: time.Second, fresh: true, wantFetches: 2},
				{advance: time.Second, wantFetches: 2},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sm := &fakeSM{values: map[string]string{id: fakeSecretA}}
			clk := newClock()
			s := &source.Secrets{SM: sm, TTL: tc.ttl, Now: clk.Now}
			if _, err := s.For(t.Context(), src, false); err != nil {
				t.Fatalf("first For: %v", err)
			}
			if n := sm.count(id); n != 1 {
				t.Fatalf("first For fetched %d times, want 1", n)
			}
			for i, st := range tc.steps {
				clk.Advance(st.advance)
				got, err := s.For(t.Context(), src, st.fresh)
				if err != nil {
					t.Fatalf("step %d: For: %v", i, err)
				}
				if !slices.Equal(got, []string{fakeSecretA}) {
					t.Fatalf("step %d: For = %q", i, got)
				}
				if n := sm.count(id); n != st.wantFetches {
					t.Fatalf("step %d (+%v, fresh=%v): %d fetches, want %d", i, st.advance, st.fresh, n, st.wantFetches)
				}
			}
		})
	}
}

type cacheStep struct {
	advance     time.Duration
	fresh       bool
	wantFetches int
}

func TestSecretsForPicksUpRotation(t *testing.T) {
	const id = "stripe-whsec"
	src := source.Source{Name: "stripe", Secrets: []string{"sm:" + id}}
	sm := &fakeSM{values: map[string]string{id: fakeSecretA}}
	clk := newClock()
	s := &source.Secrets{SM: sm, Now: clk.Now}

	if _, err := s.For(t.Context(), src, false); err != nil {
		t.Fatal(err)
	}
	// The secret rotates; a signature failure asks for fresh values.
	sm.mu.Lock()
	sm.values[id] = `["` + fakeSecretA + `","` + fakeSecretB + `"]`
	sm.mu.Unlock()
	clk.Advance(10 * time.Second)

	got, err := s.For(t.Context(), src, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{fakeSecretA}) {
		t.Fatalf("cached For = %q, want the old value until the TTL or a fresh call", got)
	}
	got, err = s.For(t.Context(), src, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{fakeSecretA, fakeSecretB}; !slices.Equal(got, want) {
		t.Fatalf("fresh For = %q, want %q", got, want)
	}
}

func TestSecretsForErrorAfterExpiryDoesNotLeakCachedValue(t *testing.T) {
	const id = "stripe-whsec"
	src := source.Source{Name: "stripe", Secrets: []string{"sm:" + id}}
	sm := &fakeSM{values: map[string]string{id: fakeSecretA}}
	clk := newClock()
	s := &source.Secrets{SM: sm, Now: clk.Now}

	if _, err := s.For(t.Context(), src, false); err != nil {
		t.Fatal(err)
	}
	sm.fail(errors.New("ThrottlingException: rate exceeded"))
	clk.Advance(5 * time.Minute)

	_, err := s.For(t.Context(), src, false)
	if !errors.Is(err, source.ErrSecrets) {
		t.Fatalf("For error = %v, want source.ErrSecrets", err)
	}
	if strings.Contains(err.Error(), fakeSecretA) {
		t.Fatalf("error %q contains the secret value", err)
	}
}

func TestTruthConfig(t *testing.T) {
	doc := func(truth string) []byte {
		return []byte(`{"sources":[{"name":"s","kind":"stripe","secrets":["sm:whsec"],"truth":` + truth + `}]}`)
	}
	set, err := source.Parse(doc(`{"kind":"stripe","secret":"sm:stripe-api-key"}`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := set.Lookup("s")
	if s.Truth == nil || s.Truth.Lookback() != 72*time.Hour {
		t.Fatalf("stripe truth: %+v", s.Truth)
	}
	set, err = source.Parse(doc(`{"kind":"http","url":"http://127.0.0.1:3002/orders/changes","lookback_minutes":15}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := set.Lookup("s"); s.Truth.Lookback() != 15*time.Minute {
		t.Fatalf("http truth: %+v", s.Truth)
	}
	for name, truth := range map[string]string{
		"unknown kind":        `{"kind":"graphql","url":"https://x.example"}`,
		"stripe without key":  `{"kind":"stripe"}`,
		"http without url":    `{"kind":"http"}`,
		"plain http remote":   `{"kind":"http","url":"http://orders.example/changes"}`,
		"key value not a ref": `{"kind":"stripe","secret":"rk_live_123"}`,
		"lookback beyond 30d": `{"kind":"http","url":"https://x.example","lookback_minutes":50000}`,
		"unknown field":       `{"kind":"http","url":"https://x.example","token":"t"}`,
		"credentials in url":  `{"kind":"http","url":"https://user:pw@x.example"}`,
	} {
		if _, err := source.Parse(doc(truth)); !errors.Is(err, source.ErrConfig) || !strings.Contains(err.Error(), "truth") && name != "unknown field" {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestAPIConfig(t *testing.T) {
	doc := func(kind, api string) []byte {
		return []byte(`{"sources":[{"name":"s","kind":"` + kind + `","secrets":["sm:whsec"],"api":` + api + `}]}`)
	}
	set, err := source.Parse(doc("stripe", `{"secret":"sm:stripe-restricted-key"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := set.Lookup("s"); s.API == nil || s.API.Timeout() != 5*time.Second || s.API.URL != "" {
		t.Fatalf("stripe api: %+v", s.API)
	}
	set, err = source.Parse(doc("stripe", `{"secret":"env:KEY","url":"http://127.0.0.1:3003","timeout_seconds":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := set.Lookup("s"); s.API.Timeout() != 2*time.Second {
		t.Fatalf("local api: %+v", s.API)
	}
	// Any kind may name an api: its resolver reads it (the processor
	// refuses a source whose kind has none).
	if set, err = source.Parse(doc("shopify", `{"secret":"sm:k","url":"https://shop.example/admin"}`)); err != nil {
		t.Fatal(err)
	}
	if s, _ := set.Lookup("s"); s.API == nil || s.API.URL != "https://shop.example/admin" {
		t.Fatalf("shopify api: %+v", s.API)
	}
	for name, c := range map[string]struct{ kind, api string }{
		"no secret":           {"stripe", `{}`},
		"key value not a ref": {"stripe", `{"secret":"rk_live_123"}`},
		"plain http remote":   {"stripe", `{"secret":"sm:k","url":"http://api.stripe.example"}`},
		"timeout above 20 s":  {"stripe", `{"secret":"sm:k","timeout_seconds":60}`},
	} {
		if _, err := source.Parse(doc(c.kind, c.api)); !errors.Is(err, source.ErrConfig) || !strings.Contains(err.Error(), "api") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// A source's retry horizon: 72 h unless it says otherwise.
func TestRetryHorizon(t *testing.T) {
	set, err := source.Parse([]byte(`{"sources":[{"name":"s","kind":"stripe","secrets":["sm:x"]},{"name":"gh","kind":"github","secrets":["sm:y"],"retry_horizon_hours":6}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := set.Lookup("s")
	gh, _ := set.Lookup("gh")
	if s.RetryHorizon() != 72*time.Hour || gh.RetryHorizon() != 6*time.Hour {
		t.Fatalf("horizons %s and %s, want 72h and 6h", s.RetryHorizon(), gh.RetryHorizon())
	}
}
