package pipeline_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// withBridge has an HTTPS source and an EventBridge one, so every function
// (the bridge too) is deployed.
var withBridge = []pipeline.Source{
	{Name: "stripe", Kind: "stripe"},
	{Name: "shop", Kind: "stripe", Delivery: "eventbridge", EventSource: "aws.partner/stripe.com/ed_test_1"},
}

// warehouseStack is a team's bare stack with the warehouse on (cdk-nag
// attached), and its template.
func warehouseStack(t *testing.T, w *pipeline.WarehouseProps) (awscdk.Stack, *pipeline.Pipeline, map[string]map[string]any) {
	t.Helper()
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: withBridge, Warehouse: w})
	if err != nil {
		t.Fatal(err)
	}
	return st, p, resources(t, st)
}

// only returns the one resource of typ whose logical id starts with
// prefix.
func only(t *testing.T, res map[string]map[string]any, typ, prefix string) (string, map[string]any) {
	t.Helper()
	var id string
	for rid := range ofType(res, typ) {
		if strings.HasPrefix(rid, prefix) {
			if id != "" {
				t.Fatalf("two %s under %s: %s, %s", typ, prefix, id, rid)
			}
			id = rid
		}
	}
	if id == "" {
		t.Fatalf("no %s under %s", typ, prefix)
	}
	return id, res[id]
}

// roleStatements lists the statements of every policy attached to role.
func roleStatements(res map[string]map[string]any, role string) []map[string]any {
	var out []map[string]any
	for _, pol := range ofType(res, "AWS::IAM::Policy") {
		attached := false
		for _, r := range props(pol)["Roles"].([]any) {
			attached = attached || r.(map[string]any)["Ref"] == role
		}
		if !attached {
			continue
		}
		for _, s := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			out = append(out, s.(map[string]any))
		}
	}
	return out
}

// mentions says whether v (a statement's Resource) names the resource
// with logical id id.
func mentions(v any, id string) bool { return strings.Contains(toString(v), `"`+id+`"`) }

// s3Grant is one S3 statement, as the tests compare it.
type s3Grant struct {
	Actions   []string
	Resource  string
	Condition string
}

// s3Grants lists role's statements that hold an s3 action, with the
// resource rendered ("<bucket>" for the bucket's ARN).
func s3Grants(t *testing.T, res map[string]map[string]any, role, bucket string) []s3Grant {
	t.Helper()
	var out []s3Grant
	for _, s := range roleStatements(res, role) {
		acts := actionsOf(s)
		if !slices.ContainsFunc(acts, func(a string) bool { return strings.HasPrefix(a, "s3:") }) {
			continue
		}
		if s["Effect"] != "Allow" {
			t.Errorf("statement %v", s)
		}
		r := strings.ReplaceAll(toString(s["Resource"]), `{"Fn::GetAtt":["`+bucket+`","Arn"]}`, "<bucket>")
		r = strings.TrimPrefix(strings.TrimSuffix(r, `"]]}`), `{"Fn::Join":["",[<bucket>,"`)
		g := s3Grant{Actions: acts, Resource: r}
		if s["Condition"] != nil {
			g.Condition = toString(s["Condition"])
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b s3Grant) int { return strings.Compare(toString(a), toString(b)) })
	return out
}

func TestTheWarehouseIsOffByDefaultAndCreatesNothing(t *testing.T) {
	// GIVEN a pipeline with every function and no Warehouse
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: withBridge})
	if err != nil {
		t.Fatal(err)
	}
	res := resources(t, st)
	// THEN there is no bucket, catalog or workgroup, no alarm of it
	for _, typ := range []string{"AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::Glue::Database", "AWS::Glue::Table", "AWS::Athena::WorkGroup", "AWS::Athena::NamedQuery"} {
		if n := len(ofType(res, typ)); n != 0 {
			t.Errorf("%d %s", n, typ)
		}
	}
	if p.Warehouse != nil {
		t.Errorf("Warehouse %v", p.Warehouse)
	}
	for id := range ofType(res, "AWS::CloudWatch::Alarm") {
		if strings.Contains(id, "Warehouse") {
			t.Errorf("alarm %s", id)
		}
	}
	// AND no function has a warehouse variable or an S3 action
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler, pipeline.Bridge} {
		for k := range functionEnv(t, res, fn) {
			if strings.HasPrefix(k, "WAREHOUSE_") {
				t.Errorf("%s has %s", fn, k)
			}
		}
		for _, s := range roleStatements(res, roleID(t, res, fn)) {
			if strings.Contains(toString(s["Action"]), "s3:") {
				t.Errorf("%s holds %v", fn, s)
			}
		}
	}
	// AND with no effect the dispatcher's mapping stays disabled, as
	// before
	for id, m := range ofType(res, "AWS::Lambda::EventSourceMapping") {
		if strings.Contains(id, "EffectsMapping") && props(m)["Enabled"] != false {
			t.Errorf("effects mapping %v", props(m)["Enabled"])
		}
	}
	// AND GrantReadWarehouse says there is nothing to grant
	analyst := awsiam.NewRole(st, jsii.String("Analyst"), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
	if g, err := p.GrantReadWarehouse(analyst); g != nil || !errors.Is(err, pipeline.ErrNoWarehouse) {
		t.Errorf("GrantReadWarehouse = %v, %v", g, err)
	}
}

