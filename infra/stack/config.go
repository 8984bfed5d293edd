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

	"github.com/effectively-once/webhooks/infra/pipeline"
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
	Sources []pipeline.Source
	// Effects are the outbox's effects (EFFECTS): each an HTTP endpoint
	// ("url") or an AWS target ("target", an ARN; "kmsKeyArn" for an SQS
	// queue's customer managed key), as pipeline.Effect's JSON form has
	// them. None configured means the dispatcher is deployed with its
	// queue mapping disabled: intents wait PENDING in the ledger and
	// nothing downstream is called.
	Effects []pipeline.Effect
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
	// OutboxEventSource is the source of the events the dispatcher puts on
	// EventBridge buses; empty: the construct's "effectively-once.webhooks-<stage>".
	OutboxEventSource string
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
	// Billing is the ledger table's billing: on demand unless it names
	// provisioned capacity (pipeline.Billing's JSON form).
	Billing pipeline.Billing
	// Warehouse turns on the warehouse sink (warehouse=true): change
	// records in S3, queried with Athena (pipeline.WarehouseProps). The
	// warehouse* keys set its fields and need warehouse=true; nil, the
	// default, creates nothing.
	Warehouse *pipeline.WarehouseProps
	// Assets finds each function's code; AssetsFromBuild is the default.
	// Unused when Build is set.
	Assets AssetResolver
	// Build, when set, builds each function from functions/<fn> of the
	// module at synth (pipeline.GoBuild) instead of taking it from Assets.
	Build *pipeline.GoBuild
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
	KeyBilling            = "billing"
	KeyOutboxEventSource  = "outboxEventSource"
	// The warehouse: warehouse=true turns it on; the others set
	// pipeline.WarehouseProps' fields of the same names.
	KeyWarehouse                      = "warehouse"
	KeyWarehousePrefix                = "warehousePrefix"
	KeyWarehouseMaxStateBytes         = "warehouseMaxStateBytes"
	KeyWarehouseRetentionDays         = "warehouseRetentionDays"
	KeyWarehouseVersioned             = "warehouseVersioned"
	KeyWarehouseNoncurrentVersionDays = "warehouseNoncurrentVersionDays"
	KeyWarehouseQueryResultsDays      = "warehouseQueryResultsDays"
)

// FromContext reads the configuration. get returns a context value or nil;
// values come as JSON types from cdk.json and as strings from `-c`, and both
// are accepted. It parses each value and fills the defaults; the values
// are then checked by the construct's own rules (pipeline.Props.Validate),
// with each error naming the context key.
func FromContext(get func(key string) any) (Config, error) {
	c := Config{Stage: "dev", DeletionProtection: true, LogRetentionDays: 30, RetentionDays: 30, LogLevel: "info",
		ThrottleRate: 50, ThrottleBurst: 100}
	var err error
	if v := get(KeyStage); v != nil {
		c.Stage = fmt.Sprint(v)
	}
	if err = decodeJSON(get(KeySources), &c.Sources); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeySources, err)
	}
	if err = decodeJSON(get(KeyEffects), &c.Effects); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyEffects, err)
	}
	if err = decodeJSON(get(KeyBilling), &c.Billing); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyBilling, err)
	}
	if v := get(KeyAlarmEmail); v != nil {
		c.AlarmEmail = strings.TrimSpace(fmt.Sprint(v))
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
		key string
		dst *int
	}{
		{KeyLogRetentionDays, &c.LogRetentionDays},
		{KeyRetentionDays, &c.RetentionDays},
		{KeyThrottleRate, &c.ThrottleRate},
		{KeyThrottleBurst, &c.ThrottleBurst},
		{KeyDueShards, &c.DueShards},
	}
	c.DueShards = 4
	for _, iv := range ints {
		if *iv.dst, err = intValue(get(iv.key), *iv.dst); err != nil {
			return c, fmt.Errorf("%w: %s: %v", ErrConfig, iv.key, err)
		}
	}
	// After the values that are their defaults.
	if c.DueShardsRead, err = intValue(get(KeyDueShardsRead), c.DueShards); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, KeyDueShardsRead, err)
	}
	if c.IntakeReservedConcurrency, err = intValue(get(KeyIntakeReserved), c.ThrottleBurst); err != nil {
		return c, fmt.Errorf("%w: %s: %v (0 reserves nothing)", ErrConfig, KeyIntakeReserved, err)
	}
	if v := get(KeyLogLevel); v != nil {
		c.LogLevel = strings.ToLower(fmt.Sprint(v))
	}
	if v := get(KeyOutboxEventSource); v != nil {
		c.OutboxEventSource = fmt.Sprint(v)
	}
	if c.Warehouse, err = warehouseFromContext(get); err != nil {
		return c, err
	}
	return c, contextError(c.Props().Validate())
}

