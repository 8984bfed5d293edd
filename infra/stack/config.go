package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// ErrConfig wraps every error in the stack's context values.
var ErrConfig = errors.New("stack context")

// Config is everything the stack reads from CDK context (cdk.json, or
// `-c key=value` on the command line). FromContext fills it and applies the
// defaults below; a wrong value fails synth, never a deployed function.
type Config struct {
	// Stage names the environment ("dev", "prod"). Every physical name
	// carries it, so two stages live side by side in one account.
	Stage string
	// Sources are the webhook sources intake accepts (SOURCES).
	Sources []SourceConfig
	// Effects are the outbox's HTTP effects (EFFECTS). None configured means
	// the dispatcher is deployed with its queue mapping disabled: intents
	// wait PENDING in the ledger and nothing downstream is called.
	Effects []EffectConfig
	// AlarmEmail, when set, subscribes this address to the alarm topic.
	AlarmEmail string
	// Tracing turns on X-Ray active tracing for every function.
	Tracing bool
	// DeletionProtection guards the ledger table (and keeps it on stack
	// deletion). On unless the context says "false".
	DeletionProtection bool
	// LogRetentionDays is how long function and access logs are kept.
	LogRetentionDays int
	// RetentionDays is how long a finished event is kept in the ledger
	// (RETENTION_DAYS; the ledger's minimum is 4).
	RetentionDays int
	// LogLevel is the functions' LOG_LEVEL and Lambda application log level.
	LogLevel string
	// ThrottleRate and ThrottleBurst limit the HTTP API stage (requests per
	// second, and the burst above it).
	ThrottleRate, ThrottleBurst int
	// IntakeReservedConcurrency reserves, and caps, the intake function's
	// concurrent executions, so a flood of deliveries cannot take the
	// account's whole concurrency from the processor, dispatcher and
	// reconciler. Default ThrottleBurst: the most requests the stage lets
	// through at once. 0 reserves nothing (accounts whose concurrency quota
	// cannot spare it: a reservation comes out of the unreserved pool, and
	// Lambda keeps at least 100 of that pool unreserved).
	IntakeReservedConcurrency int
	// DueShards and DueShardsRead size the ledger's due index (every
	// function's DUE_SHARDS and DUE_SHARDS_READ; see ledger.Options). One
	// partition key takes about 1,000 write units per second, and an event
	// with one effect writes about 7 index entries: size DueShards from the
	// expected peak (BENCHMARKS.md, "Scale"). Raise it in one deploy; lower
	// it in two (first DueShards, keeping DueShardsRead at the old count
	// until the retired shards are empty).
	DueShards, DueShardsRead int
	// BridgeDLQSenders are SenderIds, beyond the bridge function's role,
	// whose letters in the bridge DLQ the reconciler redelivers
	// (bridgeDlqSenders, comma-separated; see queue.ParseSenders). None by
	// default: SQS's SenderId for EventBridge's own deliveries to the DLQ
	// is not documented, so such a letter is refused and recorded until an
	// operator who has checked one adds the SenderId it names.
	BridgeDLQSenders queue.Senders
	// LedgerDataEvents creates a CloudTrail trail that records every write
	// to the ledger table (its DynamoDB data events) into an encrypted,
	// versioned, TLS-only bucket with log file validation: the server-side
	// evidence of who wrote what, audit entries included. Off by default
	// (data events cost; an account often records them in an organization
	// trail already; infra/README.md).
	LedgerDataEvents bool
	// Assets finds each function's code; AssetsFromBuild is the default.
	Assets AssetResolver
}

// SourceConfig is one webhook source as written in context:
// {"name","kind","options"?,"secretArn"?,"toleranceSeconds"?,"maxBodyBytes"?,
// "truth"?,"delivery"?,"eventSource"?,"api"?}. Without secretArn the stack creates
// its signing secret (SNS sources, and sources whose delivery is
// eventbridge only, have none).
type SourceConfig struct {
	Name             string            `json:"name"`
	Kind             string            `json:"kind"`
	Options          map[string]string `json:"options,omitempty"`
	SecretArn        string            `json:"secretArn,omitempty"`
	ToleranceSeconds int               `json:"toleranceSeconds,omitempty"`
	MaxBodyBytes     int               `json:"maxBodyBytes,omitempty"`
	Truth            *TruthConfig      `json:"truth,omitempty"`
	// Delivery ("https", "eventbridge", "https+eventbridge") and
	// EventSource (the partner event source name) are SOURCES' delivery
	// and event_source; with eventbridge the stack adds the bridge.
	Delivery    string `json:"delivery,omitempty"`
	EventSource string `json:"eventSource,omitempty"`
	// API, for a stripe source, is the Stripe API the processor reads the
	// objects thin events name from: {"secretArn"?,"url"?,"timeoutSeconds"?}.
	// Without secretArn the stack creates the secret for the restricted key.
	API *APIConfig `json:"api,omitempty"`
}

