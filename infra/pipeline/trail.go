package pipeline

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudtrail"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// LedgerTrailResources are the CloudTrail trail that records the ledger
// table's data events, and its bucket.
type LedgerTrailResources struct {
	Trail  awscloudtrail.Trail
	Bucket awss3.Bucket
}

// ledgerTrail creates, when the context asks (ledgerDataEvents), a trail
// that records every write to the ledger table: DynamoDB data events
// (PutItem, UpdateItem, DeleteItem, TransactWriteItems, BatchWriteItem …)
// with the calling principal, source IP and time, as AWS saw them. The
// operator tools write the operator's identity into an audit entry, but
// anyone who may write the table could write such an entry too; the trail
// is the evidence that does not come from the writer.
//
// Writes only (WriteOnly): reads would multiply the cost (every processor
// attempt reads the row) and say nothing about who changed it. No
// management events (an account's own trail records those, and a second
// copy is billed) and this region only (the table's). Log file validation
// is on, so a log file changed or deleted after delivery is detected (aws
// cloudtrail validate-logs). The bucket is S3-encrypted, versioned (an
// overwritten or deleted log file keeps its earlier version), TLS-only,
// closed to the public, and kept when the stack is deleted.
func (s *Pipeline) ledgerTrail() {
	if !s.Props.LedgerDataEvents {
		return
	}
	bucket := privateBucket(s, "LedgerTrailBucket", true)
	cdknag.NagSuppressions_AddResourceSuppressions(bucket, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-S1"),
		Reason: jsii.String("This bucket holds the ledger trail's CloudTrail log files. Server access logs would need a bucket of " +
			"their own; tampering with a log file is detected by CloudTrail's log file validation and kept by versioning."),
	}}, jsii.Bool(false))
	trail := awscloudtrail.NewTrail(s, jsii.String("LedgerTrail"), &awscloudtrail.TrailProps{
		TrailName:                  jsii.String(s.prefix() + "ledger-data-events"),
		Bucket:                     bucket,
		EnableFileValidation:       jsii.Bool(true),
		IsMultiRegionTrail:         jsii.Bool(false),
		IncludeGlobalServiceEvents: jsii.Bool(false),
	})
	// CDK's Trail names only Lambda and S3 data resources; DynamoDB tables
	// are a basic event selector's third type, so the selector is written
	// on the CloudFormation resource.
	cfn := trail.Node().DefaultChild().(awscloudtrail.CfnTrail)
	cfn.AddPropertyOverride(jsii.String("EventSelectors"), []any{map[string]any{
		"IncludeManagementEvents": false,
		"ReadWriteType":           "WriteOnly",
		"DataResources":           []any{map[string]any{"Type": "AWS::DynamoDB::Table", "Values": []any{s.Table.TableArn()}}},
	}})
	s.LedgerTrail = &LedgerTrailResources{Trail: trail, Bucket: bucket}
}
