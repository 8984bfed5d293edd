package config_test

import (
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/source"
)

const (
	smSources  = `{"sources":[{"name":"stripe","kind":"stripe","secrets":["sm:stripe-whsec"]}]}`
	envSources = `{"sources":[{"name":"stripe-local","kind":"stripe","secrets":["sm:a","env:STRIPE_WHSEC"]}]}`
	queueURL   = "https://sqs.eu-west-1.amazonaws.com/123456789012/events"
	effectsURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/effects"
	effectsDoc = `{"effects":[{"kind":"refund","url":"https://payments.example/refunds","secret":"sm:refund-token","scopes":["orders"]}]}`
)

// baseEnv is the smallest environment every function accepts.
func baseEnv() map[string]string {
	return map[string]string{
		"TABLE_NAME":        "ledger",
		"EVENTS_QUEUE_URL":  queueURL,
		"EFFECTS_QUEUE_URL": effectsURL,
		"SOURCES":           smSources,
	}
}

// with returns baseEnv with changes applied; an empty value unsets a variable.
func with(changes map[string]string) func(string) string {
	env := baseEnv()
	maps.Copy(env, changes)
	return func(k string) string { return env[k] }
}

func TestLoadCommonDefaults(t *testing.T) {
	c, err := config.LoadCommon(with(nil))
	if err != nil {
		t.Fatalf("LoadCommon: %v", err)
	}
	if c.Table != "ledger" {
		t.Errorf("Table = %q, want ledger", c.Table)
	}
	if c.Sources == nil {
		t.Fatal("Sources is nil")
	}
	if _, ok := c.Sources.Lookup("stripe"); !ok {
		t.Errorf("source stripe not loaded; have %v", c.Sources.Names())
	}
	if want := 30 * 24 * time.Hour; c.Retention != want {
		t.Errorf("Retention = %v, want %v", c.Retention, want)
	}
	if c.LogLevel != slog.LevelInfo {
		t.Errorf("LogLevel = %v, want info", c.LogLevel)
	}
	if c.EnvSecret {
		t.Error("EnvSecret is true without ALLOW_ENV_SECRETS")
	}
}

func TestLoadProcessorDefaults(t *testing.T) {
	p, err := config.LoadProcessor(with(nil))
	if err != nil {
		t.Fatalf("LoadProcessor: %v", err)
	}
	if p.MaxAttempts != 5 {
		t.Errorf("MaxAttempts = %d, want 5", p.MaxAttempts)
	}
	if p.Lease != 60*time.Second {
		t.Errorf("Lease = %v, want 60s", p.Lease)
	}
	if p.ProjectionTimeout != 5*time.Second {
		t.Errorf("ProjectionTimeout = %v, want 5s", p.ProjectionTimeout)
	}
	if want := 30 * 24 * time.Hour; p.Retention != want {
		t.Errorf("Retention = %v, want %v", p.Retention, want)
	}
}

func TestLoadIntakeDefaults(t *testing.T) {
	in, err := config.LoadIntake(with(nil))
	if err != nil {
		t.Fatalf("LoadIntake: %v", err)
	}
	if in.EventsQueueURL != queueURL {
		t.Errorf("EventsQueueURL = %q, want %q", in.EventsQueueURL, queueURL)
	}
	if in.Table != "ledger" || in.LogLevel != slog.LevelInfo {
		t.Errorf("Common = %+v", in.Common)
	}
}

