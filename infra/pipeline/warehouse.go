package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsathena"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsglue"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// WarehouseProps turns on the warehouse sink (Props.Warehouse): every
// applied projection revision becomes one immutable JSON change record in
// S3, written by the dispatcher with a conditional create (PutObject with
// If-None-Match: *), checked by the reconciler (HeadObject) and re-driven
// through the effects queue when missing. The records are queried with
// Athena through a Glue table; a named query creates the current_state
// view.
//
// A record's key is
//
//	<Prefix>/scope=<scope>/projection=<projection>/subject=<base64url(subject), unpadded>/v=<version, 20 digits>.json
//
// and its body one JSON line:
//
//	{"scope":…,"projection":…,"subject":…,"version":12,"state":{…},"event_id":…,"source":…,"applied_at":"2026-12-03T10:00:00.000Z"}
//
// The zero value of every field is its default.
type WarehouseProps struct {
	// Prefix is the records' key prefix (WAREHOUSE_PREFIX) and the Glue
	// table's location under the bucket: one or more segments of
	// lowercase letters, digits, '.', '_' and '-', separated by '/', each
	// starting with a letter or digit (the Athena user guide warns against
	// underscores in a table's location, and Hadoop's readers skip names
	// that start with '_' or '.'), no leading or trailing '/', at most 64
	// characters. Default "changes".
	Prefix string
	// MaxStateBytes is WAREHOUSE_MAX_STATE_BYTES, the largest state the
	// dispatcher writes into a record: 0 leaves it to the runtime's
	// default (the variable is not set); otherwise 1 to 512 KiB
	// (warehouse.MaxRecord/2), the most the functions accept: a record
	// carries its state and its envelope within 1 MiB.
	MaxStateBytes int
	// Projections are the projection names whose revisions are recorded
	// (WAREHOUSE_PROJECTIONS); empty, the default, records every one. A
	// name the processor's registry does not have fails the processor at
	// cold start (the construct does not know the registry).
	Projections []string
	// RetentionDays is how long a record is kept (a lifecycle expiration on
	// the prefix, counted from its creation); 0, the default, keeps records
	// forever. A record that expires while its revision is still a
	// subject's canonical one is reported missing by the reconciler and
	// written again (the reconciler gets it as WAREHOUSE_RETENTION_DAYS and
	// checks every subject older than it in each pass), up to
	// ledger.MaxRecordRepairs times per revision.
	RetentionDays int
	// Versioned turns on bucket versioning. Off by default: a record is
	// created once and never overwritten (the bucket policy refuses a
	// PutObject without If-None-Match under the prefix), so versions would
	// only keep what a lifecycle expiration removes.
	Versioned bool
	// NoncurrentVersionDays is how long a noncurrent version is kept when
	// Versioned (1 to 3650, default 30); it must be 0 when not Versioned.
	NoncurrentVersionDays int
	// QueryResultsDays is how long Athena's query results are kept in the
	// results bucket, 1 to 3650. Default 30.
	QueryResultsDays int
}

// WarehouseResources are what the warehouse created (Pipeline.Warehouse).
type WarehouseResources struct {
	// Bucket holds the change records under Prefix.
	Bucket awss3.Bucket
	// Prefix is the records' key prefix (no trailing '/').
	Prefix string
	// ResultsBucket holds Athena's query results (the workgroup's output
	// location); AccessLogsBucket receives both buckets' server access logs.
	ResultsBucket, AccessLogsBucket awss3.Bucket
	// Database and Table are the Glue database and the table over the
	// records; DatabaseName and TableName their names, ViewName the view
	// the current_state named query creates.
	Database                          awsglue.CfnDatabase
	Table                             awsglue.CfnTable
	DatabaseName, TableName, ViewName string
	// WorkGroup is the Athena workgroup the named queries belong to, with
	// its results encrypted and its configuration enforced.
	WorkGroup     awsathena.CfnWorkGroup
	WorkGroupName string
	// NamedQueries by name (WarehouseViewName).
	NamedQueries map[string]awsathena.CfnNamedQuery
	// analysts are the keys of the grantees that have a workgroup.
	analysts map[string]bool
}

