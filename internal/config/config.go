// Package config provides the functions' environment configuration, read
// and validated once at cold start so a wrong deployment fails fast with a
// message that names the variable, never later at request time.
//
// Variables:
//
//	TABLE_NAME          ledger table (required)
//	EVENTS_QUEUE_URL    events queue URL (required by intake)
//	EFFECTS_QUEUE_URL   effects (outbox) queue URL (required by the processor)
//	EFFECTS             effect configuration JSON (or EFFECTS_FILE), required by the dispatcher; see package outbox
//	SOURCES             source configuration JSON (or SOURCES_FILE: a path to it); see package source
//	RETENTION_DAYS      days a processed event is kept (default 30, minimum 4)
//	DUE_SHARDS          partitions of the due index new writes use (default 4, at most 64)
//	DUE_SHARDS_READ     partitions the queries read (default DUE_SHARDS, never fewer; see ledger.Options)
//	MAX_ATTEMPTS        processor attempts per event; equals the queue's maxReceiveCount (default 5)
//	LEASE_SECONDS       processor lease (default 60; must exceed the function timeout)
//	QUEUE_VISIBILITY_SECONDS  the events queue's visibility timeout (default 180); caps the retry backoff
//	ALLOW_ENV_SECRETS   "true" lets sources use env: secret references (local stack only)
//	LOG_LEVEL           debug, info (default), warn, error
//	METRICS_NAMESPACE   CloudWatch namespace of the EMF metrics (default EffectivelyOnce)
//	EVENTS_DLQ_URL, EFFECTS_DLQ_URL, BRIDGE_DLQ_URL, BRIDGE_DLQ_SENDERS, RECONCILE_*  the reconciler's (see LoadReconciler)
//	(the bridge function reads the intake's variables; see LoadBridge)
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("configuration")

// Common is what every function reads.
type Common struct {
	Table string
	// MetricsNamespace is the CloudWatch namespace of the EMF metrics
	// (METRICS_NAMESPACE, default "EffectivelyOnce").
	MetricsNamespace string
	Sources          *source.Set
	Retention        time.Duration
	// DueShards and DueShardsRead size the due index (DUE_SHARDS, default
	// 4; DUE_SHARDS_READ, default DUE_SHARDS): see ledger.Options.
	DueShards, DueShardsRead int
	LogLevel                 slog.Level
	EnvSecret                bool
}

// Intake adds the queue.
type Intake struct {
	Common
	EventsQueueURL string
}

// Processor adds the attempt budget and lease.
type Processor struct {
	Common
	// EffectsQueueURL is where committed intents are announced.
	EffectsQueueURL string
	MaxAttempts     int
	Lease           time.Duration
	// Visibility is the events queue's visibility timeout; retries are
	// scheduled within it so a message that comes back finds its retry due.
	Visibility time.Duration
	// ProjectionTimeout bounds one projection call
	// (PROJECTION_TIMEOUT_SECONDS, 1–10, default 5): at most a third of
	// the function's 30 s timeout, so a stalled projection leaves its
	// batch-mates the time to commit.
	ProjectionTimeout time.Duration
	// Warehouse is the warehouse sink (WAREHOUSE_BUCKET, …; nil: off).
	Warehouse *warehouse.Config
}

// Metrics returns the EMF emitter every function uses: one JSON line per
// record on stdout, next to the logs.
func (c Common) Metrics() *metrics.Emitter {
	return metrics.New(os.Stdout, c.MetricsNamespace, nil)
}

// Logger returns the JSON logger every function uses, tagged with its name,
// and makes it the default.
func (c Common) Logger(function string) *slog.Logger {
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: c.LogLevel})).With("function", function)
	slog.SetDefault(log)
	return log
}

// LoadCommon reads the shared variables.
func LoadCommon(getenv func(string) string) (Common, error) {
	c, err := LoadBase(getenv)
	if err != nil {
		return c, err
	}
	if c.Sources, err = source.Load(getenv); err != nil {
		return c, fmt.Errorf("%w: SOURCES/SOURCES_FILE: %w", ErrConfig, err)
	}
	if !c.EnvSecret {
		for _, name := range c.Sources.Names() {
			src, _ := c.Sources.Lookup(name)
			for _, ref := range src.Secrets {
				if err := c.CheckRef("source "+name, ref); err != nil {
					return c, err
				}
			}
		}
	}
	return c, nil
}

// checkRef refuses env: secret references outside a local stack.
func (c Common) CheckRef(owner, ref string) error {
	if !c.EnvSecret && strings.HasPrefix(ref, "env:") {
		return fmt.Errorf("%w: %s uses an env: secret reference; use Secrets Manager (or set ALLOW_ENV_SECRETS=true on a local stack)", ErrConfig, owner)
	}
	return nil
}