// warehouseFromContext reads warehouse=true and the warehouse* keys. A
// warehouse* key without warehouse=true is an error: it would silently
// configure nothing.
func warehouseFromContext(get func(key string) any) (*pipeline.WarehouseProps, error) {
	on, err := boolValue(get(KeyWarehouse), false)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, KeyWarehouse, err)
	}
	if !on {
		for _, k := range []string{KeyWarehousePrefix, KeyWarehouseMaxStateBytes, KeyWarehouseRetentionDays, KeyWarehouseVersioned,
			KeyWarehouseNoncurrentVersionDays, KeyWarehouseQueryResultsDays} {
			if get(k) != nil {
				return nil, fmt.Errorf("%w: %s is set but %s is not true: the warehouse is off", ErrConfig, k, KeyWarehouse)
			}
		}
		return nil, nil
	}
	w := &pipeline.WarehouseProps{}
	if v := get(KeyWarehousePrefix); v != nil {
		w.Prefix = strings.TrimSpace(fmt.Sprint(v))
	}
	if w.Versioned, err = boolValue(get(KeyWarehouseVersioned), false); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, KeyWarehouseVersioned, err)
	}
	for _, iv := range []struct {
		key string
		dst *int
	}{
		{KeyWarehouseMaxStateBytes, &w.MaxStateBytes},
		{KeyWarehouseRetentionDays, &w.RetentionDays},
		{KeyWarehouseNoncurrentVersionDays, &w.NoncurrentVersionDays},
		{KeyWarehouseQueryResultsDays, &w.QueryResultsDays},
	} {
		if *iv.dst, err = intValue(get(iv.key), 0); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, iv.key, err)
		}
	}
	return w, nil
}

// Props maps the configuration to the construct's props: the physical
// names "webhooks-<stage>-…", secrets "webhooks/<stage>/…" and the metrics
// namespace "EffectivelyOnce/<stage>" are the ones every deployed stage
// has, and the functions' code comes from Assets.
func (c Config) Props() pipeline.Props {
	reserved := c.IntakeReservedConcurrency
	return pipeline.Props{
		Name:                      "webhooks",
		Stage:                     c.Stage,
		Sources:                   c.Sources,
		Effects:                   c.Effects,
		Code:                      c.code(),
		Build:                     c.Build,
		AlarmEmail:                c.AlarmEmail,
		Tracing:                   c.Tracing,
		AllowTableDeletion:        !c.DeletionProtection,
		LogRetentionDays:          c.LogRetentionDays,
		RetentionDays:             c.RetentionDays,
		LogLevel:                  c.LogLevel,
		ThrottleRate:              c.ThrottleRate,
		ThrottleBurst:             c.ThrottleBurst,
		IntakeReservedConcurrency: &reserved,
		DueShards:                 c.DueShards,
		DueShardsRead:             c.DueShardsRead,
		Billing:                   c.Billing,
		BridgeDLQSenders:          c.BridgeDLQSenders,
		LedgerDataEvents:          c.LedgerDataEvents,
		MetricsNamespace:          c.MetricsNamespace(),
		OutboxEventSource:         c.OutboxEventSource,
		Warehouse:                 c.Warehouse,
	}
}

