package pipeline

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// privateBucket is the baseline of every bucket the construct creates:
// S3-managed encryption (no key to manage, and no KMS grant for the
// functions or for log delivery, which cannot use the AWS managed key),
// TLS only, closed to the public, object ownership enforced (no ACLs),
// kept when the stack is deleted; versioned and expired by its lifecycle
// rules as the caller says.
func privateBucket(scope constructs.Construct, id string, versioned bool, rules ...*awss3.LifecycleRule) awss3.Bucket {
	props := &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
	}
	if versioned {
		props.Versioned = jsii.Bool(true)
	}
	if len(rules) > 0 {
		props.LifecycleRules = &rules
	}
	return awss3.NewBucket(scope, jsii.String(id), props)
}