// LoadBase reads what every function reads, sources aside.
func LoadBase(getenv func(string) string) (Common, error) {
	var c Common
	if c.Table = getenv("TABLE_NAME"); c.Table == "" {
		return c, fmt.Errorf("%w: TABLE_NAME is required", ErrConfig)
	}
	days, err := IntVar(getenv, "RETENTION_DAYS", 30, 4, 3650)
	if err != nil {
		return c, err
	}
	c.Retention = time.Duration(days) * 24 * time.Hour
	if c.DueShards, err = IntVar(getenv, "DUE_SHARDS", 4, 1, ledger.MaxDueShards); err != nil {
		return c, err
	}
	if c.DueShardsRead, err = IntVar(getenv, "DUE_SHARDS_READ", c.DueShards, c.DueShards, ledger.MaxDueShards); err != nil {
		return c, err
	}
	switch strings.ToLower(getenv("LOG_LEVEL")) {
	case "", "info":
		c.LogLevel = slog.LevelInfo
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		return c, fmt.Errorf("%w: LOG_LEVEL must be debug, info, warn or error", ErrConfig)
	}
	c.EnvSecret = getenv("ALLOW_ENV_SECRETS") == "true"
	c.MetricsNamespace = getenv("METRICS_NAMESPACE")
	return c, nil
}

// LoadIntake reads the intake function's variables.
func LoadIntake(getenv func(string) string) (Intake, error) {
	c, err := LoadCommon(getenv)
	if err != nil {
		return Intake{}, err
	}
	in := Intake{Common: c, EventsQueueURL: getenv("EVENTS_QUEUE_URL")}
	if in.EventsQueueURL == "" {
		return Intake{}, fmt.Errorf("%w: EVENTS_QUEUE_URL is required", ErrConfig)
	}
	return in, nil
}

