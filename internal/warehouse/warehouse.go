// Package warehouse is the warehouse sink's vocabulary: the change record
// an applied projection revision becomes, its key in the store, the
// intent the processor commits with the revision, and the sink's
// configuration. It is a leaf (the standard library and pkg/projection):
// the processor writes intents and the reconciler checks records without
// linking the dispatcher's effect targets; the dispatcher's S3 writer is
// outbox.WarehouseEffect.
//
// Every applied revision is one immutable record: JSON at a key that is a
// function of (scope, projection, subject, version) only (Key), written
// once by a conditional create. Which revision is current is decided by
// version when the records are queried (the highest per subject), never
// by the order they were written: a late older revision is one more row
// in the change log, never the current one.
package warehouse

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// Kind is the intent kind of a change record.
const Kind = "warehouse.record"

// DefaultMaxState is the largest state (its JSON) a record carries by
// default; a larger one is QUARANTINED with the reason, never truncated.
const DefaultMaxState = 256 << 10

// MaxRecord bounds a record object: the largest state plus its envelope.
// S3 itself takes 5 GB in one PutObject; the bound is the sink's, so one
// subject cannot make the warehouse's rows huge.
const MaxRecord = 1 << 20

// CodeStateTooLarge is the code of a record intent whose state is over
// the sink's limit or cannot be encoded.
const CodeStateTooLarge = "state_too_large"

// CodeConflict is the code of a record intent whose key holds another
// record.
const CodeConflict = "warehouse_conflict"

// ErrConfig marks a configuration error.
var ErrConfig = errors.New("warehouse config")

// Record is one change record: an applied revision of a projection
// subject. Version is exact (a JSON number written from its decimal
// text). State is the projected state, never the raw payload.
type Record struct {
	Scope      string         `json:"scope"`
	Projection string         `json:"projection"`
	Subject    string         `json:"subject"`
	Version    json.Number    `json:"version"`
	State      map[string]any `json:"state"`
	EventID    string         `json:"event_id"`
	Source     string         `json:"source"`
	AppliedAt  string         `json:"applied_at"` // RFC 3339, UTC, milliseconds
}

// Encode is the record's bytes: JSON, one line, map keys sorted, so the
// same record is always the same bytes (and the same SHA-256).
func (r Record) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// VersionInt is the record's version as an integer.
func (r Record) VersionInt() int64 {
	v, _ := strconv.ParseInt(string(r.Version), 10, 64)
	return v
}

// OperationID is the stable operation id of the record of (scope,
// projection, subject, version): the same revision always gives the same
// id, so a second commit of it (a replay, a duplicate under another event
// id) writes no second intent. Every record id starts with
// projection.ReservedOperationPrefix ("warehouse."), a shape no
// projection's intent may have (projection.Validate) and no scoped
// operation id has (hex): the ledger keys record intents apart
// (OP#warehouse.…), so an IAM policy can let the reconciler create
// records and nothing else, and the dispatcher performs a record only
// under that shape.
func OperationID(scope, proj, subject string, version int64) string {
	return projection.ReservedOperationPrefix + projection.OperationID(Kind, scope, proj, subject, strconv.FormatInt(version, 10))
}

// RepairID is the operation id of the n-th repair of a record whose
// intent ended but whose object is not there: derived from the record's
// own id, so one drift found twice writes one repair; a record id's
// shape (OperationID).
func RepairID(op string, n int) string {
	return projection.ReservedOperationPrefix + projection.OperationID(Kind+".repair", op, strconv.Itoa(n))
}

// IsOperationID reports whether op has the shape of a record's operation
// id (OperationID, RepairID).
func IsOperationID(op string) bool { return projection.ReservedOperationID(op) }

