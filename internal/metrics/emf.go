package metrics

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Units used by this product.
const (
	Count        = "Count"
	Milliseconds = "Milliseconds"
	Seconds      = "Seconds"
)

// Metric is one value in a record.
type Metric struct {
	Name  string
	Value float64
	Unit  string
}

// N is a count metric.
func N(name string, v int) Metric { return Metric{Name: name, Value: float64(v), Unit: Count} }

// Latency is a duration metric in milliseconds.
func Latency(name string, d time.Duration) Metric {
	return Metric{Name: name, Value: float64(d.Microseconds()) / 1000, Unit: Milliseconds}
}

// Age is a duration metric in seconds.
func Age(name string, d time.Duration) Metric {
	return Metric{Name: name, Value: d.Seconds(), Unit: Seconds}
}

// Emitter writes EMF records. Safe for concurrent use.
type Emitter struct {
	w         io.Writer
	namespace string
	now       func() time.Time
	mu        sync.Mutex
}

// DefaultNamespace is used when none is configured.
const DefaultNamespace = "EffectivelyOnce"

// New returns an Emitter writing to w (a function's stdout) in namespace.
func New(w io.Writer, namespace string, now func() time.Time) *Emitter {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	if now == nil {
		now = time.Now
	}
	return &Emitter{w: w, namespace: namespace, now: now}
}

type metricDef struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type directive struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []metricDef `json:"Metrics"`
}

type meta struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// Emit writes one record with the metrics and properties (strings, numbers,
// booleans; never secrets or payloads). Metric names win over properties of
// the same name. Emit never fails the caller: metrics are evidence, not
// part of the transaction.
func (e *Emitter) Emit(props map[string]any, ms ...Metric) {
	if e == nil || len(ms) == 0 {
		return
	}
	rec := make(map[string]any, len(props)+len(ms)+1)
	for k, v := range props {
		if k != "_aws" {
			rec[k] = v
		}
	}
	d := directive{Namespace: e.namespace, Dimensions: [][]string{{}}}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Name == "" || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		d.Metrics = append(d.Metrics, metricDef{Name: m.Name, Unit: m.Unit})
		rec[m.Name] = m.Value
	}
	rec["_aws"] = meta{Timestamp: e.now().UnixMilli(), CloudWatchMetrics: []directive{d}}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(append(b, '\n'))
}