func TestLoadValues(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, p config.Processor)
	}{
		{
			name: "retention at its minimum of 4 days",
			env:  map[string]string{"RETENTION_DAYS": "4"},
			check: func(t *testing.T, p config.Processor) {
				if want := 4 * 24 * time.Hour; p.Retention != want {
					t.Errorf("Retention = %v, want %v", p.Retention, want)
				}
			},
		},
		{
			name: "retention at its maximum of 3650 days",
			env:  map[string]string{"RETENTION_DAYS": "3650"},
			check: func(t *testing.T, p config.Processor) {
				if want := 3650 * 24 * time.Hour; p.Retention != want {
					t.Errorf("Retention = %v, want %v", p.Retention, want)
				}
			},
		},
		{
			name: "attempts and lease",
			env:  map[string]string{"MAX_ATTEMPTS": "3", "LEASE_SECONDS": "900"},
			check: func(t *testing.T, p config.Processor) {
				if p.MaxAttempts != 3 {
					t.Errorf("MaxAttempts = %d, want 3", p.MaxAttempts)
				}
				if p.Lease != 15*time.Minute {
					t.Errorf("Lease = %v, want 15m", p.Lease)
				}
			},
		},
		{
			name: "attempts and lease at their bounds",
			env:  map[string]string{"MAX_ATTEMPTS": "1000", "LEASE_SECONDS": "43200"},
			check: func(t *testing.T, p config.Processor) {
				if p.MaxAttempts != 1000 || p.Lease != 12*time.Hour {
					t.Errorf("MaxAttempts, Lease = %d, %v, want 1000, 12h", p.MaxAttempts, p.Lease)
				}
			},
		},
		{
			name: "projection timeout",
			env:  map[string]string{"PROJECTION_TIMEOUT_SECONDS": "2"},
			check: func(t *testing.T, p config.Processor) {
				if p.ProjectionTimeout != 2*time.Second {
					t.Errorf("ProjectionTimeout = %v, want 2s", p.ProjectionTimeout)
				}
			},
		},
		{
			name: "log level debug",
			env:  map[string]string{"LOG_LEVEL": "debug"},
			check: func(t *testing.T, p config.Processor) {
				if p.LogLevel != slog.LevelDebug {
					t.Errorf("LogLevel = %v, want debug", p.LogLevel)
				}
			},
		},
		{
			name: "log level is case-insensitive",
			env:  map[string]string{"LOG_LEVEL": "WARN"},
			check: func(t *testing.T, p config.Processor) {
				if p.LogLevel != slog.LevelWarn {
					t.Errorf("LogLevel = %v, want warn", p.LogLevel)
				}
			},
		},
		{
			name: "log level error",
			env:  map[string]string{"LOG_LEVEL": "error"},
			check: func(t *testing.T, p config.Processor) {
				if p.LogLevel != slog.LevelError {
					t.Errorf("LogLevel = %v, want error", p.LogLevel)
				}
			},
		},
		{
			name: "env: secret allowed on a local stack",
			env:  map[string]string{"SOURCES": envSources, "ALLOW_ENV_SECRETS": "true"},
			check: func(t *testing.T, p config.Processor) {
				if !p.EnvSecret {
					t.Error("EnvSecret = false, want true")
				}
				if _, ok := p.Sources.Lookup("stripe-local"); !ok {
					t.Errorf("source stripe-local not loaded; have %v", p.Sources.Names())
				}
			},
		},
		{
			name: "ALLOW_ENV_SECRETS without env: references is harmless",
			env:  map[string]string{"ALLOW_ENV_SECRETS": "true"},
			check: func(t *testing.T, p config.Processor) {
				if !p.EnvSecret {
					t.Error("EnvSecret = false, want true")
				}
			},
		},
		{
			name: "processor does not need the events queue",
			env:  map[string]string{"EVENTS_QUEUE_URL": ""},
			check: func(t *testing.T, p config.Processor) {
				if p.Table != "ledger" {
					t.Errorf("Table = %q, want ledger", p.Table)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := config.LoadProcessor(with(tc.env))
			if err != nil {
				t.Fatalf("LoadProcessor: %v", err)
			}
			tc.check(t, p)
		})
	}
}

type loader struct {
	name string
	load func(getenv func(string) string) error
}