// functionEnv is a function's environment variables, by short name.
func functionEnv(t *testing.T, res map[string]map[string]any, fn string) map[string]any {
	t.Helper()
	for _, r := range ofType(res, "AWS::Lambda::Function") {
		if props(r)["FunctionName"] == "webhooks-dev-"+fn {
			env, _ := props(r)["Environment"].(map[string]any)["Variables"].(map[string]any)
			return env
		}
	}
	t.Fatalf("no function %s", fn)
	return nil
}

func TestTheWarehouseBucketIsEncryptedTLSOnlyPrivateRetainedAndExpiresAsStated(t *testing.T) {
	// GIVEN the warehouse on, versioned, records kept a year
	st, p, res := warehouseStack(t, &pipeline.WarehouseProps{RetentionDays: 365, Versioned: true})
	bucket, b := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseBucket")
	logs, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseAccessLogs")
	if n := len(ofType(res, "AWS::S3::Bucket")); n != 3 {
		t.Errorf("%d buckets, want the records', the results' and the access logs'", n)
	}
	// THEN it is S3-encrypted, closed to the public, owner-enforced,
	// versioned, retained, and logs its access to the access-log bucket
	noPanic(t, "the records bucket", func() {
		assertions.Template_FromStack(st, nil).HasResource(jsii.String("AWS::S3::Bucket"), &map[string]any{
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
			"Properties": assertions.Match_ObjectLike(&map[string]any{
				"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
					map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}}}},
				"PublicAccessBlockConfiguration": map[string]any{
					"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true},
				"OwnershipControls":       map[string]any{"Rules": []any{map[string]any{"ObjectOwnership": "BucketOwnerEnforced"}}},
				"VersioningConfiguration": map[string]any{"Status": "Enabled"},
				"LoggingConfiguration":    map[string]any{"DestinationBucketName": map[string]any{"Ref": logs}, "LogFilePrefix": "records/"},
			}),
		})
	})
	if _, ok := b["DeletionPolicy"]; !ok || p.Warehouse.Bucket == nil {
		t.Fatal("the records bucket is not the one exposed")
	}
	// AND its lifecycle aborts incomplete uploads after a day, expires the
	// records (and only them) after RetentionDays and noncurrent versions
	// after 30 days
	rules := toString(props(b)["LifecycleConfiguration"].(map[string]any)["Rules"])
	want := `[{"AbortIncompleteMultipartUpload":{"DaysAfterInitiation":1},"Id":"abort-incomplete-uploads","Status":"Enabled"},` +
		`{"ExpirationInDays":365,"Id":"expire-records","Prefix":"changes/","Status":"Enabled"},` +
		`{"Id":"expire-noncurrent-versions","NoncurrentVersionExpiration":{"NoncurrentDays":30},"Status":"Enabled"}]`
	if rules != want {
		t.Errorf("lifecycle\n%s\nwant\n%s", rules, want)
	}
	// AND its policy refuses plain HTTP, and a PutObject under the prefix
	// without If-None-Match (a record is only ever created)
	_, pol := only(t, res, "AWS::S3::BucketPolicy", "WebhooksWarehouseBucketPolicy")
	if ref := props(pol)["Bucket"].(map[string]any)["Ref"]; ref != bucket {
		t.Fatalf("policy of %v", ref)
	}
	var tls, conditional bool
	for _, s := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
		st := s.(map[string]any)
		switch {
		case st["Effect"] == "Deny" && st["Action"] == "s3:*" && toString(st["Condition"]) == `{"Bool":{"aws:SecureTransport":"false"}}`:
			tls = true
		case st["Effect"] == "Deny" && st["Action"] == "s3:PutObject" && toString(st["Condition"]) == `{"Null":{"s3:if-none-match":"true"}}` &&
			toString(st["Resource"]) == `{"Fn::Join":["",[{"Fn::GetAtt":["`+bucket+`","Arn"]},"/changes/*"]]}`:
			conditional = true
		default:
			t.Errorf("unexpected statement %v", st)
		}
	}
	if !tls || !conditional {
		t.Errorf("TLS-only %v, conditional creates only %v", tls, conditional)
	}
	// AND the results and access-log buckets are encrypted, private,
	// TLS-only and expire what they hold
	for _, prefix := range []string{"WebhooksWarehouseResults", "WebhooksWarehouseAccessLogs"} {
		_, r := only(t, res, "AWS::S3::Bucket", prefix)
		bp := props(r)
		if toString(bp["BucketEncryption"]) != `{"ServerSideEncryptionConfiguration":[{"ServerSideEncryptionByDefault":{"SSEAlgorithm":"AES256"}}]}` ||
			toString(bp["PublicAccessBlockConfiguration"]) != `{"BlockPublicAcls":true,"BlockPublicPolicy":true,"IgnorePublicAcls":true,"RestrictPublicBuckets":true}` ||
			!strings.Contains(toString(bp["LifecycleConfiguration"]), `"ExpirationInDays":30`) ||
			!strings.Contains(toString(bp["LifecycleConfiguration"]), `"DaysAfterInitiation":1`) || r["DeletionPolicy"] != "Retain" {
			t.Errorf("%s: %v", prefix, bp)
		}
		_, pol := only(t, res, "AWS::S3::BucketPolicy", prefix+"Policy")
		if !strings.Contains(toString(pol), `"Condition":{"Bool":{"aws:SecureTransport":"false"}},"Effect":"Deny"`) {
			t.Errorf("%s is not TLS-only: %v", prefix, toString(pol))
		}
	}
	// AND cdk-nag has nothing to say
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
}

