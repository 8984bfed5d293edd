package naive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// The naive warehouse writers: the dispatcher, the processor and the
// reconciler are ours; only how a change record reaches the store
// differs.
//
//   - Overwrite keeps one object per subject and overwrites it with each
//     record it writes, unconditionally ("last write wins"): which
//     revision is current is decided by the order of the writes, so a
//     late older revision (its record retried after the store was down,
//     while a newer one went through) becomes the current row, and the
//     change log keeps only the last one. Its drift check asks whether
//     the subject has its object (OverwriteHead), as such a sink would.
//   - Unobserved counts a record written once its request is sent,
//     whatever the store answers (a 503 while it is down, a timeout, a
//     refused conflict): the intent is SUCCEEDED though the store may hold
//     nothing.

// Overwrite is the "last write wins" writer (see above). Its copy of ours
// gives it the client, the bucket, the prefix and the timeout.
type Overwrite struct{ *outbox.WarehouseEffect }

// SubjectKey is where Overwrite keeps a subject's one record: the
// subject's folder of the real layout, current.json.
func SubjectKey(prefix string, r warehouse.Record) string {
	k := warehouse.Key(prefix, r.Scope, r.Projection, r.Subject, 0)
	return k[:strings.LastIndexByte(k, '/')+1] + "current.json"
}

// Do puts the record at its subject's key, whatever is there.
func (e Overwrite) Do(ctx context.Context, c outbox.Call) (outbox.Result, error) {
	rec, err := warehouse.FromPayload(c.Payload)
	if err != nil {
		return outbox.Result{}, fmt.Errorf("%w: %s: %v", outbox.ErrPermanent, c.Key, err)
	}
	body, err := rec.Encode()
	if err != nil {
		return outbox.Result{}, fmt.Errorf("%w: %s: %v", outbox.ErrPermanent, c.Key, err)
	}
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	key := SubjectKey(e.Prefix, rec)
	if _, err := e.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")},
		func(o *s3.Options) { o.Retryer = aws.NopRetryer{} }); err != nil {
		// Overwriting is harmless to repeat, it believes: try again.
		return outbox.Result{}, &outbox.RetryableError{Err: fmt.Errorf("%s: put %s: %w", c.Key, key, err)}
	}
	return outbox.Result{StatusCode: http.StatusOK, Detail: "s3://" + e.Bucket + "/" + key + " overwritten"}, nil
}

// S3Header is the HeadObject of an S3 client (the reconciler's drift
// check's).
type S3Header interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
}

// OverwriteHead is the drift check's view of Overwrite's layout: a
// revision's record is there when its subject's object is.
type OverwriteHead struct{ S3Header }

// HeadObject asks for the subject's object instead of the revision's.
func (h OverwriteHead) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	k := aws.ToString(in.Key)
	q := *in
	q.Key = aws.String(k[:strings.LastIndexByte(k, '/')+1] + "current.json")
	return h.S3Header.HeadObject(ctx, &q, opts...)
}

// Unobserved is the writer that does not wait for the store's answer
// (see above): ours, with every failure but a refusal for good taken for
// a success.
type Unobserved struct{ *outbox.WarehouseEffect }

// Do sends the record and reports it written whatever came back.
func (e Unobserved) Do(ctx context.Context, c outbox.Call) (outbox.Result, error) {
	res, err := e.WarehouseEffect.Do(ctx, c)
	var me *outbox.MisconfiguredError
	if err == nil || errors.As(err, &me) {
		return res, err
	}
	return outbox.Result{StatusCode: http.StatusAccepted, Detail: "sent; the answer was not waited for"}, nil
}
