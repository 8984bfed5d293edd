package outbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// WarehouseKind is the intent kind of a warehouse change record.
const WarehouseKind = warehouse.Kind

// The warehouse sink's writer: a change record (package warehouse) is
// written with PutObject and If-None-Match: * (a conditional create): S3
// answers 412 PreconditionFailed when the key exists, and 409
// ConditionalRequestConflict when a concurrent write to the key is in
// progress (retry the upload). A 412 is a success only when the stored
// object is byte for byte the record (its SHA-256): otherwise the
// warehouse holds another record for the same revision and the intent is
// QUARANTINED (warehouse_conflict) for an operator, never overwritten.

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

// Do writes the record once: c.Record's, under its key. The payload
// gives only the state and the applied time the commit wrote (or says the
// state was not carried).
func (e *WarehouseEffect) Do(ctx context.Context, c Call) (Result, error) {
	if c.Record == nil {
		return Result{}, &MisconfiguredError{Code: CodeNotARecord, Err: fmt.Errorf("%s: not a record intent of the ledger; nothing written", c.Key)}
	}
	carried, err := warehouse.FromPayload(c.Payload)
	var refused *warehouse.RefusedError
	switch {
	case errors.As(err, &refused):
		return Result{}, &MisconfiguredError{Code: refused.Code, Err: fmt.Errorf("%s: %w", c.Key, refused.Err)}
	case err != nil:
		return Result{}, fmt.Errorf("%w: %s: %v", ErrPermanent, c.Key, err)
	}
	rec := *c.Record
	rec.State, rec.AppliedAt = carried.State, carried.AppliedAt
	body, err := rec.Encode()
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	if len(body) > warehouse.MaxRecord {
		return Result{}, &MisconfiguredError{Code: warehouse.CodeStateTooLarge,
			Err: fmt.Errorf("%s: the record is %d bytes, over the warehouse's limit of %d; it was not written (never truncated)", c.Key, len(body), warehouse.MaxRecord)}
	}
	key := warehouse.Key(e.Prefix, rec.Scope, rec.Projection, rec.Subject, rec.VersionInt())
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
	got, err := io.ReadAll(io.LimitReader(out.Body, warehouse.MaxRecord+1))
	if err != nil {
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: read %s to compare: %v", op, key, err)}
	}
	if sha256.Sum256(got) != sha256.Sum256(body) {
		return Result{}, &MisconfiguredError{Code: warehouse.CodeConflict,
			Err: fmt.Errorf("%s: s3://%s/%s holds another record for this revision (SHA-256 %x, ours %x); it was not overwritten: an operator must check", op, e.Bucket, key, sha256.Sum256(got), sha256.Sum256(body))}
	}
	return Result{StatusCode: http.StatusPreconditionFailed, Replayed: true, Detail: "s3://" + e.Bucket + "/" + key + " already holds this record"}, nil
}

// The codes of an intent the dispatcher refuses as a record.
const (
	// CodeNotARecord: an item under the record key shape whose kind is
	// not a record, or a record kind outside that shape. Never performed.
	CodeNotARecord = "not_a_record"
	// CodeRecordMismatch: a record intent whose operation id or payload
	// does not name the revision the ledger recorded for it. Nothing is
	// written.
	CodeRecordMismatch = "record_mismatch"
)

// notARecordOutcome quarantines an intent that is keyed as a record and
// is not one, or is a record and is not keyed as one.
func notARecordOutcome(in ledger.IntentState) ledger.IntentOutcome {
	why := fmt.Sprintf("intent %s is keyed as a warehouse record but its kind is %q: an item under the record key shape is performed only as a record; the call was not made", in.OperationID, in.Kind)
	if in.Kind == WarehouseKind {
		why = fmt.Sprintf("intent %s has the warehouse record kind but not a record's key: only an intent keyed as a record is written to the warehouse; nothing was written", in.OperationID)
	}
	return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: CodeNotARecord, Detail: why}
}

// recordOf is the record of a record intent as the ledger recorded the
// intent: the projection (its scope and name), subject and version the
// commit wrote it with, and the source and event that caused it. The
// operation id must be that revision's record (warehouse.OperationID) or
// one of its repairs, and the payload, which carries the state, must
// name the same revision: anything else is a record_mismatch, never
// written, so an intent can write nothing but the record of the revision
// its own item names.
func recordOf(in ledger.IntentState) (warehouse.Record, error) {
	if in.Projection == "" {
		return warehouse.Record{}, fmt.Errorf("record intent %s records no projection revision; nothing written", in.OperationID)
	}
	scope, base := projection.SplitScoped(in.Projection)
	_, event, _ := strings.Cut(in.Causation, "/")
	rec := warehouse.Record{Scope: scope, Projection: base, Subject: in.ProjectionSubject,
		Version: json.Number(strconv.FormatInt(in.Version, 10)), Source: in.Source, EventID: event}
	what := fmt.Sprintf("%s/%s @ %d", in.Projection, in.ProjectionSubject, in.Version)
	if in.Scope != scope {
		return warehouse.Record{}, fmt.Errorf("record intent %s of %s names scope %q; nothing written", in.OperationID, what, in.Scope)
	}
	op := warehouse.OperationID(scope, base, in.ProjectionSubject, in.Version)
	ok := in.OperationID == op
	for n := 1; !ok && n <= ledger.MaxRecordRepairs; n++ {
		ok = in.OperationID == warehouse.RepairID(op, n)
	}
	if !ok {
		return warehouse.Record{}, fmt.Errorf("record intent %s is not the record of %s (%s) nor one of its repairs; nothing written", in.OperationID, what, op)
	}
	for _, f := range []struct{ key, want string }{
		{"scope", rec.Scope}, {"projection", rec.Projection}, {"subject", rec.Subject}, {"version", string(rec.Version)},
		{"source", rec.Source}, {"event_id", rec.EventID},
	} {
		if got, _ := in.Payload[f.key].(string); got != f.want {
			return warehouse.Record{}, fmt.Errorf("record intent %s of %s: its payload's %s is %q, the ledger's %q; nothing written", in.OperationID, what, f.key, got, f.want)
		}
	}
	return rec, nil
}

// isS3Target reports whether an effect's target is an S3 ARN.
func isS3Target(arn string) bool {
	m := arnRE.FindStringSubmatch(arn)
	return m != nil && m[2] == "s3"
}

// errNotWarehouse says an S3 target is used for a kind other than the
// warehouse's.
var errNotWarehouse = errors.New("an S3 target receives warehouse change records only (kind " + WarehouseKind + ")")

// WarehouseEffectConfig is the sink's effect configuration: open to
// every scope, since every applied revision of every scope is recorded.
func WarehouseEffectConfig(c warehouse.Config) EffectConfig {
	return EffectConfig{Kind: WarehouseKind, Target: c.Target(), Scopes: []string{AllScopes}}
}