// Names and limits of the warehouse.
const (
	// WarehouseTableName is the Glue table over the change records.
	WarehouseTableName = "change_records"
	// WarehouseViewName is the view of the newest record per subject, and
	// the name of the named query that creates it.
	WarehouseViewName = "current_state"

	defaultWarehousePrefix = "changes"
	// maxWarehousePrefix keeps the variables small: the prefix goes into
	// the 4 KB environment of three functions, which SOURCES and EFFECTS
	// mostly fill (maxDocumentBytes).
	maxWarehousePrefix           = 64
	maxWarehouseRetentionDays    = 36500
	defaultNoncurrentVersionDays = 30
	defaultQueryResultsDays      = 30
	// warehouseResultsPrefix is where the workgroup writes query results in
	// the results bucket.
	warehouseResultsPrefix = "athena/"
	// analystResultsPrefix is where each grantee's own workgroup writes its
	// query results: analysts/<grantee key>/ (GrantReadWarehouse).
	analystResultsPrefix = "analysts/"
)

// WarehouseMetrics are the reconciler's metrics about the warehouse (EMF,
// the stage's namespace, no dimensions, like ReconcilerMetrics), emitted
// when the warehouse is on: WarehouseDrift counts the subjects whose
// canonical revision is not the warehouse's; WarehouseDriftOldestAgeSeconds
// is how long the oldest of them has been so.
// Both are the last complete pass's (the check walks the table over several
// runs); WarehouseCheckPassAgeSeconds is how old that pass is.
var WarehouseMetrics = []string{"WarehouseDrift", "WarehouseDriftOldestAgeSeconds", "WarehouseCheckPassAgeSeconds"}

// warehousePassAlarmSeconds: a pass of the drift check reads 10,000 items
// per 5-minute run, so a day covers a table of 2.9 million items; a pass
// older than that means the check stopped, or the table outgrew one run's
// reads (WAREHOUSE_CHECK_READS).
const warehousePassAlarmSeconds = 24 * 3600

// warehouseDriftAlarmSeconds: the reconciler re-drives a missing record
// every run (5 minutes) and the dispatcher retries a failed write with the
// effects queue's backoff, whose own alarm waits an hour
// (effectsOldestAlarmSeconds). A subject still behind after an hour has had
// about twelve re-drives: the write keeps failing. A count alarm would ring
// on every burst: a revision applied just before a run is counted until the
// dispatcher writes it, seconds later.
const warehouseDriftAlarmSeconds = effectsOldestAlarmSeconds

// The S3 actions of the warehouse's grants.
const (
	s3Get  = "s3:GetObject" // also authorizes HeadObject
	s3Put  = "s3:PutObject"
	s3List = "s3:ListBucket"
	// On a query results location Athena needs these too (what the
	// AmazonAthenaFullAccess managed policy allows on its results buckets:
	// the Athena user guide, "AWS managed policies for Amazon Athena").
	s3BucketLocation   = "s3:GetBucketLocation"
	s3ListUploads      = "s3:ListBucketMultipartUploads"
	s3ListUploadParts  = "s3:ListMultipartUploadParts"
	s3AbortUpload      = "s3:AbortMultipartUpload"
	logDeliveryService = "logging.s3.amazonaws.com" // server access log delivery's principal
)

// The Glue table's formats: JSON lines read as text by the OpenX SerDe.
const (
	warehouseSerDe  = "org.openx.data.jsonserde.JsonSerDe"
	warehouseInput  = "org.apache.hadoop.mapred.TextInputFormat"
	warehouseOutput = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
)

