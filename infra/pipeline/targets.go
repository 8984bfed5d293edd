package pipeline

import (
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/effectively-once/webhooks/internal/outbox"
)

// The actions the dispatcher's calls to each kind of AWS target need
// (internal/outbox, target_*.go), as the Service Authorization Reference
// lists them: each on the target's own resource type.
const (
	// Lambda: Invoke is authorized as lambda:InvokeFunction on the ARN it
	// names; an unqualified ARN's grant covers unqualified invocations
	// only, so the grant is on the target's ARN exactly as configured
	// (with its version or alias when it has one), which is the ARN the
	// effect invokes.
	lambdaInvoke = "lambda:InvokeFunction"
	// SQS: the effect resolves the queue's URL (GetQueueUrl, by name and
	// owner), reads its MaximumMessageSize (GetQueueAttributes) and sends
	// (SendMessage); all three are authorized on the queue's ARN.
	sqsGetURL = "sqs:GetQueueUrl"
	// KMS: a producer to a queue encrypted with a customer managed key
	// needs a data key (kms:GenerateDataKey) and kms:Decrypt on the key.
	kmsGenerateDataKey = "kms:GenerateDataKey"
	kmsDecrypt         = "kms:Decrypt"
	// EventBridge: PutEvents is authorized on the event bus's ARN.
	eventsPut = "events:PutEvents"
	// Step Functions: DescribeStateMachine (is it STANDARD?) and
	// StartExecution on the state machine's ARN; DescribeExecution (the
	// status lookup, and the read of an execution already under the
	// operation's name) on the execution's ARN,
	// arn:<partition>:states:<region>:<account>:execution:<state machine name>:<execution name>.
	statesDescribeMachine   = "states:DescribeStateMachine"
	statesStart             = "states:StartExecution"
	statesDescribeExecution = "states:DescribeExecution"
)

// executionsOf is the ARN pattern of every execution of a state machine:
// the executions the dispatcher reads are named after operation ids, which
// are not known at deploy time, so the name is the one wildcard a target
// grant holds.
func executionsOf(t outbox.Target) string {
	return "arn:" + t.Partition + ":states:" + t.Region + ":" + t.Account + ":execution:" + t.Name + ":*"
}

// grantTargets gives the dispatcher exactly the actions each configured
// AWS target's calls need, on that target only: one statement per target
// (and per resource type), never a service-wide grant. The reconciler
// reads the same EFFECTS document but never calls a target (its drift
// check asks HTTP status endpoints only), so it gets none of them.
func (s *Pipeline) grantTargets() {
	di := s.Functions[Dispatcher]
	for _, e := range s.props().Effects {
		if e.Target == "" {
			continue
		}
		// Checked by effectsDocument before anything was created.
		t, err := outbox.ParseTarget(e.Target, "")
		if err != nil {
			panic("pipeline: effect " + e.Kind + ": target checked at New: " + err.Error())
		}
		switch t.Kind {
		case outbox.TargetLambda:
			di.grantOn([]string{lambdaInvoke}, jsii.String(t.ARN))
		case outbox.TargetSQS:
			di.grantOn([]string{sqsAttributes, sqsGetURL, sqsSend}, jsii.String(t.ARN))
			if e.KMSKeyArn != "" {
				di.grantOn([]string{kmsDecrypt, kmsGenerateDataKey}, jsii.String(e.KMSKeyArn))
			}
		case outbox.TargetEventBridge:
			di.grantOn([]string{eventsPut}, jsii.String(t.ARN))
		case outbox.TargetStepFunctions:
			di.grantOn([]string{statesDescribeMachine, statesStart}, jsii.String(t.ARN))
			executions := executionsOf(t)
			di.grantOn([]string{statesDescribeExecution}, jsii.String(executions))
			cdknag.NagSuppressions_AddResourceSuppressions(di.Role, &[]*cdknag.NagPackSuppression{{
				Id: jsii.String("AwsSolutions-IAM5"),
				Reason: jsii.String("Effect " + e.Kind + ": the dispatcher reads only executions of state machine " + t.Name +
					" (DescribeExecution, its status lookup), each named after an operation id that is not known at deploy time; " +
					"the execution name is the only wildcard, read only."),
				AppliesTo: &[]any{"Resource::" + executions},
			}}, jsii.Bool(true))
		}
	}
}