var (
	loadCommon = loader{"LoadCommon", func(g func(string) string) error {
		_, err := config.LoadCommon(g)
		return err
	}}
	loadIntake = loader{"LoadIntake", func(g func(string) string) error {
		_, err := config.LoadIntake(g)
		return err
	}}
	loadProcessor = loader{"LoadProcessor", func(g func(string) string) error {
		_, err := config.LoadProcessor(g)
		return err
	}}
	allLoaders = []loader{loadCommon, loadIntake, loadProcessor}
)

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		loaders []loader
		wantVar string // the variable the error must name
	}{
		{"TABLE_NAME missing", map[string]string{"TABLE_NAME": ""}, allLoaders, "TABLE_NAME"},
		{"SOURCES and SOURCES_FILE missing", map[string]string{"SOURCES": ""}, allLoaders, "SOURCES"},
		{"SOURCES invalid", map[string]string{"SOURCES": `{"sources":[]}`}, allLoaders, "SOURCES"},
		{"SOURCES_FILE unreadable", map[string]string{"SOURCES": "", "SOURCES_FILE": "/nonexistent/sources.json"}, allLoaders, "SOURCES_FILE"},
		{"EVENTS_QUEUE_URL missing", map[string]string{"EVENTS_QUEUE_URL": ""}, []loader{loadIntake}, "EVENTS_QUEUE_URL"},
		{"EFFECTS_QUEUE_URL missing", map[string]string{"EFFECTS_QUEUE_URL": ""}, []loader{loadProcessor}, "EFFECTS_QUEUE_URL"},
		{"RETENTION_DAYS not an integer", map[string]string{"RETENTION_DAYS": "thirty"}, allLoaders, "RETENTION_DAYS"},
		{"RETENTION_DAYS below the minimum", map[string]string{"RETENTION_DAYS": "3"}, allLoaders, "RETENTION_DAYS"},
		{"RETENTION_DAYS zero", map[string]string{"RETENTION_DAYS": "0"}, allLoaders, "RETENTION_DAYS"},
		{"RETENTION_DAYS negative", map[string]string{"RETENTION_DAYS": "-30"}, allLoaders, "RETENTION_DAYS"},
		{"RETENTION_DAYS above the maximum", map[string]string{"RETENTION_DAYS": "3651"}, allLoaders, "RETENTION_DAYS"},
		{"RETENTION_DAYS with a unit", map[string]string{"RETENTION_DAYS": "30d"}, allLoaders, "RETENTION_DAYS"},
		{"MAX_ATTEMPTS not an integer", map[string]string{"MAX_ATTEMPTS": "five"}, []loader{loadProcessor}, "MAX_ATTEMPTS"},
		{"MAX_ATTEMPTS zero", map[string]string{"MAX_ATTEMPTS": "0"}, []loader{loadProcessor}, "MAX_ATTEMPTS"},
		{"MAX_ATTEMPTS above the maximum", map[string]string{"MAX_ATTEMPTS": "1001"}, []loader{loadProcessor}, "MAX_ATTEMPTS"},
		{"LEASE_SECONDS not an integer", map[string]string{"LEASE_SECONDS": "1.5"}, []loader{loadProcessor}, "LEASE_SECONDS"},
		{"LEASE_SECONDS zero", map[string]string{"LEASE_SECONDS": "0"}, []loader{loadProcessor}, "LEASE_SECONDS"},
		{"LEASE_SECONDS above the maximum", map[string]string{"LEASE_SECONDS": "43201"}, []loader{loadProcessor}, "LEASE_SECONDS"},
		{"PROJECTION_TIMEOUT_SECONDS zero", map[string]string{"PROJECTION_TIMEOUT_SECONDS": "0"}, []loader{loadProcessor}, "PROJECTION_TIMEOUT_SECONDS"},
		{"PROJECTION_TIMEOUT_SECONDS above a third of the function's timeout", map[string]string{"PROJECTION_TIMEOUT_SECONDS": "11"}, []loader{loadProcessor}, "PROJECTION_TIMEOUT_SECONDS"},
		{"LOG_LEVEL unknown", map[string]string{"LOG_LEVEL": "verbose"}, allLoaders, "LOG_LEVEL"},
		{"LOG_LEVEL numeric", map[string]string{"LOG_LEVEL": "0"}, allLoaders, "LOG_LEVEL"},
		{"env: secret without ALLOW_ENV_SECRETS", map[string]string{"SOURCES": envSources}, allLoaders, "ALLOW_ENV_SECRETS"},
		{"env: secret with ALLOW_ENV_SECRETS=false", map[string]string{"SOURCES": envSources, "ALLOW_ENV_SECRETS": "false"}, allLoaders, "ALLOW_ENV_SECRETS"},
		{"env: secret with ALLOW_ENV_SECRETS=1", map[string]string{"SOURCES": envSources, "ALLOW_ENV_SECRETS": "1"}, allLoaders, "ALLOW_ENV_SECRETS"},
	}
	for _, tc := range tests {
		for _, l := range tc.loaders {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				err := l.load(with(tc.env))
				if err == nil {
					t.Fatal("loaded, want an error")
				}
				if !errors.Is(err, config.ErrConfig) {
					t.Errorf("error %q does not wrap config.ErrConfig", err)
				}
				if !strings.Contains(err.Error(), tc.wantVar) {
					t.Errorf("error %q does not name %s", err, tc.wantVar)
				}
			})
		}
	}
}

