// Package config provides the functions' environment configuration, read
// and validated once at cold start so a wrong deployment fails fast with a
// message that names the variable, never later at request time.
//
// Variables:
//
//	TABLE_NAME          ledger table (required)
//	EVENTS_QUEUE_URL    events queue URL (required by intake)
//	SOURCES             source configuration JSON (or SOURCES_FILE: a path to it); see package source
//	RETENTION_DAYS      days a processed event is kept (default 30, minimum 4)
//	MAX_ATTEMPTS        processor attempts per event; equals the queue's maxReceiveCount (default 5)
//	LEASE_SECONDS       processor lease (default 60; must exceed the function timeout)
//	QUEUE_VISIBILITY_SECONDS  the events queue's visibility timeout (default 180); caps the retry backoff
//	ALLOW_ENV_SECRETS   "true" lets sources use env: secret references (local stack only)
//	LOG_LEVEL           debug, info (default), warn, error
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/source"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("configuration")

// Common is what every function reads.
type Common struct {
	Table     string
	Sources   *source.Set
	Retention time.Duration
	LogLevel  slog.Level
	EnvSecret bool
}

// Intake adds the queue.
type Intake struct {
	Common
	EventsQueueURL string
}

// Processor adds the attempt budget and lease.
type Processor struct {
	Common
	MaxAttempts int
	Lease       time.Duration
	// Visibility is the events queue's visibility timeout; retries are
	// scheduled within it so a message that comes back finds its retry due.
	Visibility time.Duration
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
	var c Common
	var err error
	if c.Table = getenv("TABLE_NAME"); c.Table == "" {
		return c, fmt.Errorf("%w: TABLE_NAME is required", ErrConfig)
	}
	if c.Sources, err = source.Load(getenv); err != nil {
		return c, fmt.Errorf("%w: SOURCES/SOURCES_FILE: %w", ErrConfig, err)
	}
	days, err := intVar(getenv, "RETENTION_DAYS", 30, 4, 3650)
	if err != nil {
		return c, err
	}
	c.Retention = time.Duration(days) * 24 * time.Hour
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
	if !c.EnvSecret {
		for _, name := range c.Sources.Names() {
			src, _ := c.Sources.Lookup(name)
			for _, ref := range src.Secrets {
				if strings.HasPrefix(ref, "env:") {
					return c, fmt.Errorf("%w: source %s uses an env: secret reference; use Secrets Manager (or set ALLOW_ENV_SECRETS=true on a local stack)", ErrConfig, name)
				}
			}
		}
	}
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
	p := Processor{Common: c}
	if p.MaxAttempts, err = intVar(getenv, "MAX_ATTEMPTS", 5, 1, 1000); err != nil {
		return Processor{}, err
	}
	secs, err := intVar(getenv, "LEASE_SECONDS", 60, 1, 43200)
	if err != nil {
		return Processor{}, err
	}
	p.Lease = time.Duration(secs) * time.Second
	vis, err := intVar(getenv, "QUEUE_VISIBILITY_SECONDS", 180, 1, 43200)
	if err != nil {
		return Processor{}, err
	}
	p.Visibility = time.Duration(vis) * time.Second
	return p, nil
}

func intVar(getenv func(string) string, name string, def, lo, hi int) (int, error) {
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
