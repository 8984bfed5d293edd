package pipelinetest

import (
	"encoding/json"
	"strings"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// WarehouseBucket is the local warehouse's bucket.
const WarehouseBucket = "warehouse-local"

// Warehouse is the warehouse sink of a Harness: a local S3 (localaws.S3)
// and the warehouse.record effect, which every dispatcher of the harness
// uses. Rec counts the sink's S3 requests as the SDK made them.
type Warehouse struct {
	S3     *localaws.S3
	Bucket string
	Prefix string
	Effect *outbox.WarehouseEffect
	Rec    *awstrace.Recorder
	// MaxState is the processors' limit on a record's state (0: the default).
	MaxState int
	// PerDispatcher gives each dispatcher started after it an S3 client of
	// its own that carries the dispatcher's recorder and middleware (not
	// Rec), so a crash, a lost answer or a pause can hit the sink's
	// PutObject itself, as it hits the dispatcher's DynamoDB calls.
	PerDispatcher bool
	// Wrap, when set, replaces the warehouse effect of each dispatcher
	// started after it with what it returns for the dispatcher's own copy
	// of Effect (a naive writer: internal/harness/chaos/naive).
	Wrap func(*outbox.WarehouseEffect) outbox.Effect
}

// own reports whether dispatchers get their own warehouse effect
// (PerDispatcher or Wrap) rather than Effect itself.
func (w *Warehouse) own() bool { return w != nil && (w.PerDispatcher || w.Wrap != nil) }

// effectFor is one dispatcher's warehouse effect: a copy of Effect whose
// client carries opts (PerDispatcher), wrapped by Wrap.
func (w *Warehouse) effectFor(opts ...APIOption) outbox.Effect {
	e := *w.Effect
	if w.PerDispatcher {
		e.Client = w.S3.Client(opts...)
	}
	if w.Wrap != nil {
		return w.Wrap(&e)
	}
	return &e
}

// EnableWarehouse turns the warehouse sink on: processor workers started
// after it write a record intent with every applied revision, and the
// effects stage (EnableOutbox first) writes the records to a local S3.
func (h *Harness) EnableWarehouse(maxState int) *Warehouse {
	h.T.Helper()
	if h.Outbox == nil {
		h.T.Fatal("EnableWarehouse needs the effects stage (EnableOutbox)")
	}
	s := localaws.NewS3(WarehouseBucket)
	h.T.Cleanup(s.Close)
	rec := &awstrace.Recorder{}
	w := &Warehouse{S3: s, Bucket: WarehouseBucket, Prefix: "records", Rec: rec, MaxState: maxState}
	w.Effect = &outbox.WarehouseEffect{Name: warehouse.Kind, Bucket: w.Bucket, Prefix: w.Prefix,
		Client: s.Client(rec.APIOption), Scopes: []string{outbox.AllScopes}}
	h.Outbox.Effects[warehouse.Kind] = w.Effect
	h.Warehouse = w
	return w
}

// Records returns the records the warehouse holds, read from the local
// S3's store, in key order (subject, then version).
func (w *Warehouse) Records() []warehouse.Record {
	var out []warehouse.Record
	for _, k := range w.S3.Keys(w.Bucket, w.Prefix+"/") {
		b, err := w.S3.Object(w.Bucket, k)
		if err != nil {
			continue
		}
		var r warehouse.Record
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.UseNumber()
		if dec.Decode(&r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// Key is the object key of a revision's record.
func (w *Warehouse) Key(scope, proj, subject string, version int64) string {
	return warehouse.Key(w.Prefix, scope, proj, subject, version)
}