func TestTheGlueTableReadsTheRecordsUnderThePrefixWithTheOpenXSerDe(t *testing.T) {
	// GIVEN the warehouse on with a prefix of its own
	_, p, res := warehouseStack(t, &pipeline.WarehouseProps{Prefix: "warehouse/changes"})
	bucket, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseBucket")
	dbID, db := only(t, res, "AWS::Glue::Database", "WebhooksWarehouseDatabase")
	_, tb := only(t, res, "AWS::Glue::Table", "WebhooksWarehouseTable")
	// THEN the database and table are named as exposed
	if got := props(db)["DatabaseInput"].(map[string]any)["Name"]; got != "webhooks_dev_warehouse" || p.Warehouse.DatabaseName != got {
		t.Errorf("database %v (exposed %s)", got, p.Warehouse.DatabaseName)
	}
	ti := props(tb)["TableInput"].(map[string]any)
	if toString(props(tb)["DatabaseName"]) != `{"Ref":"`+dbID+`"}` || ti["Name"] != "change_records" || p.Warehouse.TableName != "change_records" ||
		ti["TableType"] != "EXTERNAL_TABLE" || toString(ti["PartitionKeys"]) != "[]" {
		t.Errorf("table %v in %v", ti, props(tb)["DatabaseName"])
	}
	// AND it reads s3://<bucket>/<prefix>/ as JSON lines with the OpenX
	// SerDe, keeping the case of the keys inside state
	sd := ti["StorageDescriptor"].(map[string]any)
	if got := toString(sd["Location"]); got != `{"Fn::Join":["",["s3://",{"Ref":"`+bucket+`"},"/warehouse/changes/"]]}` {
		t.Errorf("location %s", got)
	}
	if sd["InputFormat"] != "org.apache.hadoop.mapred.TextInputFormat" || sd["OutputFormat"] != "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat" {
		t.Errorf("formats %v %v", sd["InputFormat"], sd["OutputFormat"])
	}
	if got := toString(sd["SerdeInfo"]); got != `{"Parameters":{"case.insensitive":"FALSE","ignore.malformed.json":"FALSE"},"SerializationLibrary":"org.openx.data.jsonserde.JsonSerDe"}` {
		t.Errorf("serde %s", got)
	}
	// AND its columns are the record's keys, version a bigint and state
	// the object's JSON text
	var cols []string
	for _, c := range sd["Columns"].([]any) {
		cols = append(cols, c.(map[string]any)["Name"].(string)+" "+c.(map[string]any)["Type"].(string))
	}
	if got := strings.Join(cols, ", "); got != "scope string, projection string, subject string, version bigint, state string, event_id string, source string, applied_at string" {
		t.Errorf("columns %s", got)
	}
	// AND the variables tell the functions the same prefix
	for _, fn := range []string{pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		if env := functionEnv(t, res, fn); env["WAREHOUSE_PREFIX"] != "warehouse/changes" {
			t.Errorf("%s: WAREHOUSE_PREFIX %v", fn, env["WAREHOUSE_PREFIX"])
		}
	}
}

