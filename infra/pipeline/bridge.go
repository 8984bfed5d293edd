package pipeline

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/effectively-once/webhooks/internal/source"
)

// Bridge settings.
const (
	// BridgeTimeout: one Accept (an UpdateItem, a few chunk PutItems at
	// most) and one SendMessage; nobody waits on the answer (the invocation
	// is asynchronous), so the SDK's own retries of a throttled table get
	// room.
	BridgeTimeout = 30 * time.Second
	// BridgeAsyncRetries and BridgeAsyncMaxAge: Lambda's asynchronous
	// invocation of the function retries a failed invocation twice (the
	// most it allows) for up to 6 hours (the most it allows), then puts
	// the event in the bridge DLQ.
	BridgeAsyncRetries = 2
	BridgeAsyncMaxAge  = 6 * time.Hour
	// BridgeTargetRetries and BridgeTargetMaxAge: EventBridge's own retries
	// when it cannot invoke the function at all (throttled, or the function
	// missing); the most it allows: 185 attempts within 24 hours, then the
	// bridge DLQ.
	BridgeTargetRetries = 185
	BridgeTargetMaxAge  = 24 * time.Hour
	// BridgeDLQRetention is how long a dead letter waits (SQS's maximum).
	BridgeDLQRetention = 14 * 24 * time.Hour
)

// BridgeResources are the EventBridge intake's parts.
type BridgeResources struct {
	Function *Function
	// DLQ receives events the rules could not deliver and events whose
	// invocations all failed; the reconciler redelivers them.
	DLQ awssqs.Queue
	// Rules by source name: one on each source's partner event bus.
	Rules map[string]awsevents.Rule
}

// eventBridgeSources lists the configured sources whose delivery includes
// eventbridge, in configuration order.
func (p *Props) eventBridgeSources() []Source {
	var out []Source
	for _, s := range p.Sources {
		if (source.Source{Delivery: s.Delivery}).EventBridge() {
			out = append(out, s)
		}
	}
	return out
}

