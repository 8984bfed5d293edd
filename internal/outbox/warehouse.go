package outbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// The warehouse sink: every applied projection revision is one immutable
// change record in S3, written by the dispatcher from an intent the
// revision's commit wrote (so it is in the same transaction as the
// revision, and a retry, a redrive or a replay adds nothing).
//
// The record is JSON at a key that is a function of (scope, projection,
// subject, version) only (RecordKey). It is written with PutObject and
// If-None-Match: * (a conditional create): S3 answers 412
// PreconditionFailed when the key exists, and 409
// ConditionalRequestConflict when a concurrent write to the key is in
// progress (retry the upload). A 412 is a success only when the stored
// object is byte for byte the record (its SHA-256): otherwise the
// warehouse holds another record for the same revision and the intent is
// QUARANTINED (warehouse_conflict) for an operator, never overwritten.
//
// Which revision is current is decided by version when the records are
// queried (the highest per subject), never by the order they were written:
// a late older revision is one more row in the change log, never the
// current one.

// WarehouseKind is the intent kind of a warehouse change record.
const WarehouseKind = "warehouse.record"

// DefaultWarehouseMaxState is the largest state (its JSON) a change
// record carries by default; a larger one is QUARANTINED with the reason,
// never truncated.
const DefaultWarehouseMaxState = 256 << 10

// CodeStateTooLarge is the code of a warehouse intent whose state is over
// the sink's limit.
const CodeStateTooLarge = "state_too_large"

// CodeWarehouseConflict is the code of a warehouse intent whose key holds
// another record.
const CodeWarehouseConflict = "warehouse_conflict"

// WarehouseRecord is one change record: an applied revision of a
// projection subject. Version is exact (a JSON number written from its
// decimal text). State is the projected state, never the raw payload.
type WarehouseRecord struct {
	Scope      string         `json:"scope"`
	Projection string         `json:"projection"`
	Subject    string         `json:"subject"`
	Version    json.Number    `json:"version"`
	State      map[string]any `json:"state"`
	EventID    string         `json:"event_id"`
	Source     string         `json:"source"`
	AppliedAt  string         `json:"applied_at"` // RFC 3339, UTC, milliseconds
}

// WarehouseOperationID is the stable operation id of the change record of
// (scope, projection, subject, version): the same revision always gives
// the same id, so a second commit of it (a replay, a duplicate under
// another event id) writes no second intent.
func WarehouseOperationID(scope, proj, subject string, version int64) string {
	return projection.OperationID(WarehouseKind, scope, proj, subject, strconv.FormatInt(version, 10))
}

// WarehouseRepairID is the operation id of the n-th repair of a record
// whose intent SUCCEEDED but whose object is gone (the reconciler's drift
// check): derived from the record's own id, so one drift found twice in
// one run writes one repair.
func WarehouseRepairID(op string, n int) string {
	return projection.OperationID(WarehouseKind+".repair", op, strconv.Itoa(n))
}