func TestLoadErrorNamesTheOffendingSource(t *testing.T) {
	_, err := config.LoadCommon(with(map[string]string{"SOURCES": envSources}))
	if err == nil {
		t.Fatal("env: reference accepted without ALLOW_ENV_SECRETS")
	}
	if !strings.Contains(err.Error(), "stripe-local") {
		t.Errorf("error %q does not name source stripe-local", err)
	}
}

func TestLoadErrorShowsTheBadValue(t *testing.T) {
	_, err := config.LoadProcessor(with(map[string]string{"LEASE_SECONDS": "sixty"}))
	if err == nil {
		t.Fatal("LEASE_SECONDS=sixty accepted")
	}
	if !strings.Contains(err.Error(), `"sixty"`) {
		t.Errorf("error %q does not quote the value it refused", err)
	}
}

func TestSourceErrorsKeepTheirType(t *testing.T) {
	_, err := config.LoadCommon(func(k string) string {
		return map[string]string{"TABLE_NAME": "t", "SOURCES": `{"sources":[]}`}[k]
	})
	if !errors.Is(err, config.ErrConfig) || !errors.Is(err, source.ErrConfig) {
		t.Fatalf("err %v: want both config.ErrConfig and source.ErrConfig", err)
	}
}

func TestLoadReconciler(t *testing.T) {
	env := func(changes map[string]string) func(string) string {
		e := baseEnv()
		maps.Copy(e, map[string]string{"EVENTS_DLQ_URL": queueURL + "-dlq", "EFFECTS_DLQ_URL": effectsURL + "-dlq", "METRICS_NAMESPACE": "EffectivelyOnce/prod"})
		maps.Copy(e, changes)
		return func(k string) string { return e[k] }
	}
	r, err := config.LoadReconciler(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.StuckAfter != 5*time.Minute || r.MaxItems != 500 || r.Budget != 90*time.Second || r.EffectsDLQURL != effectsURL+"-dlq" || r.MetricsNamespace != "EffectivelyOnce/prod" {
		t.Fatalf("defaults: %+v", r)
	}
	for name, tc := range map[string]struct {
		env     map[string]string
		wantVar string
	}{
		"no events dlq":      {map[string]string{"EVENTS_DLQ_URL": ""}, "EVENTS_DLQ_URL"},
		"no effects queue":   {map[string]string{"EFFECTS_QUEUE_URL": ""}, "EFFECTS_QUEUE_URL"},
		"stuck too short":    {map[string]string{"RECONCILE_STUCK_SECONDS": "5"}, "RECONCILE_STUCK_SECONDS"},
		"budget too long":    {map[string]string{"RECONCILE_BUDGET_SECONDS": "900"}, "RECONCILE_BUDGET_SECONDS"},
		"items not a number": {map[string]string{"RECONCILE_MAX_ITEMS": "many"}, "RECONCILE_MAX_ITEMS"},
		"truth env secret":   {map[string]string{"SOURCES": `{"sources":[{"name":"s","kind":"stripe","secrets":["sm:w"],"truth":{"kind":"stripe","secret":"env:KEY"}}]}`}, "ALLOW_ENV_SECRETS"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := config.LoadReconciler(env(tc.env)); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.wantVar) {
				t.Fatalf("err %v, want one naming %s", err, tc.wantVar)
			}
		})
	}
}

