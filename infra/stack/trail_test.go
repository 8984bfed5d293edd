package stack_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/stack"
)

func trailStack(t testing.TB) *synthed {
	return synth(t, "ledger-trail", map[string]any{stack.KeyLedgerDataEvents: "true"})
}

// By default no trail is created: data events are billed per event, and
// an account often records them in an organization trail already
// (infra/README.md says how to add the table to one).
func TestNoLedgerTrailUnlessTheContextAsksForOne(t *testing.T) {
	for _, variant := range []string{"default", "full"} {
		s := stackOf(t, variant)
		if n := len(s.ofType("AWS::CloudTrail::Trail")); n != 0 || s.stack.LedgerTrail != nil {
			t.Errorf("%s: %d trails", variant, n)
		}
	}
	// AND a value that is not a boolean fails synth, naming the key
	_, err := stack.FromContext(func(k string) any {
		switch k {
		case stack.KeySources:
			return `[{"name":"stripe","kind":"stripe"}]`
		case stack.KeyLedgerDataEvents:
			return "sometimes"
		}
		return nil
	})
	if !errors.Is(err, stack.ErrConfig) || !strings.Contains(err.Error(), stack.KeyLedgerDataEvents) {
		t.Fatalf("err %v", err)
	}
}

// Anyone who may write the ledger table could write an audit entry that
// names someone else; with ledgerDataEvents=true a trail records every
// write to the table as AWS saw it (principal, time, source), into a
// bucket where a log file cannot quietly change.
func TestLedgerDataEventsRecordEveryWriteToTheTableInAnEvidenceBucket(t *testing.T) {
	// GIVEN the stack with ledgerDataEvents=true
	s := trailStack(t)
	var tableID string
	for id := range s.ofType("AWS::DynamoDB::Table") {
		tableID = id
	}
	buckets := s.ofType("AWS::S3::Bucket")
	if len(buckets) != 1 {
		t.Fatalf("%d buckets", len(buckets))
	}
	var bucketID string
	for id := range buckets {
		bucketID = id
	}
	// THEN one trail, this region only, no management events, validated
	// log files, records the table's write data events into that bucket
	noPanic(t, "the ledger trail", func() {
		s.template.ResourceCountIs(jsii.String("AWS::CloudTrail::Trail"), jsii.Number(1))
		s.template.HasResourceProperties(jsii.String("AWS::CloudTrail::Trail"), &map[string]any{
			"TrailName":                  "webhooks-dev-ledger-data-events",
			"IsLogging":                  true,
			"IsMultiRegionTrail":         false,
			"IncludeGlobalServiceEvents": false,
			"EnableLogFileValidation":    true,
			"S3BucketName":               map[string]any{"Ref": bucketID},
			"EventSelectors": []any{map[string]any{
				"IncludeManagementEvents": false,
				"ReadWriteType":           "WriteOnly",
				"DataResources": []any{map[string]any{
					"Type":   "AWS::DynamoDB::Table",
					"Values": []any{map[string]any{"Fn::GetAtt": []any{tableID, "Arn"}}},
				}},
			}},
		})
	})
	// AND the bucket is encrypted, versioned, closed to the public, kept
	// when the stack goes, and TLS-only, and CloudTrail may write it
	noPanic(t, "the trail's bucket", func() {
		s.template.HasResource(jsii.String("AWS::S3::Bucket"), &map[string]any{
			"DeletionPolicy": "Retain",
			"Properties": map[string]any{
				"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
					map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}}}},
				"VersioningConfiguration": map[string]any{"Status": "Enabled"},
				"PublicAccessBlockConfiguration": map[string]any{
					"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true},
			},
		})
		s.template.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), &map[string]any{
			"Bucket": map[string]any{"Ref": bucketID},
			"PolicyDocument": assertions.Match_ObjectLike(&map[string]any{
				"Statement": assertions.Match_ArrayWith(&[]any{
					assertions.Match_ObjectLike(&map[string]any{
						"Effect": "Deny", "Action": "s3:*", "Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
					}),
					assertions.Match_ObjectLike(&map[string]any{
						"Effect": "Allow", "Action": "s3:PutObject", "Principal": map[string]any{"Service": "cloudtrail.amazonaws.com"},
					}),
				}),
			}),
		})
	})
	// AND the stack says where the evidence is
	for _, id := range []string{"LedgerTrailArn", "LedgerTrailBucketName"} {
		if _, ok := s.outputs[id]; !ok {
			t.Errorf("no output %s", id)
		}
	}
	// AND cdk-nag finds nothing to report
	ann := assertions.Annotations_FromStack(s.stack.Stack)
	for _, kind := range []string{"error", "warning"} {
		find := ann.FindError
		if kind == "warning" {
			find = ann.FindWarning
		}
		for _, m := range *find(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
			t.Errorf("%s at %s: %v", kind, *m.Id, m.Entry.Data)
		}
	}
}