func TestCurrentStateIsANamedQueryInAnEnforcedEncryptedWorkgroup(t *testing.T) {
	// GIVEN the warehouse on
	_, p, res := warehouseStack(t, &pipeline.WarehouseProps{QueryResultsDays: 7})
	results, rb := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseResults")
	wgID, wg := only(t, res, "AWS::Athena::WorkGroup", "WebhooksWarehouseWorkGroup")
	_, q := only(t, res, "AWS::Athena::NamedQuery", "WebhooksWarehouseCurrentState")
	// THEN the workgroup enforces its configuration and writes its results
	// encrypted into the results bucket, which keeps them QueryResultsDays
	want := `{"EnforceWorkGroupConfiguration":true,"PublishCloudWatchMetricsEnabled":true,"ResultConfiguration":{` +
		`"EncryptionConfiguration":{"EncryptionOption":"SSE_S3"},"OutputLocation":{"Fn::Join":["",["s3://",{"Ref":"` + results + `"},"/athena/"]]}}}`
	if got := toString(props(wg)["WorkGroupConfiguration"]); got != want {
		t.Errorf("workgroup\n%s\nwant\n%s", got, want)
	}
	if props(wg)["Name"] != "webhooks-dev-warehouse" || p.Warehouse.WorkGroupName != "webhooks-dev-warehouse" {
		t.Errorf("workgroup name %v", props(wg)["Name"])
	}
	if !strings.Contains(toString(props(rb)["LifecycleConfiguration"]), `"ExpirationInDays":7`) {
		t.Errorf("results lifecycle %v", props(rb)["LifecycleConfiguration"])
	}
	// AND the current_state named query, in that workgroup and database,
	// creates the view of the newest record per subject
	qp := props(q)
	sql, _ := qp["QueryString"].(string)
	if qp["Name"] != "current_state" || qp["Database"] != "webhooks_dev_warehouse" || toString(qp["WorkGroup"]) != `{"Ref":"`+wgID+`"}` {
		t.Errorf("named query %v", qp)
	}
	for _, part := range []string{
		"CREATE OR REPLACE VIEW current_state AS",
		`row_number() OVER (PARTITION BY "scope", "projection", "subject" ORDER BY "version" DESC) AS rn`,
		`FROM "webhooks_dev_warehouse"."change_records"`,
		"WHERE rn = 1",
	} {
		if !strings.Contains(sql, part) {
			t.Errorf("query lacks %q:\n%s", part, sql)
		}
	}
	if p.Warehouse.NamedQueries["current_state"] == nil || p.Warehouse.ViewName != "current_state" {
		t.Errorf("named queries %v", p.Warehouse.NamedQueries)
	}
}

func TestOnlyTheDispatcherAndTheReconcilerMayTouchTheRecordsAndOnlyUnderThePrefix(t *testing.T) {
	// GIVEN the warehouse on, with every function deployed
	_, _, res := warehouseStack(t, &pipeline.WarehouseProps{})
	bucket, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseBucket")
	// THEN the dispatcher may get and put records under the prefix, and
	// nothing else in S3
	if got, want := toString(s3Grants(t, res, roleID(t, res, pipeline.Dispatcher), bucket)),
		toString([]s3Grant{{Actions: []string{"s3:GetObject", "s3:PutObject"}, Resource: "/changes/*"}}); got != want {
		t.Errorf("dispatcher %s\nwant %s", got, want)
	}
	// AND the reconciler may get records under the prefix and list the
	// keys under it (a missing record is then a 404), nothing else
	if got, want := toString(s3Grants(t, res, roleID(t, res, pipeline.Reconciler), bucket)), toString([]s3Grant{
		{Actions: []string{"s3:GetObject"}, Resource: "/changes/*"},
		{Actions: []string{"s3:ListBucket"}, Resource: "<bucket>", Condition: `{"StringLike":{"s3:prefix":"changes/*"}}`},
	}); got != want {
		t.Errorf("reconciler %s\nwant %s", got, want)
	}
	// AND intake, the bridge and the processor hold no S3 action, and no
	// statement of theirs names a warehouse bucket
	buckets := ofType(res, "AWS::S3::Bucket")
	for _, fn := range []string{pipeline.Intake, pipeline.Bridge, pipeline.Processor} {
		for _, s := range roleStatements(res, roleID(t, res, fn)) {
			if strings.Contains(toString(s["Action"]), "s3:") {
				t.Errorf("%s holds %v", fn, s)
			}
			for id := range buckets {
				if mentions(s["Resource"], id) {
					t.Errorf("%s's statement names %s: %v", fn, id, s)
				}
			}
		}
	}
	// AND no function holds a KMS action: the bucket is S3-encrypted
	for _, fn := range []string{pipeline.Intake, pipeline.Bridge, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		for _, s := range roleStatements(res, roleID(t, res, fn)) {
			if strings.Contains(toString(s["Action"]), "kms:") {
				t.Errorf("%s holds %v", fn, s)
			}
		}
	}
}

