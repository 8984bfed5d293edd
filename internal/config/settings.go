package config

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/effectively-once/webhooks/internal/warehouse"
)

// VarError is a variable whose value a function refuses at cold start.
type VarError struct {
	Var string
	Err error
}

func (e *VarError) Error() string { return e.Err.Error() }
func (e *VarError) Unwrap() error { return e.Err }

// Settings are the variables a deployment derives from its own settings
// (the construct's props) rather than from the resources it creates: the
// ones CheckSettings knows.
var Settings = []string{
	"LOG_LEVEL", "RETENTION_DAYS", "DUE_SHARDS", "DUE_SHARDS_READ", "METRICS_NAMESPACE",
	"WAREHOUSE_PREFIX", "WAREHOUSE_MAX_STATE_BYTES", "WAREHOUSE_PROJECTIONS",
	"OUTBOX_EVENT_SOURCE", "WAREHOUSE_RETENTION_DAYS",
}

// CheckSettings checks settings variables with the code the functions
// read them with at cold start (LoadBase, warehouse.Load, the reconciler's
// warehouse check, EventSource), so
// that a value a function would refuse is refused before it is deployed.
// Each variable is checked on its own, beside placeholders for the
// variables it needs (TABLE_NAME, WAREHOUSE_BUCKET; DUE_SHARDS_READ is
// checked against DUE_SHARDS), so the error, a *VarError, names the one
// at fault. A variable not in Settings is refused: it is not one this
// check knows how the functions read.
func CheckSettings(env map[string]string) error {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		if !contains(Settings, n) {
			return &VarError{Var: n, Err: fmt.Errorf("%w: %s is not a settings variable (%s)", ErrConfig, n, strings.Join(Settings, ", "))}
		}
		one := map[string]string{"TABLE_NAME": "settings-check", n: env[n]}
		if n == "DUE_SHARDS_READ" {
			one["DUE_SHARDS"] = env["DUE_SHARDS"]
		}
		if strings.HasPrefix(n, "WAREHOUSE_") {
			one["WAREHOUSE_BUCKET"] = "settings-check"
		}
		get := func(k string) string { return one[k] }
		err := func() error {
			if _, err := LoadBase(get); err != nil {
				return err
			}
			if _, err := warehouse.Load(get); err != nil {
				return fmt.Errorf("%w: %w", ErrConfig, err)
			}
			if _, _, _, err := loadWarehouseCheck(get); err != nil {
				return err
			}
			_, err := EventSource(get)
			return err
		}()
		if err != nil {
			return &VarError{Var: n, Err: err}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// DefaultEventSource is the source of the events the dispatcher puts on
// an EventBridge bus when OUTBOX_EVENT_SOURCE is not set. The construct
// always sets it, to a source of its own per pipeline and stage.
const DefaultEventSource = "effectively-once.outbox"

// MaxEventSource is the longest source PutEvents accepts.
const MaxEventSource = 256

// eventSourceRE is the characters an event source may hold here: those
// of EventBridge's own pattern for a source that is not a JSON path.
var eventSourceRE = regexp.MustCompile(`^[/._A-Za-z0-9-]+$`)

// ErrEventSource is a source EventBridge's PutEvents would refuse.
var ErrEventSource = errors.New("not an EventBridge source")

// CheckEventSource applies PutEvents's rules for an entry's Source: 1 to
// 256 characters, not starting with "aws." (reserved for AWS services);
// we also keep to letters, digits and / . _ - (what a rule's source
// pattern matches without escaping).
func CheckEventSource(s string) error {
	switch {
	case s == "" || len(s) > MaxEventSource:
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrEventSource, s, MaxEventSource)
	case strings.HasPrefix(strings.ToLower(s), "aws."):
		return fmt.Errorf("%w: %q starts with aws., which EventBridge reserves for AWS services", ErrEventSource, s)
	case !eventSourceRE.MatchString(s):
		return fmt.Errorf("%w: %q may hold only letters, digits and / . _ -", ErrEventSource, s)
	}
	return nil
}

// EventSource reads OUTBOX_EVENT_SOURCE, the source of the events the
// dispatcher puts on EventBridge buses (default DefaultEventSource).
func EventSource(getenv func(string) string) (string, error) {
	s := getenv("OUTBOX_EVENT_SOURCE")
	if s == "" {
		return DefaultEventSource, nil
	}
	if err := CheckEventSource(s); err != nil {
		return "", fmt.Errorf("%w: OUTBOX_EVENT_SOURCE: %w", ErrConfig, err)
	}
	return s, nil
}