// RecordKey is a record's object key under prefix:
// <prefix>/scope=<s>/projection=<p>/subject=<b64>/v=<version>.json. The
// scope is "_" when empty (a scope never holds "_"); the projection is
// path-escaped; the subject is unpadded base64url (any text is a safe
// key); the version is zero-padded to 20 digits, so keys sort by version.
func RecordKey(prefix, scope, proj, subject string, version int64) string {
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

// WarehouseIntent is the intent that records revision w (its ledger
// projection name "<scope>/<name>") applied by event source/eventID at
// appliedAt. Its policy is once: each revision is its own immutable
// record, and no later revision makes it wrong. A state whose JSON is over
// maxState bytes (0: DefaultWarehouseMaxState) is not carried: the intent
// says how large it was, and the dispatcher QUARANTINES it with that
// reason, so the commit never grows by a state the sink would refuse.
func WarehouseIntent(w projection.Write, source, eventID string, appliedAt time.Time, maxState int) projection.Intent {
	if maxState <= 0 {
		maxState = DefaultWarehouseMaxState
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
	return projection.Intent{OperationID: WarehouseOperationID(scope, base, w.Subject, w.Version), Kind: WarehouseKind,
		Subject: w.Subject, Payload: payload, Policy: projection.PolicyOnce}
}

// RecordFromPayload reads a warehouse intent's payload back into its
// record. A payload that says its state was over the limit is an error
// with CodeStateTooLarge.
func RecordFromPayload(p map[string]any) (WarehouseRecord, error) {
	str := func(k string) string { s, _ := p[k].(string); return s }
	if n := str("oversize"); n != "" {
		return WarehouseRecord{}, &MisconfiguredError{Code: CodeStateTooLarge,
			Err: fmt.Errorf("the state is %s bytes of JSON, over the warehouse's limit of %s bytes; the record was not written (never truncated)", n, str("limit"))}
	}
	if why := str("unencodable"); why != "" {
		return WarehouseRecord{}, &MisconfiguredError{Code: CodeStateTooLarge, Err: fmt.Errorf("the state cannot be encoded as JSON: %s", why)}
	}
	v := str("version")
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return WarehouseRecord{}, fmt.Errorf("%w: warehouse record without an exact version (%q)", ErrPermanent, v)
	}
	state, _ := p["state"].(map[string]any)
	if state == nil {
		state = map[string]any{}
	}
	return WarehouseRecord{Scope: str("scope"), Projection: str("projection"), Subject: str("subject"), Version: json.Number(v),
		State: state, EventID: str("event_id"), Source: str("source"), AppliedAt: str("applied_at")}, nil
}

// Encode is the record's bytes: JSON, one line, map keys sorted, so the
// same record is always the same bytes (and the same SHA-256).
func (r WarehouseRecord) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// VersionInt is the record's version as an integer.
func (r WarehouseRecord) VersionInt() int64 {
	v, _ := strconv.ParseInt(string(r.Version), 10, 64)
	return v
}

// S3Putter is the part of the S3 client WarehouseEffect uses.
type S3Putter interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var _ S3Putter = (*s3.Client)(nil)

// WarehouseDedupWindow is how long the warehouse refuses to write a
// record twice: as long as the object exists, which is for good unless
// an operator or a lifecycle rule removes it (and then a second write is
// what is wanted). A call that may have reached S3 is therefore always
// made again with the same key: the conditional create and the content
// check make it harmless.
const WarehouseDedupWindow = 100 * 365 * 24 * time.Hour

// MaxWarehouseRecord bounds a record object: the largest state plus its
// envelope. S3 itself takes 5 GB in one PutObject; the bound is the
// sink's, so one subject cannot make the warehouse's rows huge.
const MaxWarehouseRecord = 1 << 20

// WarehouseEffect writes change records to an S3 bucket under a prefix
// (its target: arn:aws:s3:::<bucket>/<prefix>).
//
// Classification: a record written (200) or already there with the same
// bytes (412 and an equal SHA-256) is success; 412 with other bytes is
// QUARANTINED (warehouse_conflict); 409 ConditionalRequestConflict, a
// throttle (503 SlowDown) and a refused lookup of the stored object are
// retryable; access denied or no such bucket is QUARANTINED
// (target_refused); another 5xx, or a lost answer after the request was
// written, is uncertain, and is made again with the same key
// (DedupWindow).
type WarehouseEffect struct {
	Name   string
	Bucket string
	Prefix string
	Client S3Putter
	// Timeout bounds the requests of one call together.
	Timeout time.Duration
	Scopes  []string
}

var (
	_ Effect      = (*WarehouseEffect)(nil)
	_ ScopeGuard  = (*WarehouseEffect)(nil)
	_ DedupWindow = (*WarehouseEffect)(nil)
)

// Kind returns the intent kind.
func (e *WarehouseEffect) Kind() string { return e.Name }

// AllowsScope: see HTTPEffect.AllowsScope.
func (e *WarehouseEffect) AllowsScope(scope string) bool { return allowsScope(e.Scopes, scope) }

// DedupWindow: see WarehouseDedupWindow.
func (e *WarehouseEffect) DedupWindow() time.Duration { return WarehouseDedupWindow }

// Do writes the record once.
func (e *WarehouseEffect) Do(ctx context.Context, c Call) (Result, error) {
	rec, err := RecordFromPayload(c.Payload)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", c.Key, err)
	}
	body, err := rec.Encode()
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	if len(body) > MaxWarehouseRecord {
		return Result{}, &MisconfiguredError{Code: CodeStateTooLarge,
			Err: fmt.Errorf("%s: the record is %d bytes, over the warehouse's limit of %d; it was not written (never truncated)", c.Key, len(body), MaxWarehouseRecord)}
	}
	key := RecordKey(e.Prefix, rec.Scope, rec.Projection, rec.Subject, rec.VersionInt())
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	noRetries := func(o *s3.Options) { o.Retryer = aws.NopRetryer{} }
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	_, err = e.Client.PutObject(cctx, &s3.PutObjectInput{Bucket: aws.String(e.Bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json"),
		IfNoneMatch: aws.String("*")}, noRetries)
	if err == nil {
		return Result{StatusCode: http.StatusOK, Detail: "s3://" + e.Bucket + "/" + key + " written"}, nil
	}
	code, status, ok := apiError(err)
	switch {
	case !ok:
		return Result{}, a.transportError(c.Key, "s3 put", err)
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return e.compare(ctx, c.Key, key, body)
	case status == http.StatusConflict || code == "ConditionalRequestConflict":
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: s3 reports a concurrent write to %s (409 %s): retry the upload", c.Key, key, code)}
	case isThrottle(code) || code == "SlowDown" || status == http.StatusTooManyRequests:
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: %s", c.Key, errText(err))}
	case status >= 400 && status < 500:
		return Result{}, &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: s3 refused the record %s (%s, HTTP %d); it was not written: %s", c.Key, key, code, status, errText(err))}
	default:
		return Result{}, fmt.Errorf("%w: %s: s3 answered %s (HTTP %d): the record may have been written: %s", ErrUncertain, c.Key, code, status, errText(err))
	}
}

// compare reads the object a 412 says exists and tells a genuine
// duplicate (the same bytes) from a conflict.
func (e *WarehouseEffect) compare(ctx context.Context, op, key string, body []byte) (Result, error) {
	out, err := e.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(e.Bucket), Key: aws.String(key)},
		func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		// Our put wrote nothing; whether the object is ours is not known
		// yet: another attempt decides.
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: %s exists (412) and could not be read to compare: %s", op, key, errText(err))}
	}
	defer out.Body.Close()
	got, err := io.ReadAll(io.LimitReader(out.Body, MaxWarehouseRecord+1))
	if err != nil {
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: read %s to compare: %v", op, key, err)}
	}
	if sha256.Sum256(got) != sha256.Sum256(body) {
		return Result{}, &MisconfiguredError{Code: CodeWarehouseConflict,
			Err: fmt.Errorf("%s: s3://%s/%s holds another record for this revision (SHA-256 %x, ours %x); it was not overwritten: an operator must check", op, e.Bucket, key, sha256.Sum256(got), sha256.Sum256(body))}
	}
	return Result{StatusCode: http.StatusPreconditionFailed, Replayed: true, Detail: "s3://" + e.Bucket + "/" + key + " already holds this record"}, nil
}