func TestTheProcessorDispatcherAndReconcilerAreToldWhereTheWarehouseIs(t *testing.T) {
	// GIVEN the warehouse on with a state limit
	_, _, res := warehouseStack(t, &pipeline.WarehouseProps{MaxStateBytes: 65536})
	bucket, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseBucket")
	// THEN the three functions that take part get the bucket, the prefix
	// and the limit; intake and the bridge get none of them
	for _, fn := range []string{pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		env := functionEnv(t, res, fn)
		if toString(env["WAREHOUSE_BUCKET"]) != `{"Ref":"`+bucket+`"}` || env["WAREHOUSE_PREFIX"] != "changes" || env["WAREHOUSE_MAX_STATE_BYTES"] != "65536" {
			t.Errorf("%s: %v %v %v", fn, env["WAREHOUSE_BUCKET"], env["WAREHOUSE_PREFIX"], env["WAREHOUSE_MAX_STATE_BYTES"])
		}
	}
	for _, fn := range []string{pipeline.Intake, pipeline.Bridge} {
		for k := range functionEnv(t, res, fn) {
			if strings.HasPrefix(k, "WAREHOUSE_") {
				t.Errorf("%s has %s", fn, k)
			}
		}
	}
	// AND the dispatcher consumes the effects queue (it writes the
	// records) although no effect is configured
	for id, m := range ofType(res, "AWS::Lambda::EventSourceMapping") {
		if strings.Contains(id, "EffectsMapping") && props(m)["Enabled"] != true {
			t.Errorf("effects mapping %v", props(m)["Enabled"])
		}
	}
	// AND without MaxStateBytes or Projections the runtime's defaults
	// apply: no variable
	_, _, res = warehouseStack(t, &pipeline.WarehouseProps{})
	if env := functionEnv(t, res, pipeline.Dispatcher); env["WAREHOUSE_MAX_STATE_BYTES"] != nil || env["WAREHOUSE_PROJECTIONS"] != nil || env["WAREHOUSE_PREFIX"] != "changes" {
		t.Errorf("default env %v %v %v", env["WAREHOUSE_MAX_STATE_BYTES"], env["WAREHOUSE_PROJECTIONS"], env["WAREHOUSE_PREFIX"])
	}
	// AND the projections a team records reach the processor as one list
	_, _, res = warehouseStack(t, &pipeline.WarehouseProps{Projections: []string{"order", "invoice"}})
	if env := functionEnv(t, res, pipeline.Processor); env["WAREHOUSE_PROJECTIONS"] != "order,invoice" {
		t.Errorf("projections env %v", env["WAREHOUSE_PROJECTIONS"])
	}
}