// Key is a record's object key under prefix:
// <prefix>/scope=<s>/projection=<p>/subject=<b64>/v=<version>.json. The
// scope is "_" when empty (a scope never holds "_"); the projection is
// path-escaped; the subject is unpadded base64url (any text is a safe
// key); the version is zero-padded to 20 digits, so keys sort by version.
func Key(prefix, scope, proj, subject string, version int64) string {
	if scope == "" {
		scope = "_"
	}
	k := fmt.Sprintf("scope=%s/projection=%s/subject=%s/v=%020d.json", url.PathEscape(scope), url.PathEscape(proj),
		base64.RawURLEncoding.EncodeToString([]byte(subject)), version)
	if p := strings.Trim(prefix, "/"); p != "" {
		k = p + "/" + k
	}
	return k
}

// Intent is the intent that records revision w (its ledger projection
// name "<scope>/<name>") applied by event source/eventID at appliedAt.
// Its policy is once: each revision is its own immutable record, and no
// later revision makes it wrong. A state whose JSON is over maxState
// bytes (0: DefaultMaxState) is not carried: the intent says how large it
// was, and the dispatcher QUARANTINES it with that reason, so the commit
// never grows by a state the sink would refuse.
func Intent(w projection.Write, source, eventID string, appliedAt time.Time, maxState int) projection.Intent {
	if maxState <= 0 {
		maxState = DefaultMaxState
	}
	scope, base := projection.SplitScoped(w.Name)
	payload := map[string]any{
		"scope": scope, "projection": base, "subject": w.Subject, "version": strconv.FormatInt(w.Version, 10),
		"event_id": eventID, "source": source, "applied_at": appliedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	b, err := json.Marshal(w.State)
	switch {
	case err != nil:
		payload["unencodable"] = err.Error()
	case len(b) > maxState:
		payload["oversize"] = strconv.Itoa(len(b))
		payload["limit"] = strconv.Itoa(maxState)
	default:
		payload["state"] = w.State
	}
	return projection.Intent{OperationID: OperationID(scope, base, w.Subject, w.Version), Kind: Kind,
		Subject: w.Subject, Payload: payload, Policy: projection.PolicyOnce}
}

// RefusedError says a record cannot be written, for good: Code is
// CodeStateTooLarge.
type RefusedError struct {
	Code string
	Err  error
}

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// FromPayload reads a record intent's payload back into its record. A
// payload that says its state was over the limit, or could not be
// encoded, is a *RefusedError; one without an exact version is another
// error.
func FromPayload(p map[string]any) (Record, error) {
	str := func(k string) string { s, _ := p[k].(string); return s }
	if n := str("oversize"); n != "" {
		return Record{}, &RefusedError{Code: CodeStateTooLarge,
			Err: fmt.Errorf("the state is %s bytes of JSON, over the warehouse's limit of %s bytes; the record was not written (never truncated)", n, str("limit"))}
	}
	if why := str("unencodable"); why != "" {
		return Record{}, &RefusedError{Code: CodeStateTooLarge, Err: fmt.Errorf("the state cannot be encoded as JSON: %s", why)}
	}
	v := str("version")
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return Record{}, fmt.Errorf("warehouse record without an exact version (%q)", v)
	}
	state, _ := p["state"].(map[string]any)
	if state == nil {
		state = map[string]any{}
	}
	return Record{Scope: str("scope"), Projection: str("projection"), Subject: str("subject"), Version: json.Number(v),
		State: state, EventID: str("event_id"), Source: str("source"), AppliedAt: str("applied_at")}, nil
}

// Config is the sink's configuration, shared by the processor (which
// writes the intents), the dispatcher (which writes the records) and the
// reconciler (which checks them).
type Config struct {
	Bucket, Prefix string
	MaxState       int
	// Projections are the projection names whose revisions are recorded
	// (WAREHOUSE_PROJECTIONS); nil records every projection.
	Projections []string
}

// Includes reports whether the revisions of projection name (its base
// name, or the ledger's scoped "<scope>/<name>") are recorded.
func (c *Config) Includes(name string) bool {
	if c == nil {
		return false
	}
	if c.Projections == nil {
		return true
	}
	_, base := projection.SplitScoped(name)
	for _, p := range c.Projections {
		if p == base {
			return true
		}
	}
	return false
}