// LoadProcessor reads the processor function's variables.
func LoadProcessor(getenv func(string) string) (Processor, error) {
	c, err := LoadCommon(getenv)
	if err != nil {
		return Processor{}, err
	}
	p := Processor{Common: c, EffectsQueueURL: getenv("EFFECTS_QUEUE_URL")}
	if p.EffectsQueueURL == "" {
		return Processor{}, fmt.Errorf("%w: EFFECTS_QUEUE_URL is required", ErrConfig)
	}
	if p.MaxAttempts, err = IntVar(getenv, "MAX_ATTEMPTS", 5, 1, 1000); err != nil {
		return Processor{}, err
	}
	secs, err := IntVar(getenv, "LEASE_SECONDS", 60, 1, 43200)
	if err != nil {
		return Processor{}, err
	}
	p.Lease = time.Duration(secs) * time.Second
	vis, err := IntVar(getenv, "QUEUE_VISIBILITY_SECONDS", 180, 1, 43200)
	if err != nil {
		return Processor{}, err
	}
	p.Visibility = time.Duration(vis) * time.Second
	pt, err := IntVar(getenv, "PROJECTION_TIMEOUT_SECONDS", 5, 1, 10)
	if err != nil {
		return Processor{}, err
	}
	p.ProjectionTimeout = time.Duration(pt) * time.Second
	if p.Warehouse, err = warehouse.Load(getenv); err != nil {
		return Processor{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, name := range c.Sources.Names() {
		src, _ := c.Sources.Lookup(name)
		if src.API != nil {
			if err := c.CheckRef("source "+name+" api", src.API.Secret); err != nil {
				return Processor{}, err
			}
		}
	}
	return p, nil
}

// Reconciler is the reconciler function's configuration.
type Reconciler struct {
	Common
	EventsQueueURL, EventsDLQURL, EffectsQueueURL, EffectsDLQURL string
	StuckAfter                                                   time.Duration
	MaxItems                                                     int
	Budget                                                       time.Duration
	// BridgeDLQURL is the EventBridge bridge's dead-letter queue
	// (BRIDGE_DLQ_URL, optional: set when some source has eventbridge
	// delivery); the reconciler redelivers its events.
	BridgeDLQURL string
	// BridgeDLQSenders (BRIDGE_DLQ_SENDERS, required with BRIDGE_DLQ_URL)
	// are the SenderIds whose letters the reconciler redelivers: the bridge
	// function's role id (and any other principal an operator adds); see
	// queue.ParseSenders. A letter anyone else wrote is refused.
	BridgeDLQSenders queue.Senders
	// Warehouse is the warehouse sink whose records the reconciler checks
	// (WAREHOUSE_BUCKET, …; nil: off).
	Warehouse *warehouse.Config
	// WarehouseRetention is the records' lifecycle expiration
	// (WAREHOUSE_RETENTION_DAYS; 0: kept forever): the drift check also
	// checks every subject older than it.
	WarehouseRetention time.Duration
	// WarehouseCheckReads and WarehouseCheckSubjects bound one run of the
	// warehouse drift check (WAREHOUSE_CHECK_READS, table items read,
	// default 10,000; WAREHOUSE_CHECK_SUBJECTS, records asked for,
	// default 100); 0: the defaults.
	WarehouseCheckReads, WarehouseCheckSubjects int
}

// loadWarehouseCheck reads the warehouse drift check's variables:
// WAREHOUSE_RETENTION_DAYS (0 to 36500), WAREHOUSE_CHECK_READS (0 to
// 1,000,000) and WAREHOUSE_CHECK_SUBJECTS (0 to 10,000); unset is 0.
func loadWarehouseCheck(getenv func(string) string) (retention time.Duration, reads, subjects int, err error) {
	var days int
	for _, v := range []struct {
		name string
		max  int
		dst  *int
	}{{"WAREHOUSE_RETENTION_DAYS", 36500, &days}, {"WAREHOUSE_CHECK_READS", 1000000, &reads}, {"WAREHOUSE_CHECK_SUBJECTS", 10000, &subjects}} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > v.max {
			return 0, 0, 0, fmt.Errorf("%w: %s must be a whole number from 0 to %d", ErrConfig, v.name, v.max)
		}
		*v.dst = n
	}
	return time.Duration(days) * 24 * time.Hour, reads, subjects, nil
}

// LoadReconciler reads the reconciler's variables: the common ones, the
// four queue URLs (EVENTS_QUEUE_URL, EVENTS_DLQ_URL, EFFECTS_QUEUE_URL,
// EFFECTS_DLQ_URL; all required), BRIDGE_DLQ_URL (optional) and with it
// BRIDGE_DLQ_SENDERS (required then), RECONCILE_STUCK_SECONDS (default 300),
// RECONCILE_MAX_ITEMS (default 500) and RECONCILE_BUDGET_SECONDS (default
// 90; below the function timeout), and the warehouse sink's
// (warehouse.Load).
func LoadReconciler(getenv func(string) string) (Reconciler, error) {
	c, err := LoadCommon(getenv)
	if err != nil {
		return Reconciler{}, err
	}
	r := Reconciler{Common: c}
	if r.Warehouse, err = warehouse.Load(getenv); err != nil {
		return Reconciler{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if r.WarehouseRetention, r.WarehouseCheckReads, r.WarehouseCheckSubjects, err = loadWarehouseCheck(getenv); err != nil {
		return Reconciler{}, err
	}
	for _, v := range []struct {
		name string
		dst  *string
	}{{"EVENTS_QUEUE_URL", &r.EventsQueueURL}, {"EVENTS_DLQ_URL", &r.EventsDLQURL}, {"EFFECTS_QUEUE_URL", &r.EffectsQueueURL}, {"EFFECTS_DLQ_URL", &r.EffectsDLQURL}} {
		if *v.dst = getenv(v.name); *v.dst == "" {
			return Reconciler{}, fmt.Errorf("%w: %s is required", ErrConfig, v.name)
		}
	}
	r.BridgeDLQURL = getenv("BRIDGE_DLQ_URL")
	if senders := getenv("BRIDGE_DLQ_SENDERS"); r.BridgeDLQURL != "" || senders != "" {
		if r.BridgeDLQURL == "" {
			return Reconciler{}, fmt.Errorf("%w: BRIDGE_DLQ_SENDERS is set without BRIDGE_DLQ_URL", ErrConfig)
		}
		if r.BridgeDLQSenders, err = queue.ParseSenders(senders); err != nil {
			return Reconciler{}, fmt.Errorf("%w: BRIDGE_DLQ_SENDERS (who may write the bridge DLQ, required with BRIDGE_DLQ_URL): %v", ErrConfig, err)
		}
	}
	for _, name := range c.Sources.Names() {
		src, _ := c.Sources.Lookup(name)
		if src.Truth != nil && src.Truth.Secret != "" {
			if err := c.CheckRef("source "+name+" truth", src.Truth.Secret); err != nil {
				return Reconciler{}, err
			}
		}
	}
	secs, err := IntVar(getenv, "RECONCILE_STUCK_SECONDS", 300, 30, 86400)
	if err != nil {
		return Reconciler{}, err
	}
	r.StuckAfter = time.Duration(secs) * time.Second
	if r.MaxItems, err = IntVar(getenv, "RECONCILE_MAX_ITEMS", 500, 1, 100000); err != nil {
		return Reconciler{}, err
	}
	if secs, err = IntVar(getenv, "RECONCILE_BUDGET_SECONDS", 90, 1, 840); err != nil {
		return Reconciler{}, err
	}
	r.Budget = time.Duration(secs) * time.Second
	return r, nil
}

func IntVar(getenv func(string) string, name string, def, lo, hi int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s must be an integer between %d and %d, got %q", ErrConfig, name, lo, hi, v)
	}
	return n, nil
}