func TestWarehouseDriftLeadsTheDashboardAndAgeingDriftRingsAnAlarm(t *testing.T) {
	// GIVEN the warehouse on
	_, _, res := warehouseStack(t, &pipeline.WarehouseProps{})
	// THEN an alarm rings when a subject's record has been behind for an
	// hour, and says so to the alarm topic
	_, a := only(t, res, "AWS::CloudWatch::Alarm", "WebhooksWarehouseDriftAge")
	ap := props(a)
	if ap["MetricName"] != "WarehouseDriftOldestAgeSeconds" || ap["Namespace"] != "EffectivelyOnce/webhooks-dev" || ap["Statistic"] != "Maximum" ||
		ap["Threshold"] != 3600.0 || ap["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || ap["TreatMissingData"] != "notBreaching" ||
		ap["Dimensions"] != nil || len(ap["AlarmActions"].([]any)) != 1 {
		t.Errorf("alarm %v", ap)
	}
	// AND the dashboard's leading row (the first below its title) shows
	// "canonical revision != warehouse revision" with both metrics, beside
	// compensations due and downstream drift
	var body string
	for _, d := range ofType(res, "AWS::CloudWatch::Dashboard") {
		var parts []string
		for _, x := range props(d)["DashboardBody"].(map[string]any)["Fn::Join"].([]any)[1].([]any) {
			if s, ok := x.(string); ok {
				parts = append(parts, s)
			} else {
				parts = append(parts, "REF")
			}
		}
		body = strings.Join(parts, "")
	}
	var dash struct {
		Widgets []struct {
			Y, X, Width float64
			Properties  map[string]any `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(body), &dash); err != nil {
		t.Fatalf("body: %v\n%s", err, body)
	}
	var leadY float64 = -1
	for _, w := range dash.Widgets {
		if w.Y > 0 && (leadY < 0 || w.Y < leadY) {
			leadY = w.Y
		}
	}
	var lead []string
	for _, w := range dash.Widgets {
		if w.Y != leadY {
			continue
		}
		title, _ := w.Properties["title"].(string)
		var names []string
		ms, _ := w.Properties["metrics"].([]any)
		for _, m := range ms {
			names = append(names, m.([]any)[1].(string))
		}
		lead = append(lead, title+": "+strings.Join(names, ","))
	}
	if len(lead) != 3 || !strings.HasPrefix(lead[0], "Compensations due") || !strings.HasPrefix(lead[1], "Downstream drift") ||
		!strings.Contains(lead[2], "canonical revision != warehouse revision") || !strings.HasSuffix(lead[2], ": WarehouseDrift,WarehouseDriftOldestAgeSeconds") {
		t.Errorf("leading row %q", lead)
	}
}

func TestGrantReadWarehouseLetsAnAnalystQueryButNotWrite(t *testing.T) {
	// GIVEN the warehouse on and an analyst's role
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: withBridge, Warehouse: &pipeline.WarehouseProps{}})
	if err != nil {
		t.Fatal(err)
	}
	analyst := awsiam.NewRole(st, jsii.String("Analyst"), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
	// WHEN it is granted the warehouse
	g, err := p.GrantReadWarehouse(analyst)
	if err != nil || g == nil {
		t.Fatalf("GrantReadWarehouse = %v, %v", g, err)
	}
	res := resources(t, st)
	records, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseBucket")
	results, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseResults")
	role, _ := only(t, res, "AWS::IAM::Role", "Analyst")
	var onRecords, onResults, athena, glue []string
	for _, s := range roleStatements(res, role) {
		r := toString(s["Resource"])
		acts := actionsOf(s)
		switch {
		case strings.HasPrefix(acts[0], "athena:"):
			athena = append(athena, acts...)
			if !strings.Contains(r, ":workgroup/webhooks-dev-warehouse") {
				t.Errorf("athena on %s", r)
			}
		case strings.HasPrefix(acts[0], "glue:"):
			glue = append(glue, acts...)
			want := []string{":catalog", ":database/default", ":database/webhooks_dev_warehouse"}
			if slices.Contains(acts, "glue:GetTable") {
				want = []string{":catalog", ":database/webhooks_dev_warehouse", ":table/webhooks_dev_warehouse/*"}
			}
			for _, w := range want {
				if !strings.Contains(r, w+`"`) {
					t.Errorf("%v lacks %s: %s", acts, w, r)
				}
			}
			if strings.Count(r, ":glue:") != len(want) {
				t.Errorf("%v on more than %v: %s", acts, want, r)
			}
		case mentions(s["Resource"], records) && !mentions(s["Resource"], results):
			onRecords = append(onRecords, strings.Join(acts, ",")+" "+strings.ReplaceAll(r, records, "B")+" "+toString(s["Condition"]))
		case mentions(s["Resource"], results) && !mentions(s["Resource"], records):
			onResults = append(onResults, acts...)
		case s3BucketLocationOnBoth(acts, r, records, results):
		default:
			t.Errorf("unexpected statement %v", s)
		}
	}
	// THEN it reads records under the prefix and lists keys under it only
	slices.Sort(onRecords)
	want := []string{
		`s3:GetObject {"Fn::Join":["",[{"Fn::GetAtt":["B","Arn"]},"/changes/*"]]} null`,
		`s3:ListBucket {"Fn::GetAtt":["B","Arn"]} {"StringLike":{"s3:prefix":"changes/*"}}`,
	}
	if !slices.Equal(onRecords, want) {
		t.Errorf("on the records %q\nwant %q", onRecords, want)
	}
	// AND writes nothing but query results
	for _, a := range onResults {
		if a == "s3:DeleteObject" {
			t.Errorf("results: %v", onResults)
		}
	}
	if !slices.Contains(onResults, "s3:PutObject") || !slices.Contains(onResults, "s3:GetObject") {
		t.Errorf("results: %v", onResults)
	}
	// AND runs queries in the workgroup and reads the catalog, no more
	for _, a := range athena {
		if strings.Contains(a, "Delete") || strings.Contains(a, "Create") || strings.Contains(a, "Update") {
			t.Errorf("athena %s", a)
		}
	}
	for _, a := range glue {
		if !strings.HasPrefix(a, "glue:Get") {
			t.Errorf("glue %s", a)
		}
	}
	if !slices.Contains(athena, "athena:StartQueryExecution") || !slices.Contains(athena, "athena:GetQueryResults") || !slices.Contains(glue, "glue:GetTable") {
		t.Errorf("athena %v glue %v", athena, glue)
	}
	// AND cdk-nag is clean (the object-name wildcards carry their reason)
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
}