// warehousePrefixRE is Prefix's rule: segments that start with a letter or
// a digit, of characters S3, IAM's StringLike and Athena's LOCATION all take
// literally (no '*' or '?', which IAM reads as wildcards).
var warehousePrefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$`)

// withWarehouseDefaults returns w with its defaults applied (a copy: the
// caller's props stay as given).
func withWarehouseDefaults(w *WarehouseProps) *WarehouseProps {
	if w == nil {
		return nil
	}
	c := *w
	if c.Prefix == "" {
		c.Prefix = defaultWarehousePrefix
	}
	if c.Versioned && c.NoncurrentVersionDays == 0 {
		c.NoncurrentVersionDays = defaultNoncurrentVersionDays
	}
	if c.QueryResultsDays == 0 {
		c.QueryResultsDays = defaultQueryResultsDays
	}
	return &c
}

// badProjectionName returns the first of names that WAREHOUSE_PROJECTIONS
// could not carry, or "".
func badProjectionName(names []string) string {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "/,* \t") {
			if n == "" {
				return "(empty)"
			}
			return n
		}
	}
	return ""
}

// validateWarehouse checks Props.Warehouse (with its defaults applied).
func (p Props) validateWarehouse() error {
	w := p.Warehouse
	if w == nil {
		return nil
	}
	switch {
	case len(w.Prefix) > maxWarehousePrefix || !warehousePrefixRE.MatchString(w.Prefix):
		return propErr("Warehouse.Prefix", "%q must be at most %d characters matching %s (no leading or trailing '/')", w.Prefix, maxWarehousePrefix, warehousePrefixRE)
	case badProjectionName(w.Projections) != "":
		return propErr("Warehouse.Projections", "%q is not a projection name (no '/', ',', '*' or spaces; empty records every projection)", badProjectionName(w.Projections))
	case w.RetentionDays < 0 || w.RetentionDays > maxWarehouseRetentionDays:
		return propErr("Warehouse.RetentionDays", "%d is outside 0..%d (0: kept forever)", w.RetentionDays, maxWarehouseRetentionDays)
	case !w.Versioned && w.NoncurrentVersionDays != 0:
		return propErr("Warehouse.NoncurrentVersionDays", "%d is set but Versioned is false: the bucket keeps no noncurrent versions to expire", w.NoncurrentVersionDays)
	case w.NoncurrentVersionDays < 0 || w.NoncurrentVersionDays > 3650:
		return propErr("Warehouse.NoncurrentVersionDays", "%d is outside 1..3650", w.NoncurrentVersionDays)
	case w.QueryResultsDays < 1 || w.QueryResultsDays > 3650:
		return propErr("Warehouse.QueryResultsDays", "%d is outside 1..3650", w.QueryResultsDays)
	}
	return nil
}

// ErrNoWarehouse is GrantReadWarehouse's error when Props.Warehouse is nil.
var ErrNoWarehouse = errors.New("pipeline: the warehouse is off (Props.Warehouse is nil)")

// warehouseDatabaseName is the Glue database's name: Athena takes
// lowercase letters, digits and underscores in a name without quoting, so
// the Name's hyphens become underscores ("webhooks_dev_warehouse").
func (s *Pipeline) warehouseDatabaseName() string {
	return strings.ReplaceAll(s.Props.Name, "-", "_") + "_" + s.Props.Stage + "_warehouse"
}

// warehouse creates, when Props.Warehouse is set, the records bucket, the
// results and access-log buckets, the Glue database and table, the Athena
// workgroup and named query, the functions' environment and the grants.
// Nothing here exists when it is off, and nothing that exists without it
// changes but the dispatcher's queue mapping, which is enabled: the
// dispatcher writes the records, so it must consume the effects queue even
// when no effect is configured.
func (s *Pipeline) warehouse() {
	w := s.Props.Warehouse
	if w == nil {
		return
	}
	st := awscdk.Stack_Of(s)
	// Server access logs of both buckets below: who read or wrote which
	// record, and who fetched which query result. Log delivery writes with
	// the logging service's principal through this bucket's policy (the
	// bucket owner enforced setting takes no ACL grant); a log bucket's own
	// access is not logged. Kept as long as the functions' logs.
	logs := privateBucket(s, "WarehouseAccessLogs", false, &awss3.LifecycleRule{
		Id:                                  jsii.String("expire-access-logs"),
		Expiration:                          awscdk.Duration_Days(jsii.Number(float64(s.Props.LogRetentionDays))),
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
	})

	// The records: S3-managed encryption like the trail's evidence bucket
	// (no key to manage, and no kms:GenerateDataKey or kms:Decrypt grant
	// for the functions or the analysts), closed to the public, TLS only,
	// object ownership enforced, kept when the stack is deleted.
	rules := []*awss3.LifecycleRule{{
		Id:                                  jsii.String("abort-incomplete-uploads"),
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
	}}
	if w.RetentionDays > 0 {
		rules = append(rules, &awss3.LifecycleRule{
			Id:         jsii.String("expire-records"),
			Prefix:     jsii.String(w.Prefix + "/"),
			Expiration: awscdk.Duration_Days(jsii.Number(float64(w.RetentionDays))),
		})
	}
	if w.Versioned {
		rules = append(rules, &awss3.LifecycleRule{
			Id:                          jsii.String("expire-noncurrent-versions"),
			NoncurrentVersionExpiration: awscdk.Duration_Days(jsii.Number(float64(w.NoncurrentVersionDays))),
		})
	}
	records := privateBucket(s, "WarehouseBucket", w.Versioned, rules...)
	recordObjects := records.ArnForObjects(jsii.String(w.Prefix + "/*"))
	// A record is created once: under the prefix, S3 refuses a PutObject
	// (and so a multipart upload or a copy) that does not carry
	// If-None-Match, whoever sends it (the S3 user guide, "Enforce
	// conditional writes on Amazon S3 buckets"), and answers 412 to one
	// that does when the key exists. So no write replaces a record; the
	// dispatcher's writes always carry the header. (Deleting a record
	// stays possible for whoever may delete: no role here may.)
	records.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("RecordsAreCreatedOnlyConditionally"),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings(s3Put),
		Resources:  &[]*string{recordObjects},
		Conditions: &map[string]any{"Null": map[string]any{"s3:if-none-match": "true"}},
	}))

	// Athena's query results: encrypted by the workgroup (SSE-S3), expired
	// after QueryResultsDays.
	results := privateBucket(s, "WarehouseResults", false, &awss3.LifecycleRule{
		Id:                                  jsii.String("expire-query-results"),
		Expiration:                          awscdk.Duration_Days(jsii.Number(float64(w.QueryResultsDays))),
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
	})
	for _, b := range []struct {
		bucket awss3.Bucket
		prefix string
	}{{records, "records/"}, {results, "results/"}} {
		b.bucket.Node().DefaultChild().(awss3.CfnBucket).SetLoggingConfiguration(&awss3.CfnBucket_LoggingConfigurationProperty{
			DestinationBucketName: logs.BucketName(),
			LogFilePrefix:         jsii.String(b.prefix),
		})
		logs.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String(logDeliveryService), nil)},
			Actions:    jsii.Strings(s3Put),
			Resources:  &[]*string{logs.ArnForObjects(jsii.String(b.prefix + "*"))},
			Conditions: &map[string]any{
				"ArnLike":      map[string]any{"aws:SourceArn": b.bucket.BucketArn()},
				"StringEquals": map[string]any{"aws:SourceAccount": st.Account()},
			},
		}))
	}

	res := &WarehouseResources{Bucket: records, Prefix: w.Prefix, ResultsBucket: results, AccessLogsBucket: logs,
		DatabaseName: s.warehouseDatabaseName(), TableName: WarehouseTableName, ViewName: WarehouseViewName,
		WorkGroupName: s.prefix() + "warehouse", NamedQueries: map[string]awsathena.CfnNamedQuery{}}
	s.Warehouse = res
	s.warehouseCatalog(res)
	s.warehouseAthena(res)
	s.warehouseEnv(w)
	s.warehouseGrants(res)
}

// warehouseCatalog creates the Glue database and the table over the
// records.
//
// The table reads s3://<bucket>/<prefix>/ with the OpenX JSON SerDe, one
// record per line. A column typed string over a JSON object (state) reads
// the object as its JSON text (the SerDe's string inspector returns the
// parsed value's text: query it with json_extract). That text is the same
// JSON, not necessarily the same bytes: key order and spacing may differ.
// case.insensitive is off so keys inside state keep their case; the
// record's own keys are all lowercase, so no column mapping is needed.
//
// Not partitioned: for a table without partitions Athena lists the
// LOCATION and scans every file under it, subfolders included (the Athena
// user guide, "Table location in Amazon S3"; its ALB and CloudTrail log
// tables read dated subfolders of their LOCATION the same way). Partition
// projection does not fit these keys: scope could be an enum of the
// sources, but projection and subject are open sets, and an injected
// projection column fails every query that does not name one value, which
// current_state (every subject) cannot do. The key's scope=, projection=
// and subject= segments are Hive-style, so partitions can be added later
// without moving a record.
//
// applied_at stays a string (ISO 8601, UTC, milliseconds): from_iso8601_timestamp
// reads it, and a SerDe timestamp format would be one more thing to match
// the runtime's.
func (s *Pipeline) warehouseCatalog(res *WarehouseResources) {
	account := awscdk.Stack_Of(s).Account()
	res.Database = awsglue.NewCfnDatabase(s, jsii.String("WarehouseDatabase"), &awsglue.CfnDatabaseProps{
		CatalogId: account,
		DatabaseInput: &awsglue.CfnDatabase_DatabaseInputProperty{
			Name:        jsii.String(res.DatabaseName),
			Description: jsii.String("Change records of the " + s.Props.Name + "-" + s.Props.Stage + " pipeline: one per applied projection revision"),
		},
	})
	col := func(name, typ, comment string) *awsglue.CfnTable_ColumnProperty {
		return &awsglue.CfnTable_ColumnProperty{Name: jsii.String(name), Type: jsii.String(typ), Comment: jsii.String(comment)}
	}
	res.Table = awsglue.NewCfnTable(s, jsii.String("WarehouseTable"), &awsglue.CfnTableProps{
		CatalogId:    account,
		DatabaseName: res.Database.Ref(),
		TableInput: &awsglue.CfnTable_TableInputProperty{
			Name:        jsii.String(res.TableName),
			Description: jsii.String("One row per applied projection revision (immutable JSON change records)"),
			TableType:   jsii.String("EXTERNAL_TABLE"),
			Parameters:  map[string]any{"classification": "json", "EXTERNAL": "TRUE"},
			// Athena's views guide asks for an explicit empty list on
			// tables created through the Glue API.
			PartitionKeys: []any{},
			StorageDescriptor: &awsglue.CfnTable_StorageDescriptorProperty{
				Location:     jsii.String("s3://" + *res.Bucket.BucketName() + "/" + res.Prefix + "/"),
				InputFormat:  jsii.String(warehouseInput),
				OutputFormat: jsii.String(warehouseOutput),
				Compressed:   false,
				SerdeInfo: &awsglue.CfnTable_SerdeInfoProperty{
					SerializationLibrary: jsii.String(warehouseSerDe),
					Parameters:           map[string]any{"case.insensitive": "FALSE", "ignore.malformed.json": "FALSE"},
				},
				Columns: []any{
					col("scope", "string", "the source the revision came from (a source's name)"),
					col("projection", "string", "the projection's name"),
					col("subject", "string", "the projection's subject"),
					col("version", "bigint", "the revision's version: the newest per subject is the canonical state"),
					col("state", "string", "the projected state, as JSON text (json_extract)"),
					col("event_id", "string", "the event that produced the revision"),
					col("source", "string", "the event's source"),
					col("applied_at", "string", "when the revision was applied, ISO 8601 UTC (from_iso8601_timestamp)"),
				},
			},
		},
	})
}

// currentStateSQL is the current_state view: the newest record of each
// subject. Athena creates a view from its own DDL only (a view created
// another way cannot be queried or changed in Athena: the Athena user
// guide, "Working with views"), so the view is a named query an operator
// runs once in the workgroup; CREATE OR REPLACE makes a rerun harmless.
func currentStateSQL(database, table string) string {
	return fmt.Sprintf(`CREATE OR REPLACE VIEW %s AS