// ParseWarehouseTarget reads a warehouse target, arn:aws:s3:::<bucket>[/<prefix>]:
// S3 bucket ARNs name no region or account. The bucket name follows S3's
// rules for new buckets (3 to 63 lowercase letters, digits, dots and
// hyphens).
func ParseWarehouseTarget(arn string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(arn, "arn:aws:s3:::")
	if !ok {
		for _, p := range []string{"arn:aws-cn:s3:::", "arn:aws-us-gov:s3:::"} {
			if r, ok2 := strings.CutPrefix(arn, p); ok2 {
				rest, ok = r, true
			}
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

// isS3Target reports whether an effect's target is an S3 ARN.
func isS3Target(arn string) bool {
	m := arnRE.FindStringSubmatch(arn)
	return m != nil && m[2] == "s3"
}

// errNotWarehouse says an S3 target is used for a kind other than the
// warehouse's.
var errNotWarehouse = errors.New("an S3 target receives warehouse change records only (kind " + WarehouseKind + ")")

// WarehouseConfig is the warehouse sink's configuration, shared by the
// processor (which writes the intents), the dispatcher (which writes the
// records) and the reconciler (which checks them).
type WarehouseConfig struct {
	Bucket, Prefix string
	MaxState       int
}

// Target is the sink's effect target, arn:aws:s3:::<bucket>/<prefix>.
func (c WarehouseConfig) Target() string {
	if c.Prefix == "" {
		return "arn:aws:s3:::" + c.Bucket
	}
	return "arn:aws:s3:::" + c.Bucket + "/" + c.Prefix
}

// Effect is the sink's effect configuration: open to every scope, since
// every applied revision of every scope is recorded.
func (c WarehouseConfig) Effect() EffectConfig {
	return EffectConfig{Kind: WarehouseKind, Target: c.Target(), Scopes: []string{AllScopes}}
}

// LoadWarehouse reads WAREHOUSE_BUCKET (the sink is off without it),
// WAREHOUSE_PREFIX and WAREHOUSE_MAX_STATE_BYTES (default
// DefaultWarehouseMaxState, at most MaxWarehouseRecord/2). nil means off.
func LoadWarehouse(getenv func(string) string) (*WarehouseConfig, error) {
	b := getenv("WAREHOUSE_BUCKET")
	if b == "" {
		return nil, nil
	}
	c := &WarehouseConfig{Bucket: b, Prefix: strings.Trim(getenv("WAREHOUSE_PREFIX"), "/"), MaxState: DefaultWarehouseMaxState}
	if _, _, err := ParseWarehouseTarget(c.Target()); err != nil {
		return nil, fmt.Errorf("%w: WAREHOUSE_BUCKET: %v", ErrConfig, err)
	}
	if v := getenv("WAREHOUSE_MAX_STATE_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxWarehouseRecord/2 {
			return nil, fmt.Errorf("%w: WAREHOUSE_MAX_STATE_BYTES must be between 1 and %d", ErrConfig, MaxWarehouseRecord/2)
		}
		c.MaxState = n
	}
	return c, nil
}