// bridge creates the EventBridge intake when some source has eventbridge
// delivery: the bridge DLQ, the function (asynchronous retries, then the
// DLQ), and per source a rule on its partner event bus whose pattern is
// exactly its partner event source and this account, targeting the
// function (EventBridge retries, then the DLQ). Only those two paths may
// write the DLQ (its policy), and the reconciler, which sweeps it,
// redelivers only what the function's role wrote (BRIDGE_DLQ_SENDERS).
//
// The partner event bus is not created here: it appears, with the event
// source's name, when the user associates the partner event source in the
// EventBridge console (infra/README.md), and the rule refers to it by name.
func (s *Pipeline) bridge(assets map[string]asset, sourcesDoc *string) error {
	srcs := s.props().eventBridgeSources()
	if len(srcs) == 0 {
		return nil
	}
	dlq := awssqs.NewQueue(s, jsii.String("BridgeDLQ"), &awssqs.QueueProps{
		QueueName:       jsii.String(s.prefix() + "bridge-dlq"),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(BridgeDLQRetention.Seconds())),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
	})
	cdknag.NagSuppressions_AddResourceSuppressions(dlq, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SQS3"),
		Reason: jsii.String("This queue is itself a dead-letter queue: the bridge function's asynchronous-invocation DLQ and " +
			"the EventBridge rules' target DLQ (neither is an SQS redrive, which is what the rule looks for). Its messages are " +
			"redelivered by the reconciler, which deletes each only once the ledger accepted it."),
	}}, jsii.Bool(false))

	fn, err := s.newFunction(assets[Bridge], functionProps{
		Name: Bridge,
		// 256 MB: one event of at most 256 KB (EventBridge's limit) parsed
		// and written; DynamoDB and SQS round trips, not CPU.
		MemoryMB: 256,
		Timeout:  awscdk.Duration_Seconds(jsii.Number(BridgeTimeout.Seconds())),
		Env: map[string]*string{
			"TABLE_NAME": s.Table.TableName(), "EVENTS_QUEUE_URL": s.Events.Queue.QueueUrl(), "SOURCES": sourcesDoc,
		},
		// Lambda puts an event whose invocations all failed here (the
		// function's role needs sqs:SendMessage on it; CDK grants exactly that).
		DeadLetterQueue: dlq,
	})
	if err != nil {
		return err
	}
	fn.Fn.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(BridgeAsyncRetries),
		MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(BridgeAsyncMaxAge.Seconds())),
	})
	// The bridge's code (intake.HandleEventBridge): Accept is one
	// conditional UpdateItem plus a PutItem per payload chunk, under the
	// event's partition key, and only for the sources it serves (the
	// EventBridge path has no signature, so it gets the narrowest grant);
	// then one SendMessage to the events queue. No body markers: EventBridge
	// ids come from AWS, so ClaimBody is never asked. No secrets.
	evs := sourceKeys(pkEvents, sourceNames(srcs))
	fn.grantWrites(s.Table.TableArn(), ledgerWrites{ddbPut: evs, ddbUpdate: evs})
	// Accept reads the row a refused write names only when the refusal
	// returned no item (see internal/ledger's package doc).
	fn.grantReads(s.Table.TableArn(), evs...)
	s.Events.Queue.Grant(fn.Role, jsii.String(sqsSend))

	res := &BridgeResources{Function: fn, DLQ: dlq, Rules: map[string]awsevents.Rule{}}
	var ruleArns []*string
	for _, src := range srcs {
		id := pascal(src.Name)
		bus := awsevents.EventBus_FromEventBusName(s, jsii.String("PartnerBus"+id), jsii.String(src.EventSource))
		// Enabled whatever the function's build state: an event that
		// matches no rule is dropped by EventBridge, whereas one the
		// function fails on waits in the DLQ for the reconciler.
		res.Rules[src.Name] = awsevents.NewRule(s, jsii.String("BridgeRule"+id), &awsevents.RuleProps{
			EventBus:    bus,
			RuleName:    jsii.String(s.prefix() + "bridge-" + src.Name),
			Description: jsii.String("Every event of " + src.Kind + " partner event source " + src.EventSource + " to the bridge (source " + src.Name + ")"),
			// Exactly the partner event source: nothing broader, whatever
			// else is ever put on this bus. And, in depth, only events of
			// this account: EventBridge sets account, not the sender
			// (PutEvents and PutPartnerEvents have no such field); a
			// partner's events here carry the id of the account its partner
			// event source was made for, this one, so an event another
			// account manages to put on this bus matches nothing.
			EventPattern: &awsevents.EventPattern{Source: jsii.Strings(src.EventSource), Account: &[]*string{awscdk.Stack_Of(s).Account()}},
			Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn.Fn, &awseventstargets.LambdaFunctionProps{
				DeadLetterQueue: dlq,
				RetryAttempts:   jsii.Number(BridgeTargetRetries),
				MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(BridgeTargetMaxAge.Seconds())),
			})},
		})
		ruleArns = append(ruleArns, res.Rules[src.Name].RuleArn())
	}
	s.Bridge = res
	s.Functions[Bridge] = fn

	// Who may write the DLQ. Its messages are redelivered as partner
	// events, with no signature to check, so only the bridge's failure
	// paths may send: Lambda puts an event whose asynchronous invocations
	// all failed there with the function's role (aws:PrincipalArn is the
	// role's ARN for any of its sessions), and EventBridge puts an event
	// it could not deliver there as events.amazonaws.com on behalf of a
	// bridge rule (aws:SourceArn, which only a service acting for a
	// resource sets; the Allow statements CDK added per rule). Anyone
	// else, whatever their own IAM policy grants, is denied: an explicit
	// Deny in the queue policy wins. The two keys are ANDed and a negated
	// operator is true when its key is absent, so a request is denied
	// unless it is the bridge's role or carries a bridge rule's ARN.
	dlq.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("OnlyTheBridgeFailurePathsSend"),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings(sqsSend),
		Resources:  &[]*string{dlq.QueueArn()},
		Conditions: &map[string]any{"ArnNotEquals": map[string]any{
			"aws:PrincipalArn": fn.Role.RoleArn(),
			"aws:SourceArn":    ruleArns,
		}},
	}))

	// The reconciler redelivers the DLQ's events through the bridge's
	// accept path (its own ledger and events-queue grants cover that): it
	// receives and deletes here, and reads the depth.
	re := s.Functions[Reconciler]
	re.Fn.AddEnvironment(jsii.String("BRIDGE_DLQ_URL"), dlq.QueueUrl(), nil)
	// And it redelivers only what the bridge's role wrote, as SQS names the
	// sender of each message (SenderId "<role id>:<session>"): the role's
	// unique id, plus any sender the context adds (bridgeDlqSenders).
	senders := []*string{fn.Role.RoleId()}
	for _, id := range s.Props.BridgeDLQSenders {
		senders = append(senders, jsii.String(id))
	}
	re.Fn.AddEnvironment(jsii.String("BRIDGE_DLQ_SENDERS"), awscdk.Fn_Join(jsii.String(","), &senders), nil)
	dlq.Grant(re.Role, jsii.String(sqsReceive), jsii.String(sqsDelete), jsii.String(sqsAttributes))
	return nil
}