// A stripe source's connect_accounts (which connected accounts' events it
// accepts) is checked at cold start by every function that reads SOURCES:
// account ids of Stripe's shape, or "*" alone. The error names the
// variable, the source, the option and the bad entry.
func TestConnectAccountsAreValidatedAtLoad(t *testing.T) {
	doc := func(name, kind, value string) string {
		return `{"sources":[{"name":"` + name + `","kind":"` + kind + `","secrets":["sm:whsec"],"options":{"connect_accounts":` + value + `}}]}`
	}
	for _, ok := range []string{`"acct_1TestFAKEMine"`, `"acct_1TestFAKEMine,acct_2TestFAKEOther"`, `" acct_1TestFAKEMine , acct_2TestFAKEOther "`, `"*"`} {
		c, err := config.LoadIntake(with(map[string]string{"SOURCES": doc("platform", "stripe", ok)}))
		if err != nil {
			t.Errorf("connect_accounts %s refused: %v", ok, err)
			continue
		}
		src, _ := c.Sources.Lookup("platform")
		if _, refused := src.Connect().Refused([]string{"acct_1TestFAKEMine"}); refused {
			t.Errorf("connect_accounts %s does not accept acct_1TestFAKEMine", ok)
		}
	}
	c, err := config.LoadIntake(with(nil))
	if err != nil {
		t.Fatal(err)
	}
	src, _ := c.Sources.Lookup("stripe")
	if acct, refused := src.Connect().Refused([]string{"acct_1TestFAKEMine"}); !refused || acct != "acct_1TestFAKEMine" {
		t.Error("a source without connect_accounts accepts a connected account's events")
	}
	if _, refused := src.Connect().Refused(nil); refused {
		t.Error("a source without connect_accounts refuses its own events")
	}

	for _, tc := range []struct {
		name, source, want string
	}{
		{"empty", doc("platform", "stripe", `""`), "is empty"},
		{"not an account id", doc("platform", "stripe", `"cus_1TestFAKE"`), `"cus_1TestFAKE"`},
		{"an underscore in the id", doc("platform", "stripe", `"acct_test_fake"`), `"acct_test_fake"`},
		{"an empty entry", doc("platform", "stripe", `"acct_1TestFAKEMine,,acct_2TestFAKEOther"`), "entry 2"},
		{"a context path", doc("platform", "stripe", `"acct_1TestFAKEMine/acct_2TestFAKEOther"`), `"acct_1TestFAKEMine/acct_2TestFAKEOther"`},
		{"a star among ids", doc("platform", "stripe", `"acct_1TestFAKEMine,*"`), `"*"`},
		{"a list instead of a string", doc("platform", "stripe", `["acct_1TestFAKEMine"]`), "SOURCES"},
		{"another kind", `{"sources":[{"name":"platform","kind":"github","secrets":["sm:whsec"],"options":{"connect_accounts":"*"}}]}`, "connect_accounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range allLoaders {
				err := l.load(with(map[string]string{"SOURCES": tc.source}))
				if err == nil {
					t.Fatalf("%s loaded", l.name)
				}
				for _, want := range []string{"SOURCES", tc.want, "platform"} {
					if tc.name == "a list instead of a string" && want == "platform" {
						continue // a document of the wrong shape is refused before any source is read
					}
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not name %s", l.name, err, want)
					}
				}
				if tc.name != "a list instead of a string" && !strings.Contains(err.Error(), "connect_accounts") {
					t.Errorf("%s: error %q does not name the option", l.name, err)
				}
			}
		})
	}
}