// s3BucketLocationOnBoth matches the one statement that names both buckets:
// GetBucketLocation, which Athena calls on each.
func s3BucketLocationOnBoth(acts []string, r, records, results string) bool {
	return slices.Equal(acts, []string{"s3:GetBucketLocation"}) && strings.Contains(r, records) && strings.Contains(r, results)
}

func TestWarehousePropsAreCheckedNamingTheProp(t *testing.T) {
	for name, c := range map[string]struct {
		w          pipeline.WarehouseProps
		prop, says string
	}{
		"a prefix with a trailing slash": {pipeline.WarehouseProps{Prefix: "changes/"}, "Warehouse.Prefix", "must be at most 64 characters"},
		"a prefix with a leading slash":  {pipeline.WarehouseProps{Prefix: "/changes"}, "Warehouse.Prefix", "no leading or trailing '/'"},
		"a prefix with a wildcard":       {pipeline.WarehouseProps{Prefix: "chan*ges"}, "Warehouse.Prefix", "must be"},
		"a prefix Athena would skip":     {pipeline.WarehouseProps{Prefix: "_changes"}, "Warehouse.Prefix", "must be"},
		"an empty segment":               {pipeline.WarehouseProps{Prefix: "a//b"}, "Warehouse.Prefix", "must be"},
		"a prefix too long":              {pipeline.WarehouseProps{Prefix: strings.Repeat("a", 65)}, "Warehouse.Prefix", "at most 64 characters"},
		"a negative state limit":         {pipeline.WarehouseProps{MaxStateBytes: -1}, "Warehouse.MaxStateBytes", "between 1 and 524288"},
		"a state limit no state reaches": {pipeline.WarehouseProps{MaxStateBytes: 2 << 20}, "Warehouse.MaxStateBytes", "between 1 and 524288"},
		"a projection path":              {pipeline.WarehouseProps{Projections: []string{"orders/order"}}, "Warehouse.Projections", `"orders/order" is not a projection name`},
		"an empty projection":            {pipeline.WarehouseProps{Projections: []string{"order", ""}}, "Warehouse.Projections", "(empty)"},
		"a negative retention":           {pipeline.WarehouseProps{RetentionDays: -1}, "Warehouse.RetentionDays", "outside 0..36500"},
		"noncurrent days, not versioned": {pipeline.WarehouseProps{NoncurrentVersionDays: 7}, "Warehouse.NoncurrentVersionDays", "Versioned is false"},
		"noncurrent days out of range":   {pipeline.WarehouseProps{Versioned: true, NoncurrentVersionDays: 4000}, "Warehouse.NoncurrentVersionDays", "outside 1..3650"},
		"query results kept forever":     {pipeline.WarehouseProps{QueryResultsDays: 5000}, "Warehouse.QueryResultsDays", "outside 1..3650"},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN a team's stack and warehouse props that cannot work
			_, st := bare(t)
			w := c.w
			// WHEN the pipeline is created (or its props validated)
			p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Warehouse: &w})
			verr := pipeline.Props{Sources: stripe, Warehouse: &w}.Validate()
			// THEN both fail naming the prop, and nothing was created
			var pe *pipeline.PropError
			if p != nil || !errors.Is(err, pipeline.ErrProps) || !errors.As(err, &pe) {
				t.Fatalf("New = %v, %v; want a *PropError", p, err)
			}
			if pe.Prop != c.prop || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err = %v (prop %q), want prop %q saying %q", err, pe.Prop, c.prop, c.says)
			}
			if verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate = %v, New = %v", verr, err)
			}
			if n := len(*st.Node().Children()); n != 0 {
				t.Errorf("%d constructs were created before the error", n)
			}
		})
	}
	// AND the defaults are applied to a copy: the caller's props stay as
	// given
	w := pipeline.WarehouseProps{Versioned: true}
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Warehouse: &w})
	if err != nil {
		t.Fatal(err)
	}
	if got := *p.Props.Warehouse; got.Prefix != "changes" || got.NoncurrentVersionDays != 30 || got.QueryResultsDays != 30 || w.Prefix != "" {
		t.Errorf("defaults %+v, given %+v", got, w)
	}
}