// APIConfig is SOURCES' api: the restricted key the processor fetches
// with (created unless secretArn is given), another API base, a timeout.
type APIConfig struct {
	SecretArn      string `json:"secretArn,omitempty"`
	URL            string `json:"url,omitempty"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty"`
}

// TruthConfig is a source's source of truth for the reconciler:
// {"kind":"stripe"|"http","url"?,"lookbackMinutes"?,"secretArn"?,"secret"?}.
// A stripe truth always has an API key secret (created unless secretArn is
// given); an http truth has a bearer token only with secretArn or
// secret=true.
type TruthConfig struct {
	Kind            string `json:"kind"`
	URL             string `json:"url,omitempty"`
	LookbackMinutes int    `json:"lookbackMinutes,omitempty"`
	SecretArn       string `json:"secretArn,omitempty"`
	Secret          bool   `json:"secret,omitempty"`
}

// EffectConfig is one outbox effect as written in context:
// {"kind","url","scopes","statusUrl"?,"timeoutSeconds"?,
// "idempotencyWindowHours"?,"secretArn"?, "secret"?}. secret=true asks the
// stack to create a bearer token secret when no secretArn is given; by
// default an effect has none. scopes (required) names the sources whose
// facts may trigger the effect (a source's scope is its name here), or is
// ["*"] for every source; see outbox.EffectConfig.
type EffectConfig struct {
	Kind                   string   `json:"kind"`
	URL                    string   `json:"url"`
	Scopes                 []string `json:"scopes"`
	StatusURL              string   `json:"statusUrl,omitempty"`
	TimeoutSeconds         int      `json:"timeoutSeconds,omitempty"`
	IdempotencyWindowHours int      `json:"idempotencyWindowHours,omitempty"`
	SecretArn              string   `json:"secretArn,omitempty"`
	Secret                 bool     `json:"secret,omitempty"`
}

// Context keys read by FromContext.
const (
	KeyStage              = "stage"
	KeySources            = "sources"
	KeyEffects            = "effects"
	KeyAlarmEmail         = "alarmEmail"
	KeyTracing            = "tracing"
	KeyDeletionProtection = "deletionProtection"
	KeyLogRetentionDays   = "logRetentionDays"
	KeyRetentionDays      = "retentionDays"
	KeyLogLevel           = "logLevel"
	KeyThrottleRate       = "throttleRateLimit"
	KeyThrottleBurst      = "throttleBurstLimit"
	KeyIntakeReserved     = "intakeReservedConcurrency"
	KeyDueShards          = "dueShards"
	KeyDueShardsRead      = "dueShardsRead"
	KeyBridgeDLQSenders   = "bridgeDlqSenders"
	KeyLedgerDataEvents   = "ledgerDataEvents"
)

