// Package stack provides our CDK stack: the effectively-once webhook
// pipeline (package pipeline's construct) for one stage, configured from
// CDK context (FromContext), with the stack's outputs.
package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// Stack is the deployed pipeline of one stage: the stack, the context it
// was built from, and the construct with everything it created.
type Stack struct {
	awscdk.Stack
	Config Config
	*pipeline.Pipeline
}

// New builds the stack for cfg: it maps cfg to the construct's props and
// instantiates the construct, then adds the outputs.
//
// The construct's id is "Default", which CDK leaves out of logical ids, so
// every resource keeps the logical id it had when the stack created them
// itself (a moved id would make CloudFormation replace the resource, and
// the named, retained ledger table cannot be replaced).
func New(scope constructs.Construct, cfg Config, props *awscdk.StackProps) (*Stack, error) {
	if cfg.Assets == nil && cfg.Build == nil {
		return nil, fmt.Errorf("%w: no asset resolver and no build", ErrConfig)
	}
	pp := cfg.Props()
	if err := contextError(pp.Validate()); err != nil {
		return nil, err
	}
	if props == nil {
		props = &awscdk.StackProps{}
	}
	if props.StackName == nil {
		props.StackName = jsii.String(cfg.StackName())
	}
	if props.Description == nil {
		props.Description = jsii.String("Effectively-once webhooks (" + cfg.Stage + "): intake, ledger, processor, outbox dispatcher, reconciler")
	}
	st := awscdk.NewStack(scope, jsii.String(cfg.StackName()), props)
	awscdk.Tags_Of(st).Add(jsii.String("app"), jsii.String("effectively-once-webhooks"), nil)
	awscdk.Tags_Of(st).Add(jsii.String("stage"), jsii.String(cfg.Stage), nil)
	p, err := pipeline.New(st, "Default", &pp)
	if err != nil {
		return nil, contextError(err)
	}
	s := &Stack{Stack: st, Config: cfg, Pipeline: p}
	s.outputs()
	return s, nil
}

// AddChecks applies cdk-nag's AwsSolutions rules to everything under scope
// (pipeline.AddChecks).
func AddChecks(scope constructs.IConstruct, reports bool) { pipeline.AddChecks(scope, reports) }

func (s *Stack) outputs() {
	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("WebhookBaseUrl", "Append the source name: POST <this><source>", s.URL)
	for _, src := range s.Config.Sources {
		id := pipeline.PascalCase(src.Name)
		if u := s.SourceURL(src.Name); u != nil {
			out("SourceUrl"+id, "Webhook URL to give "+src.Kind+" for source "+src.Name, u)
		}
		if arn, ok := s.SourceSecrets[src.Name]; ok {
			out("SourceSecretArn"+id, "Secret that holds the signing secret of source "+src.Name, arn)
		}
		if arn, ok := s.TruthSecrets[src.Name]; ok {
			out("TruthSecretArn"+id, "Secret that holds the API key of source "+src.Name+"'s source of truth", arn)
		}
	}
	out("TableName", "Ledger table", s.Table.TableName())
	out("EventsQueueUrl", "Events queue", s.Events.Queue.QueueUrl())
	out("EventsDlqUrl", "Events dead-letter queue (redrive from the console)", s.Events.DLQ.QueueUrl())
	out("EffectsQueueUrl", "Effects (outbox) queue", s.Effects.Queue.QueueUrl())
	out("EffectsDlqUrl", "Effects dead-letter queue (redrive from the console)", s.Effects.DLQ.QueueUrl())
	if s.Bridge != nil {
		out("BridgeDlqUrl", "EventBridge bridge dead-letter queue (the reconciler redelivers its events)", s.Bridge.DLQ.QueueUrl())
	}
	if s.LedgerTrail != nil {
		out("LedgerTrailArn", "CloudTrail trail that records every write to the ledger table", s.LedgerTrail.Trail.TrailArn())
		out("LedgerTrailBucketName", "Bucket of the ledger trail's log files", s.LedgerTrail.Bucket.BucketName())
	}
	if w := s.Warehouse; w != nil {
		out("WarehouseBucketName", "Bucket of the warehouse's change records (under "+w.Prefix+"/)", w.Bucket.BucketName())
		out("WarehouseDatabase", "Glue database of the warehouse", jsii.String(w.DatabaseName))
		out("WarehouseTable", "Glue table over the change records (the current_state named query creates the view)", jsii.String(w.TableName))
		out("WarehouseWorkGroup", "Athena workgroup to query the warehouse in", jsii.String(w.WorkGroupName))
	}
	out("AlarmTopicArn", "SNS topic every alarm notifies", s.AlarmTopic.TopicArn())
	out("DashboardUrl", "CloudWatch dashboard", jsii.String("https://"+*awscdk.Aws_REGION()+
		".console.aws.amazon.com/cloudwatch/home?region="+*awscdk.Aws_REGION()+"#dashboards:name="+s.DashboardName))
}