// noPanic turns a failed assertions.* call (a jsii panic) into a test
// failure that names what was checked.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

// Two analysts granted the warehouse each write query results only under
// a prefix of their own, through a workgroup of their own that enforces
// it: neither can overwrite (nor read) the other's results.
func TestAnAnalystCannotOverwriteAnotherAnalystsQueryResults(t *testing.T) {
	// GIVEN the warehouse on and two analysts' roles, both granted it
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: withBridge, Warehouse: &pipeline.WarehouseProps{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Alice", "Bob"} {
		r := awsiam.NewRole(st, jsii.String(name), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
		if _, err := p.GrantReadWarehouse(r); err != nil {
			t.Fatal(err)
		}
	}
	res := resources(t, st)
	results, _ := only(t, res, "AWS::S3::Bucket", "WebhooksWarehouseResults")
	// WHEN each one's writes and queries are read from the template
	writes := map[string][]string{}  // object patterns each may PutObject
	queries := map[string][]string{} // workgroups each may StartQueryExecution in
	for _, name := range []string{"Alice", "Bob"} {
		role, _ := only(t, res, "AWS::IAM::Role", name)
		for _, s := range roleStatements(res, role) {
			acts := actionsOf(s)
			if slices.Contains(acts, "s3:PutObject") {
				if !mentions(s["Resource"], results) {
					t.Errorf("%s writes outside the results bucket: %s", name, toString(s["Resource"]))
				}
				writes[name] = append(writes[name], toString(s["Resource"]))
			}
			if slices.Contains(acts, "athena:StartQueryExecution") {
				queries[name] = append(queries[name], toString(s["Resource"]))
			}
		}
	}
	// THEN each writes under one prefix of its own, which the other's
	// grant does not reach
	prefixOf := func(name string) string {
		if len(writes[name]) != 1 {
			t.Fatalf("%s PutObject on %v, want one prefix", name, writes[name])
		}
		w := writes[name][0]
		i := strings.Index(w, `"/`)
		if i < 0 || !strings.HasSuffix(w, `/*"]]}`) {
			t.Fatalf("%s PutObject on %s", name, w)
		}
		return w[i+2 : len(w)-len(`*"]]}`)]
	}
	a, b := prefixOf("Alice"), prefixOf("Bob")
	if a == b || strings.HasPrefix(a, b) || strings.HasPrefix(b, a) || a == "athena/" {
		t.Fatalf("Alice writes under %q, Bob under %q: one can overwrite the other's results", a, b)
	}
	// AND each queries in a workgroup of its own, whose enforced output
	// location is its prefix
	for name, prefix := range map[string]string{"Alice": a, "Bob": b} {
		if len(queries[name]) != 1 {
			t.Fatalf("%s queries in %v, want one workgroup", name, queries[name])
		}
		found := false
		for _, wg := range ofType(res, "AWS::Athena::WorkGroup") {
			cfg := props(wg)["WorkGroupConfiguration"].(map[string]any)
			loc := toString(cfg["ResultConfiguration"].(map[string]any)["OutputLocation"])
			if strings.Contains(queries[name][0], ":workgroup/"+props(wg)["Name"].(string)+`"`) {
				found = cfg["EnforceWorkGroupConfiguration"] == true && strings.Contains(loc, "/"+prefix+`"`)
				if !found {
					t.Errorf("%s's workgroup %s writes to %s (enforced %v), want its prefix %s", name, props(wg)["Name"], loc, cfg["EnforceWorkGroupConfiguration"], prefix)
				}
			}
		}
		if !found {
			t.Errorf("%s queries in %s, no workgroup of its own", name, queries[name][0])
		}
	}
	if queries["Alice"][0] == queries["Bob"][0] {
		t.Errorf("both query in %s", queries["Alice"][0])
	}
	// AND cdk-nag is clean
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
}