var (
	stageRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	// The same rule as package source's names, checked here so a bad name
	// fails synth rather than the deployed function's cold start.
	sourceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	arnRE        = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$`)
)

// maxReservedConcurrency bounds intakeReservedConcurrency: far above what
// the stage's throttle lets through (its own maximum burst is 5000), and a
// reservation the account cannot give fails the deployment anyway.
const maxReservedConcurrency = 5000

// Log retentions CloudWatch accepts (days).
var validRetention = map[int]bool{1: true, 3: true, 5: true, 7: true, 14: true, 30: true, 60: true, 90: true,
	120: true, 150: true, 180: true, 365: true, 400: true, 545: true, 731: true, 1096: true, 1827: true,
	2192: true, 2557: true, 2922: true, 3288: true, 3653: true}

// FromContext reads the configuration. get returns a context value or nil;
// values come as JSON types from cdk.json and as strings from `-c`, and both
// are accepted.
func FromContext(get func(key string) any) (Config, error) {
	c := Config{Stage: "dev", DeletionProtection: true, LogRetentionDays: 30, RetentionDays: 30, LogLevel: "info",
		ThrottleRate: 50, ThrottleBurst: 100}
	var err error
	if v := get(KeyStage); v != nil {
		c.Stage = fmt.Sprint(v)
	}
	if !stageRE.MatchString(c.Stage) {
		return c, fmt.Errorf("%w: %s %q must match %s (it goes into every resource name)", ErrConfig, KeyStage, c.Stage, stageRE)
	}
	if err = decodeJSON(get(KeySources), &c.Sources); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeySources, err)
	}
	if err = decodeJSON(get(KeyEffects), &c.Effects); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyEffects, err)
	}
	if v := get(KeyAlarmEmail); v != nil {
		c.AlarmEmail = strings.TrimSpace(fmt.Sprint(v))
		if c.AlarmEmail != "" && !strings.Contains(c.AlarmEmail, "@") {
			return c, fmt.Errorf("%w: %s %q is not an email address", ErrConfig, KeyAlarmEmail, c.AlarmEmail)
		}
	}
	if c.Tracing, err = boolValue(get(KeyTracing), false); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyTracing, err)
	}
	if c.DeletionProtection, err = boolValue(get(KeyDeletionProtection), true); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyDeletionProtection, err)
	}
	if c.LedgerDataEvents, err = boolValue(get(KeyLedgerDataEvents), false); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyLedgerDataEvents, err)
	}
	if v := get(KeyBridgeDLQSenders); v != nil && strings.TrimSpace(fmt.Sprint(v)) != "" {
		if c.BridgeDLQSenders, err = queue.ParseSenders(fmt.Sprint(v)); err != nil {
			return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyBridgeDLQSenders, err)
		}
	}
	ints := []struct {
		key    string
		dst    *int
		lo, hi int
	}{
		{KeyLogRetentionDays, &c.LogRetentionDays, 1, 3653},
		{KeyRetentionDays, &c.RetentionDays, 4, 3650},
		{KeyThrottleRate, &c.ThrottleRate, 1, 10000},
		{KeyThrottleBurst, &c.ThrottleBurst, 1, 5000},
	}
	for _, iv := range ints {
		if *iv.dst, err = intValue(get(iv.key), *iv.dst, iv.lo, iv.hi); err != nil {
			return c, fmt.Errorf("%w: %s: %v", ErrConfig, iv.key, err)
		}
	}
	if c.DueShards, err = intValue(get(KeyDueShards), 4, 1, ledger.MaxDueShards); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyDueShards, err)
	}
	if c.DueShardsRead, err = intValue(get(KeyDueShardsRead), c.DueShards, 1, ledger.MaxDueShards); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyDueShardsRead, err)
	}
	if c.DueShardsRead < c.DueShards {
		return c, fmt.Errorf("%w: %s %d is below %s %d: the queries would miss the items written on the other shards", ErrConfig, KeyDueShardsRead, c.DueShardsRead, KeyDueShards, c.DueShards)
	}
	// After the burst limit, whose value is its default.
	if c.IntakeReservedConcurrency, err = intValue(get(KeyIntakeReserved), c.ThrottleBurst, 0, maxReservedConcurrency); err != nil {
		return c, fmt.Errorf("%w: %s: %v (0 reserves nothing)", ErrConfig, KeyIntakeReserved, err)
	}
	if !validRetention[c.LogRetentionDays] {
		return c, fmt.Errorf("%w: %s %d is not a retention CloudWatch Logs accepts", ErrConfig, KeyLogRetentionDays, c.LogRetentionDays)
	}
	if v := get(KeyLogLevel); v != nil {
		c.LogLevel = strings.ToLower(fmt.Sprint(v))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return c, fmt.Errorf("%w: %s must be debug, info, warn or error", ErrConfig, KeyLogLevel)
	}
	return c, c.validate()
}

func (c Config) validate() error {
	if len(c.Sources) == 0 {
		return fmt.Errorf("%w: %s: at least one source is required", ErrConfig, KeySources)
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		if !sourceNameRE.MatchString(s.Name) {
			return fmt.Errorf("%w: %s[%d]: name %q must match %s", ErrConfig, KeySources, i, s.Name, sourceNameRE)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: %s[%d]: name %q appears twice", ErrConfig, KeySources, i, s.Name)
		}
		seen[s.Name] = true
		if s.SecretArn != "" && !arnRE.MatchString(s.SecretArn) {
			return fmt.Errorf("%w: %s[%d]: secretArn must be a Secrets Manager secret ARN", ErrConfig, KeySources, i)
		}
		if s.API != nil && s.API.SecretArn != "" && !arnRE.MatchString(s.API.SecretArn) {
			return fmt.Errorf("%w: %s[%d]: api.secretArn must be a Secrets Manager secret ARN", ErrConfig, KeySources, i)
		}
		if s.Truth != nil && s.Truth.SecretArn != "" && !arnRE.MatchString(s.Truth.SecretArn) {
			return fmt.Errorf("%w: %s[%d]: truth.secretArn must be a Secrets Manager secret ARN", ErrConfig, KeySources, i)
		}
	}
	kinds := map[string]bool{}
	for i, e := range c.Effects {
		if kinds[e.Kind] {
			return fmt.Errorf("%w: %s[%d]: kind %q appears twice", ErrConfig, KeyEffects, i, e.Kind)
		}
		kinds[e.Kind] = true
		if e.SecretArn != "" && !arnRE.MatchString(e.SecretArn) {
			return fmt.Errorf("%w: %s[%d]: secretArn must be a Secrets Manager secret ARN", ErrConfig, KeyEffects, i)
		}
		if err := outbox.CheckScopes(e.Scopes); err != nil {
			return fmt.Errorf("%w: %s[%d] (%s): %v", ErrConfig, KeyEffects, i, e.Kind, err)
		}
		// A scope no source has is a typo or a source not deployed: the
		// effect would refuse its intended source's intents.
		for _, sc := range e.Scopes {
			if sc != outbox.AllScopes && !seen[sc] {
				return fmt.Errorf("%w: %s[%d] (%s): scope %q is no source's: the sources are %s", ErrConfig, KeyEffects, i, e.Kind, sc, strings.Join(sourceNames(c.Sources), ", "))
			}
		}
	}
	return nil
}

// Prefix starts every physical name of this stage: "webhooks-<stage>-".
func (c Config) Prefix() string { return "webhooks-" + c.Stage + "-" }

// StackName is the CloudFormation stack's name for this stage.
func (c Config) StackName() string { return "Webhooks-" + c.Stage }

// MetricsNamespace is where the functions' embedded metrics land.
func (c Config) MetricsNamespace() string { return "EffectivelyOnce/" + c.Stage }

// decodeJSON accepts a JSON-typed value (from cdk.json) or a string holding
// JSON (from -c); nil leaves dst as it is.
func decodeJSON(v any, dst any) error {
	if v == nil {
		return nil
	}
	var raw []byte
	if s, ok := v.(string); ok {
		raw = []byte(s)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		raw = b
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

func boolValue(v any, def bool) (bool, error) {
	switch b := v.(type) {
	case nil:
		return def, nil
	case bool:
		return b, nil
	case string:
		return strconv.ParseBool(b)
	}
	return false, fmt.Errorf("want true or false, got %v", v)
}

func intValue(v any, def, lo, hi int) (int, error) {
	var n int
	switch x := v.(type) {
	case nil:
		return def, nil
	case float64:
		n = int(x)
		if float64(n) != x {
			return 0, fmt.Errorf("want an integer, got %v", x)
		}
	case string:
		var err error
		if n, err = strconv.Atoi(x); err != nil {
			return 0, fmt.Errorf("want an integer, got %q", x)
		}
	default:
		return 0, fmt.Errorf("want an integer, got %v", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is outside %d..%d", n, lo, hi)
	}
	return n, nil
}

// AssetResolver says where a function's code is. built is false when the
// binary does not exist; dir is then a placeholder folder.
type AssetResolver func(fn string) (dir string, built bool, err error)

// RepoRoot finds the repository root (the folder with cdk.json) from dir
// upwards.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cdk.json")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no cdk.json above the working directory", ErrConfig)
		}
		dir = parent
	}
}

// AssetsFromBuild resolves build/<fn>/bootstrap under root (what `make
// build` writes). A function whose binary is missing gets the placeholder
// folder infra/placeholder, so `cdk synth` works on a clean checkout; with
// strict set (as `make deploy` does), a missing binary of a function whose
// source exists in functions/ is an error, so nothing half-built deploys.
// A function that has no source yet (the reconciler, while it is written)
// always gets the placeholder, and the stack keeps it switched off.
func AssetsFromBuild(root string, strict bool) AssetResolver {
	return func(fn string) (string, bool, error) {
		dir := filepath.Join(root, "build", fn)
		if st, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil && st.Mode().IsRegular() {
			return dir, true, nil
		}
		_, srcErr := os.Stat(filepath.Join(root, "functions", fn))
		if strict && srcErr == nil {
			return "", false, fmt.Errorf("%w: %s is missing: run `make build` before deploying", ErrConfig, filepath.Join("build", fn, "bootstrap"))
		}
		return filepath.Join(root, "infra", "placeholder"), false, nil
	}
}