// contextKeys names, for each prop the context sets, its context key.
var contextKeys = map[string]string{
	"Stage": KeyStage, "Sources": KeySources, "Effects": KeyEffects, "AlarmEmail": KeyAlarmEmail,
	"LogRetentionDays": KeyLogRetentionDays, "RetentionDays": KeyRetentionDays, "LogLevel": KeyLogLevel,
	"ThrottleRate": KeyThrottleRate, "ThrottleBurst": KeyThrottleBurst, "IntakeReservedConcurrency": KeyIntakeReserved,
	"DueShardsRead": KeyDueShardsRead, "DueShards": KeyDueShards, "Billing": KeyBilling, "OutboxEventSource": KeyOutboxEventSource,
}

var (
	propNameRE = regexp.MustCompile(`\b(Stage|Sources|Effects|AlarmEmail|LogRetentionDays|RetentionDays|LogLevel|ThrottleRate|ThrottleBurst|IntakeReservedConcurrency|DueShardsRead|DueShards|Billing|OutboxEventSource)\b`)
	fieldRE    = regexp.MustCompile(`\.([A-Z][A-Za-z]*)`)
)

// warehouseKeys names, for each warehouse prop, its context key.
var warehouseKeys = strings.NewReplacer(
	"Warehouse.Prefix", KeyWarehousePrefix, "Warehouse.MaxStateBytes", KeyWarehouseMaxStateBytes,
	"Warehouse.RetentionDays", KeyWarehouseRetentionDays, "Warehouse.NoncurrentVersionDays", KeyWarehouseNoncurrentVersionDays,
	"Warehouse.QueryResultsDays", KeyWarehouseQueryResultsDays, "Versioned", KeyWarehouseVersioned,
)

// contextError rewrites a *pipeline.PropError in the context's words: the
// props' names become context keys ("DueShards" → "dueShards",
// "Sources[0].SecretArn" → "sources[0].secretArn",
// "Warehouse.Prefix" → "warehousePrefix"), and the error wraps ErrConfig.
func contextError(err error) error {
	var pe *pipeline.PropError
	if err == nil || errors.Is(err, ErrConfig) || !errors.As(err, &pe) {
		return err
	}
	words := func(s string) string {
		s = warehouseKeys.Replace(s)
		s = propNameRE.ReplaceAllStringFunc(s, func(m string) string { return contextKeys[m] })
		return fieldRE.ReplaceAllStringFunc(s, func(m string) string { return "." + jsonName(m[1:]) })
	}
	return fmt.Errorf("%w: %s: %s", ErrConfig, words(pe.Prop), words(pe.Err.Error()))
}

// jsonName is a field's JSON name in context: "SecretArn" → "secretArn",
// "API" → "api".
func jsonName(field string) string {
	n := 0
	for n < len(field) && field[n] >= 'A' && field[n] <= 'Z' {
		n++
	}
	if n > 1 && n < len(field) {
		n-- // "URLPath" → "urlPath"
	}
	return strings.ToLower(field[:n]) + field[n:]
}

// StackName is the CloudFormation stack's name for this stage.
func (c Config) StackName() string { return "Webhooks-" + c.Stage }

// Prefix starts every physical name of this stage: "webhooks-<stage>-".
func (c Config) Prefix() string { return "webhooks-" + c.Stage + "-" }

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

func intValue(v any, def int) (int, error) {
	switch x := v.(type) {
	case nil:
		return def, nil
	case float64:
		n := int(x)
		if float64(n) != x {
			return 0, fmt.Errorf("want an integer, got %v", x)
		}
		return n, nil
	case string:
		n, err := strconv.Atoi(x)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %q", x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("want an integer, got %v", v)
}

// code is the construct's Code: Assets, unless the functions are built at
// synth.
func (c Config) code() pipeline.Code {
	if c.Build != nil {
		return pipeline.Code{}
	}
	return pipeline.Code{Resolve: c.Assets}
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
// build` writes). A function whose binary is missing gets the construct's
// placeholder folder (pipeline.PlaceholderDir), so `cdk synth` works on a
// clean checkout; with
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
		dir, err := pipeline.PlaceholderDir()
		return dir, false, err
	}
}