SELECT "scope", "projection", "subject", "version", "state", "event_id", "source", "applied_at"
FROM (
  SELECT *, row_number() OVER (PARTITION BY "scope", "projection", "subject" ORDER BY "version" DESC) AS rn
  FROM "%s"."%s"
)
WHERE rn = 1`, WarehouseViewName, database, table)
}

// warehouseAthena creates the workgroup (results encrypted in the results
// bucket, its settings enforced over the client's, metrics published) and
// the current_state named query.
func (s *Pipeline) warehouseAthena(res *WarehouseResources) {
	res.WorkGroup = s.workGroup(res, "WarehouseWorkGroup", res.WorkGroupName,
		"Queries over the "+s.Props.Name+"-"+s.Props.Stage+" pipeline's change records", warehouseResultsPrefix)
	q := awsathena.NewCfnNamedQuery(s, jsii.String("WarehouseCurrentState"), &awsathena.CfnNamedQueryProps{
		Name:        jsii.String(WarehouseViewName),
		Description: jsii.String("Creates (or replaces) the current_state view: the newest change record per scope, projection and subject"),
		Database:    jsii.String(res.DatabaseName),
		WorkGroup:   res.WorkGroup.Ref(),
		QueryString: jsii.String(currentStateSQL(res.DatabaseName, res.TableName)),
	})
	q.Node().AddDependency(res.Table)
	res.NamedQueries[WarehouseViewName] = q
}

// workGroup creates an Athena workgroup whose results go, encrypted, under
// prefix in the results bucket, its settings enforced over the client's
// (a query cannot choose another output location), metrics published.
func (s *Pipeline) workGroup(res *WarehouseResources, id, name, description, prefix string) awsathena.CfnWorkGroup {
	return awsathena.NewCfnWorkGroup(s, jsii.String(id), &awsathena.CfnWorkGroupProps{
		Name:        jsii.String(name),
		Description: jsii.String(description),
		State:       jsii.String("ENABLED"),
		WorkGroupConfiguration: &awsathena.CfnWorkGroup_WorkGroupConfigurationProperty{
			EnforceWorkGroupConfiguration:   jsii.Bool(true),
			PublishCloudWatchMetricsEnabled: jsii.Bool(true),
			ResultConfiguration: &awsathena.CfnWorkGroup_ResultConfigurationProperty{
				OutputLocation:          jsii.String("s3://" + *res.ResultsBucket.BucketName() + "/" + prefix),
				EncryptionConfiguration: &awsathena.CfnWorkGroup_EncryptionConfigurationProperty{EncryptionOption: jsii.String("SSE_S3")},
			},
		},
	})
}

// warehouseEnv sets the warehouse's variables on the processor, the
// dispatcher and the reconciler (the sink is off in a function without
// WAREHOUSE_BUCKET). WAREHOUSE_MAX_STATE_BYTES is set only when given.
func (s *Pipeline) warehouseEnv(w *WarehouseProps) {
	for _, fn := range []string{Processor, Dispatcher, Reconciler} {
		f := s.Functions[fn].Fn
		f.AddEnvironment(jsii.String("WAREHOUSE_BUCKET"), s.Warehouse.Bucket.BucketName(), nil)
		for _, st := range s.props().warehouseSettings() {
			f.AddEnvironment(jsii.String(st.env), jsii.String(st.value), nil)
		}
	}
	// The drift check also checks every subject older than the records'
	// retention: its record may have expired.
	for _, st := range s.props().reconcilerSettings() {
		s.Functions[Reconciler].Fn.AddEnvironment(jsii.String(st.env), jsii.String(st.value), nil)
	}
}

// warehouseGrants gives the dispatcher and the reconciler what their
// warehouse calls need, on the records only; intake, the bridge and the
// processor get nothing.
//
//   - dispatcher: PutObject (the conditional create) and GetObject (on a
//     412, the existing record's bytes to compare) on <prefix>/*.
//   - reconciler: GetObject on <prefix>/* (HeadObject is authorized as
//     GetObject), and ListBucket on the bucket for keys under the prefix
//     only: without ListBucket, S3 answers a HeadObject of a missing key
//     403 instead of 404 (the S3 API reference, HeadObject, "Permissions"),
//     and a missing record could not be told from a refused read.
//     In the ledger, its warehouse check finds the projections changed
//     since its lookback with a bounded Scan of the table (the table has
//     no index by update time), and writes the record intent a revision
//     lacks, or a repair, with a PutItem under the record intents' own
//     keys (OP#warehouse.…) only: its credentials cannot create a
//     business intent (a PENDING refund), and the dispatcher performs an
//     item under that shape only as a record.
//
// The bucket is S3-managed encrypted, so no KMS grant is needed.
func (s *Pipeline) warehouseGrants(res *WarehouseResources) {
	objects := res.Bucket.ArnForObjects(jsii.String(res.Prefix + "/*"))
	di, re := s.Functions[Dispatcher], s.Functions[Reconciler]
	di.grantOn([]string{s3Get, s3Put}, objects)
	re.grantOn([]string{s3Get}, objects)
	re.grantOn([]string{ddbScan}, s.Table.TableArn())
	re.grantWrites(s.Table.TableArn(), ledgerWrites{ddbPut: {anyKey(pkRecordIntents)}})
	re.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:    jsii.Strings(s3List),
		Resources:  &[]*string{res.Bucket.BucketArn()},
		Conditions: &map[string]any{"StringLike": map[string]any{"s3:prefix": res.Prefix + "/*"}},
	}))
	for _, f := range []*Function{di, re} {
		cdknag.NagSuppressions_AddResourceSuppressions(f.Role, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-IAM5"),
			Reason: jsii.String("Warehouse records: one object per projection revision under the prefix " + res.Prefix +
				"/, named after its scope, projection, subject and version, none known at deploy time; the object name " +
				"under the prefix is the only wildcard, on the records bucket only."),
			AppliesTo: &[]any{s.nagResource(res.Bucket, res.Prefix+"/*")},
		}}, jsii.Bool(true))
	}
}

// nagResource is how cdk-nag names bucket's objects matching pattern in an
// AppliesTo: "Resource::<BucketLogicalId.Arn>/pattern".
func (s *Pipeline) nagResource(bucket awss3.Bucket, pattern string) string {
	id := awscdk.Stack_Of(s).GetLogicalId(bucket.Node().DefaultChild().(awscdk.CfnElement))
	return "Resource::<" + *id + ".Arn>/" + pattern
}

// Athena and Glue actions of GrantReadWarehouse: run and read queries in
// the workgroup (and its named queries), and read the catalog entries the
// queries resolve. Athena reads the Glue catalog with the caller's
// permissions, on the resource and each of its ancestors (the catalog, the
// database), and needs GetDatabase on the default database as well (the
// Athena user guide, "Fine-grained access to databases and tables in the
// AWS Glue Data Catalog").
var (
	athenaQueryActions = []string{"athena:StartQueryExecution", "athena:StopQueryExecution", "athena:GetQueryExecution",
		"athena:GetQueryResults", "athena:GetQueryResultsStream", "athena:ListQueryExecutions", "athena:BatchGetQueryExecution",
		"athena:GetWorkGroup"}
	athenaNamedQueryActions = []string{"athena:GetWorkGroup", "athena:ListNamedQueries", "athena:GetNamedQuery", "athena:BatchGetNamedQuery"}
	glueDatabaseActions     = []string{"glue:GetDatabase", "glue:GetDatabases"}
	glueTableActions        = []string{"glue:GetTable", "glue:GetTables", "glue:GetPartition", "glue:GetPartitions"}
)

// GrantReadWarehouse lets grantee (an analyst's role) query the warehouse
// with Athena: read the change records (GetObject under the prefix,
// ListBucket for keys under the prefix), read the Glue database and its
// tables (the records table and the current_state view), read the
// pipeline workgroup's named queries, and run queries in a workgroup of
// its own, created here ("<Name>-<Stage>-analyst-<key>", key from the
// grantee's construct address), whose enforced output location is
// analysts/<key>/ in the results bucket: it writes and reads results
// there only, so one grantee can neither overwrite nor read another's.
// No write to the records or the catalog, nothing of the ledger. The
// grantee must be a construct (a role or user of the app). Creating the view (running the
// current_state named query) also needs glue:CreateTable and
// glue:UpdateTable on the view: an operator's permission, not granted
// here. It returns ErrNoWarehouse when the warehouse is off.
func (s *Pipeline) GrantReadWarehouse(grantee awsiam.IGrantable) (awsiam.Grant, error) {
	res := s.Warehouse
	if res == nil {
		return nil, ErrNoWarehouse
	}
	gc, ok := grantee.(constructs.IConstruct)
	if !ok {
		return nil, fmt.Errorf("pipeline: GrantReadWarehouse: the grantee must be a construct (a role or user), to get a workgroup of its own")
	}
	key := (*gc.Node().Addr())[2:14]
	resultsPrefix := analystResultsPrefix + key + "/"
	wgName := res.WorkGroupName + "-analyst-" + key
	if _, done := res.analysts[key]; !done {
		if res.analysts == nil {
			res.analysts = map[string]bool{}
		}
		res.analysts[key] = true
		s.workGroup(res, "AnalystWorkGroup"+key, wgName, "Queries of one analyst ("+*gc.Node().Path()+") over the "+
			s.Props.Name+"-"+s.Props.Stage+" pipeline's change records; results under "+resultsPrefix, resultsPrefix)
	}
	st := awscdk.Stack_Of(s)
	arn := func(service, resource string) *string {
		return st.FormatArn(&awscdk.ArnComponents{Service: jsii.String(service), Resource: jsii.String(resource)})
	}
	add := func(actions []string, conditions map[string]*map[string]any, resources ...*string) awsiam.Grant {
		o := &awsiam.GrantOnPrincipalOptions{Grantee: grantee, Actions: jsii.Strings(actions...), ResourceArns: &resources}
		if conditions != nil {
			o.Conditions = &conditions
		}
		return awsiam.Grant_AddToPrincipal(o)
	}
	records := res.Bucket.ArnForObjects(jsii.String(res.Prefix + "/*"))
	results := res.ResultsBucket.ArnForObjects(jsii.String(resultsPrefix + "*"))
	g := add([]string{s3Get}, nil, records)
	g = g.Combine(add([]string{s3List}, map[string]*map[string]any{"StringLike": {"s3:prefix": res.Prefix + "/*"}}, res.Bucket.BucketArn()))
	g = g.Combine(add([]string{s3BucketLocation}, nil, res.Bucket.BucketArn(), res.ResultsBucket.BucketArn()))
	g = g.Combine(add([]string{s3List}, map[string]*map[string]any{"StringLike": {"s3:prefix": resultsPrefix + "*"}}, res.ResultsBucket.BucketArn()))
	g = g.Combine(add([]string{s3ListUploads}, nil, res.ResultsBucket.BucketArn()))
	g = g.Combine(add([]string{s3Get, s3Put, s3ListUploadParts, s3AbortUpload}, nil, results))
	g = g.Combine(add(athenaQueryActions, nil, arn("athena", "workgroup/"+wgName)))
	g = g.Combine(add(athenaNamedQueryActions, nil, arn("athena", "workgroup/"+res.WorkGroupName)))
	g = g.Combine(add(glueDatabaseActions, nil, arn("glue", "catalog"), arn("glue", "database/default"), arn("glue", "database/"+res.DatabaseName)))
	// The warehouse database's tables: the records table and the views
	// made from it (current_state); GetTables lists them.
	tables := "table/" + res.DatabaseName + "/*"
	g = g.Combine(add(glueTableActions, nil, arn("glue", "catalog"), arn("glue", "database/"+res.DatabaseName), arn("glue", tables)))
	{
		cdknag.NagSuppressions_AddResourceSuppressions(gc, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-IAM5"),
			Reason: jsii.String("Warehouse read grant: the change records under " + res.Prefix + "/ (read only), Athena's query " +
				"results under its own " + resultsPrefix + " (named by query id) and the tables of the warehouse's Glue database " +
				"(read only: the records table and the views made from it) are named at run time; the name is the only wildcard."),
			AppliesTo: &[]any{s.nagResource(res.Bucket, res.Prefix+"/*"), s.nagResource(res.ResultsBucket, resultsPrefix+"*"),
				"Resource::arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:" + tables},
		}}, jsii.Bool(true))
	}
	return g, nil
}
