// Package metrics provides CloudWatch metrics in Embedded Metric Format
// (EMF): one JSON object per record, written to the function's log stream,
// from which CloudWatch Logs extracts the metrics. No PutMetricData call and
// no extra permission are needed, and a record costs nothing on the request
// path beyond one log line.
//
// Metrics carry no dimensions (one time series per metric name in the
// stage's namespace, which is what the alarms and the dashboard read);
// context such as the function, source, event id and outcome goes in the
// record's properties, searchable in CloudWatch Logs Insights.
//
// A nil *Emitter is valid and emits nothing, so libraries take one
// optionally.
package metrics
