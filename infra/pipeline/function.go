package pipeline

import (
	"sort"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// functionProps describes one Lambda of the pipeline.
type functionProps struct {
	// Name is the function's short name ("intake"); its code is the
	// Makefile's build/<Name>/bootstrap.
	Name string
	// MemoryMB and Timeout are chosen per function; the caller writes why.
	MemoryMB int
	Timeout  awscdk.Duration
	// Env is the function's environment (the common variables are added).
	Env map[string]*string
	// DeadLetterQueue, when set, receives the events of asynchronous
	// invocations that failed every attempt.
	DeadLetterQueue awssqs.IQueue
	// ReservedConcurrency, when above 0, reserves (and caps) that many
	// concurrent executions for the function; 0 leaves it in the account's
	// unreserved pool.
	ReservedConcurrency int
}

// Function is a Lambda with its own role and log group: the role starts
// empty (no managed policy) and every permission is a Grant the construct
// adds for an action the code performs.
type Function struct {
	// Scope holds the function, its role and its log group.
	Scope    constructs.Construct
	Fn       awslambda.Function
	Role     awsiam.Role
	LogGroup awslogs.LogGroup
	// Built is false when the code is a placeholder (no binary yet).
	Built bool
}

var retentionByDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

var appLogLevel = map[string]awslambda.ApplicationLogLevel{
	"debug": awslambda.ApplicationLogLevel_DEBUG, "info": awslambda.ApplicationLogLevel_INFO,
	"warn": awslambda.ApplicationLogLevel_WARN, "error": awslambda.ApplicationLogLevel_ERROR,
}

// newFunction creates the function from its code, its role and its log
// group.
func (s *Pipeline) newFunction(code asset, p functionProps) (f *Function, err error) {
	cfg := s.props()
	c := constructs.NewConstruct(s, jsii.String(pascal(p.Name)))
	dir, built := code.dir, code.built
	name := s.prefix() + p.Name
	if !built {
		awscdk.Annotations_Of(c).AddWarningV2(jsii.String("webhooks:not-built"), jsii.String("the "+p.Name+
			" function's bootstrap does not exist: synthesized with a placeholder (build it first; a reconciler without code keeps its schedule disabled)"), nil)
	}
	logs := awslogs.NewLogGroup(c, jsii.String("Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/" + name),
		Retention:     retentionByDays[cfg.LogRetentionDays],
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := awsiam.NewRole(c, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Runs the " + name + " function; holds only the grants its code needs"),
	})
	// The log group exists before the function, so the role needs no
	// logs:CreateLogGroup: only streams and events in this one group.
	logs.Grant(role, jsii.String("logs:CreateLogStream"), jsii.String("logs:PutLogEvents"))

	env := environment(cfg.commonSettings())
	for k, v := range p.Env {
		env[k] = v
	}
	tracing := awslambda.Tracing_DISABLED
	if cfg.Tracing {
		tracing = awslambda.Tracing_ACTIVE
	}
	var reserved *float64
	if p.ReservedConcurrency > 0 {
		reserved = jsii.Number(float64(p.ReservedConcurrency))
	}
	var lambdaCode awslambda.Code
	if code.build == nil {
		lambdaCode = awslambda.Code_FromAsset(jsii.String(dir), nil)
	} else {
		lambdaCode = code.build.code()
		// CDK bundles while the function is created: a failed build
		// panics through jsii, and is returned as the build's own error.
		defer func() {
			if r := recover(); r != nil {
				if code.build.err == nil {
					panic(r)
				}
				f, err = nil, &PropError{Prop: "Build", Err: code.build.err}
			}
		}()
	}
	fn := awslambda.NewFunction(c, jsii.String("Function"), &awslambda.FunctionProps{
		FunctionName: jsii.String(name),
		Description:  jsii.String("effectively-once webhooks: " + p.Name + " (" + cfg.Stage + ")"),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         lambdaCode,
		MemorySize:   jsii.Number(float64(p.MemoryMB)),
		Timeout:      p.Timeout,
		Role:         role,
		LogGroup:     logs,
		// The functions log slog JSON to stdout; JSON format keeps those lines
		// structured (and the embedded metrics readable) and lets Lambda
		// drop levels below LOG_LEVEL.
		LoggingFormat:         awslambda.LoggingFormat_JSON,
		ApplicationLogLevelV2: appLogLevel[cfg.LogLevel],
		SystemLogLevelV2:      awslambda.SystemLogLevel_INFO,
		Tracing:               tracing,
		Environment:           &env,
		DeadLetterQueue:       p.DeadLetterQueue,
		// nil (no reservation) unless ReservedConcurrency is set.
		ReservedConcurrentExecutions: reserved,
	})
	if cfg.Tracing {
		cdknag.NagSuppressions_AddResourceSuppressions(role, &[]*cdknag.NagPackSuppression{{
			Id:        jsii.String("AwsSolutions-IAM5"),
			Reason:    jsii.String("X-Ray tracing (on by the tracing context flag): xray:PutTraceSegments and xray:PutTelemetryRecords do not support resource-level permissions, so AWS requires Resource *."),
			AppliesTo: &[]any{"Resource::*"},
		}}, jsii.Bool(true))
	}
	return &Function{Scope: c, Fn: fn, Role: role, LogGroup: logs, Built: built}, nil
}

// grantOn adds one statement with exactly these actions on exactly these
// resources to the function's role.
func (f *Function) grantOn(actions []string, resources ...*string) {
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      f.Role,
		Actions:      jsii.Strings(actions...),
		ResourceArns: &resources,
	})
}

// grantReads lets the function GetItem the ledger's items only under the
// partition key patterns its code reads, with the same condition as
// grantWrites (GetItem names one partition key, which IAM checks).
func (f *Function) grantReads(table *string, patterns ...string) {
	f.grantWrites(table, ledgerWrites{ddbGet: patterns})
}

// grantWrites lets the function write the ledger only under the partition
// keys it owns: per action, one statement on the table with
// ForAllValues:StringLike on dynamodb:LeadingKeys (the partition key of
// every item the request writes: each item of a TransactWriteItems or
// BatchWriteItem is checked on its own). ForAllValues is also true when the
// key is absent, so a Null condition requires it: a write whose keys IAM
// cannot see is refused rather than allowed.
func (f *Function) grantWrites(table *string, w ledgerWrites) {
	actions := make([]string, 0, len(w))
	for a := range w {
		actions = append(actions, a)
	}
	sort.Strings(actions) // a stable template
	for _, a := range actions {
		f.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(a),
			Resources: &[]*string{table},
			Conditions: &map[string]any{
				"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": w[a]},
				"Null":                    map[string]any{"dynamodb:LeadingKeys": "false"},
			},
		}))
	}
}