// Check refuses projection names the registry does not know, so a typo
// in WAREHOUSE_PROJECTIONS fails at cold start instead of recording
// nothing.
func (c *Config) Check(reg *projection.Registry) error {
	if c == nil || c.Projections == nil || reg == nil {
		return nil
	}
	known := map[string]bool{}
	for _, n := range reg.Names() {
		known[n] = true
	}
	for _, p := range c.Projections {
		if !known[p] {
			return fmt.Errorf("%w: WAREHOUSE_PROJECTIONS names %q, which no registered projection is (registered: %s)", ErrConfig, p, strings.Join(reg.Names(), ", "))
		}
	}
	return nil
}

// Target is the sink's effect target, arn:aws:s3:::<bucket>[/<prefix>].
func (c Config) Target() string {
	if c.Prefix == "" {
		return "arn:aws:s3:::" + c.Bucket
	}
	return "arn:aws:s3:::" + c.Bucket + "/" + c.Prefix
}

// Load reads WAREHOUSE_BUCKET (the sink is off without it: nil),
// WAREHOUSE_PREFIX, WAREHOUSE_MAX_STATE_BYTES (default DefaultMaxState,
// at most MaxRecord/2) and WAREHOUSE_PROJECTIONS (comma-separated
// projection names, or "*", the default: every projection).
func Load(getenv func(string) string) (*Config, error) {
	b := getenv("WAREHOUSE_BUCKET")
	if b == "" {
		return nil, nil
	}
	c := &Config{Bucket: b, Prefix: strings.Trim(getenv("WAREHOUSE_PREFIX"), "/"), MaxState: DefaultMaxState}
	if _, _, err := ParseTarget(c.Target()); err != nil {
		return nil, fmt.Errorf("%w: WAREHOUSE_BUCKET: %v", ErrConfig, err)
	}
	if v := getenv("WAREHOUSE_MAX_STATE_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxRecord/2 {
			return nil, fmt.Errorf("%w: WAREHOUSE_MAX_STATE_BYTES must be between 1 and %d", ErrConfig, MaxRecord/2)
		}
		c.MaxState = n
	}
	if v := strings.TrimSpace(getenv("WAREHOUSE_PROJECTIONS")); v != "" && v != "*" {
		for _, n := range strings.Split(v, ",") {
			n = strings.TrimSpace(n)
			if n == "" || n == "*" || strings.Contains(n, "/") {
				return nil, fmt.Errorf("%w: WAREHOUSE_PROJECTIONS: %q is not a projection name (a comma-separated list of names, or *)", ErrConfig, n)
			}
			c.Projections = append(c.Projections, n)
		}
	}
	return c, nil
}

// ParseTarget reads a warehouse target, arn:<partition>:s3:::<bucket>[/<prefix>]:
// S3 bucket ARNs name no region or account. The bucket name follows S3's
// rules for new buckets (3 to 63 lowercase letters, digits, dots and
// hyphens).
func ParseTarget(arn string) (bucket, prefix string, err error) {
	var rest string
	ok := false
	for _, p := range []string{"arn:aws:s3:::", "arn:aws-cn:s3:::", "arn:aws-us-gov:s3:::"} {
		if r, found := strings.CutPrefix(arn, p); found {
			rest, ok = r, true
		}
	}
	if !ok {
		return "", "", fmt.Errorf("%q is not an S3 ARN (arn:aws:s3:::<bucket>[/<prefix>])", arn)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if !bucketRE.MatchString(bucket) {
		return "", "", fmt.Errorf("%q: %q is not an S3 bucket name", arn, bucket)
	}
	return bucket, strings.Trim(prefix, "/"), nil
}

// bucketRE is S3's rule for a bucket name.
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
