package metrics

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
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

// Emit writes one record with the metrics and properties (strings, numbers,
// booleans; never secrets or payloads). Metric names win over properties of
// the same name. Emit never fails the caller: metrics are evidence, not
// part of the transaction; a record it cannot write as JSON (a NaN or an
// infinite value) is dropped.
//
// The record is one JSON object: the properties in key order, the metric
// values in the order given (the first of each name), then the "_aws"
// metadata naming them. It is appended to one buffer rather than marshalled
// from a map: the intake writes one per request, and a map's reflection
// and sorting were a tenth of its own CPU.
func (e *Emitter) Emit(props map[string]any, ms ...Metric) {
	if e == nil || len(ms) == 0 {
		return
	}
	used := make([]Metric, 0, len(ms))
	for _, m := range ms {
		if m.Name == "" || slices.ContainsFunc(used, func(u Metric) bool { return u.Name == m.Name }) {
			continue
		}
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			return
		}
		used = append(used, m)
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		if k != "_aws" && !slices.ContainsFunc(used, func(u Metric) bool { return u.Name == k }) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b := make([]byte, 0, 256+32*(len(keys)+2*len(used)))
	b = append(b, '{')
	for _, k := range keys {
		var ok bool
		b = appendString(b, k)
		b = append(b, ':')
		if b, ok = appendValue(b, props[k]); !ok {
			return
		}
		b = append(b, ',')
	}
	for _, m := range used {
		b = appendString(b, m.Name)
		b = append(b, ':')
		b = strconv.AppendFloat(b, m.Value, 'g', -1, 64)
		b = append(b, ',')
	}
	b = append(b, `"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, e.now().UnixMilli(), 10)
	b = append(b, `,"CloudWatchMetrics":[{"Namespace":`...)
	b = appendString(b, e.namespace)
	b = append(b, `,"Dimensions":[[]],"Metrics":[`...)
	for i, m := range used {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"Unit":`...)
		b = appendString(b, m.Unit)
		b = append(b, '}')
	}
	b = append(b, "]}]}}\n"...)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(b)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendValue appends v as JSON; ok is false when it cannot be.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return appendString(b, v), true
	case int:
		return strconv.AppendInt(b, int64(v), 10), true
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case bool:
		return strconv.AppendBool(b, v), true
	}
	j, err := json.Marshal(v)
	if err != nil {
		return b, false
	}
	return append(b, j...), true
}
