// Package pipeline provides the effectively-once webhook pipeline as one
// CDK construct, for a team to instantiate in its own CDK app:
//
//	p, err := pipeline.New(stack, "Webhooks", &pipeline.Props{
//		Sources: []pipeline.Source{{Name: "shop-stripe", Kind: "stripe"}},
//		Effects: []pipeline.Effect{{Kind: "ship_order", URL: "https://shipping.example/orders", Scopes: []string{"shop-stripe"}}},
//	})
//
// It creates the HTTP API, the functions (intake, processor, dispatcher,
// reconciler, and the bridge when a source delivers through EventBridge),
// the ledger table, the events and effects queues with their dead-letter
// queues, the secrets, the reconciler's schedule, alarms and a dashboard;
// it exposes them, and GrantReadState lets a team's own service read the
// canonical state.
//
// Queue shapes, timeouts and table keys come from the runtime packages
// (internal/queue, internal/ledger), the same values the local stack uses,
// so the deployed pipeline cannot drift from the one the tests run, and
// SOURCES and EFFECTS are checked by the parsers the functions use.
package pipeline

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
)

// Reconciler settings the construct gives it (the same as
// internal/config.LoadReconciler's defaults, written out so the deployed
// values are visible in the template).
const (
	ReconcilerTimeout  = 2 * time.Minute
	ReconcileEvery     = 5 * time.Minute
	ReconcileStuck     = 300 // RECONCILE_STUCK_SECONDS
	ReconcileMaxItems  = 500 // RECONCILE_MAX_ITEMS
	ReconcileBudgetSec = 90  // RECONCILE_BUDGET_SECONDS: under the 2 minute timeout
)

// DispatchMaxAttempts is the dispatcher's attempt budget per intent
// (DISPATCH_MAX_ATTEMPTS), the runtime's own default; queue.Effects sets
// the effects queue's maxReceiveCount above it.
const DispatchMaxAttempts = outbox.DefaultMaxAttempts

// IntakeTimeout: providers wait 5 s (Shopify) to 30 s for an answer, and the
// HTTP API gives up at 30 s. Past 10 s the provider has usually given up and
// will retry; intake's work is idempotent, so a late finish is harmless.
const IntakeTimeout = 10 * time.Second

// Pipeline is the deployed pipeline: what New created, for the team's own
// stack to wire (outputs, alarms of its own, grants).
type Pipeline struct {
	constructs.Construct
	// Props are the props New was given, with every default applied.
	Props Props
	// Table is the ledger: every event, projection and intent.
	Table awsdynamodb.Table
	// Events and Effects are the two queues with their dead-letter queues.
	Events, Effects QueuePair
	// API is the HTTP API (POST /webhooks/{source} to intake), and URL its
	// webhook base: a source's URL is URL + its name.
	API awsapigatewayv2.HttpApi
	URL *string
	// Functions by name (Intake, Processor, Dispatcher, Reconciler, and
	// Bridge when there is one).
	Functions map[string]*Function
	// SourceSecrets, TruthSecrets and EffectSecrets map a source name or an
	// effect kind to the secret ARN its function reads (created here or
	// given): signing secrets (intake), source-of-truth API keys
	// (reconciler), effect bearer tokens (dispatcher).
	SourceSecrets map[string]*string
	TruthSecrets  map[string]*string
	// APISecrets map a stripe source to its restricted API key (processor).
	APISecrets    map[string]*string
	EffectSecrets map[string]*string
	// Schedule runs the reconciler.
	Schedule awsevents.Rule
	// Bridge is the EventBridge intake (nil unless a source's delivery
	// includes eventbridge).
	Bridge *BridgeResources
	// LedgerTrail records the ledger table's writes (nil unless
	// Props.LedgerDataEvents; see trail.go).
	LedgerTrail *LedgerTrailResources
	// Warehouse is the change records' bucket, catalog and workgroup (nil
	// unless Props.Warehouse; see warehouse.go).
	Warehouse *WarehouseResources
	// AlarmTopic receives every alarm's state changes.
	AlarmTopic awssns.Topic
	// Dashboard is the overview dashboard, named DashboardName.
	Dashboard     awscloudwatch.Dashboard
	DashboardName string

	// region is the stack's region when it is concrete (the stack's env
	// names it), "" when it is a token resolved at deploy time: effect
	// targets must be in it (outbox.ParseEffectsIn).
	region string
}

// concreteRegion is the region of scope's stack, or "" when it is a token
// (an environment-agnostic stack) or scope is in no stack.
func concreteRegion(scope constructs.Construct) (region string) {
	defer func() {
		if recover() != nil {
			region = "" // not in a stack: New fails on its first resource anyway
		}
	}()
	r := awscdk.Stack_Of(scope).Region()
	if r == nil || *awscdk.Token_IsUnresolved(r) {
		return ""
	}
	return *r
}

// QueuePair is a queue and its dead-letter queue.
type QueuePair struct {
	Spec  queue.Spec
	Queue awssqs.Queue
	DLQ   awssqs.Queue
}

// New creates the pipeline under scope. It returns an error, and creates
// nothing usable, when props contradict themselves or name something the
// functions would refuse at their cold start (errors.Is(err, ErrProps);
// a *PropError names the prop). props may be nil only to be refused: at
// least one source is required.
func New(scope constructs.Construct, id string, props *Props) (*Pipeline, error) {
	if props == nil {
		props = &Props{}
	}
	p := props.withDefaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	s := &Pipeline{Props: p, Functions: map[string]*Function{},
		SourceSecrets: map[string]*string{}, TruthSecrets: map[string]*string{}, APISecrets: map[string]*string{}, EffectSecrets: map[string]*string{},
		region: concreteRegion(scope)}
	// Everything is decided before the first construct exists: the
	// documents are rendered and checked, and every function's code found.
	assets, err := p.assets(s.functionsToDeploy())
	if err != nil {
		return nil, err
	}
	if _, err := s.sourcesDocument(); err != nil {
		return nil, err
	}
	if _, err := s.effectsDocument(); err != nil {
		return nil, err
	}

	// Created as an override, so the *Pipeline itself is the construct
	// jsii knows: it can be passed wherever a construct is expected.
	constructs.NewConstruct_Override(s, scope, jsii.String(id))
	awscdk.Tags_Of(s).Add(jsii.String("app"), jsii.String("effectively-once-webhooks"), nil)
	awscdk.Tags_Of(s).Add(jsii.String("stage"), jsii.String(p.Stage), nil)
	s.Table = s.newTable()
	s.Events = newQueuePair(s, "Events", queue.Events(s.prefix()))
	s.Effects = newQueuePair(s, "Effects", queue.Effects(s.prefix()))
	s.secrets()

	sourcesDoc, err := s.sourcesDocument()
	if err != nil {
		return nil, err
	}
	effectsDoc, err := s.effectsDocument()
	if err != nil {
		return nil, err
	}
	if err := s.functions(assets, sourcesDoc, effectsDoc); err != nil {
		return nil, err
	}
	if err := s.bridge(assets, sourcesDoc); err != nil {
		return nil, err
	}
	s.grants()
	s.warehouse()
	s.mappings()
	s.schedule()
	s.httpAPI()
	s.ledgerTrail()
	s.alarms()
	s.dashboard()
	return s, nil
}

// asset is a function's code: a folder (built is false for the
// placeholder), or the build of its package.
type asset struct {
	dir   string
	built bool
	build *goBundler
}

// assets finds every function's code: its build with Build (the
// placeholder only when Build.Placeholder says so), else from Code.
func (p Props) assets(fns []string) (map[string]asset, error) {
	assets := map[string]asset{}
	if p.Build != nil {
		if !reflect.ValueOf(p.Code).IsZero() {
			return nil, propErr("Code", "is set beside Build: the functions are either built at synth (Build) or given (Code)")
		}
		if p.Build.Placeholder {
			ph, err := PlaceholderDir()
			if err != nil {
				return nil, &PropError{Prop: "Build.Placeholder", Err: err}
			}
			for _, fn := range fns {
				assets[fn] = asset{dir: ph}
			}
			return assets, nil
		}
		builds, err := p.Build.resolveBuild(fns)
		if err != nil {
			return nil, err
		}
		for fn, b := range builds {
			assets[fn] = asset{built: true, build: &goBundler{a: b}}
		}
		return assets, nil
	}
	code := p.Code.resolver()
	for _, fn := range fns {
		dir, built, err := code(fn)
		if err != nil {
			var pe *PropError
			if errors.As(err, &pe) {
				return nil, err
			}
			return nil, &PropError{Prop: "Code", Err: err}
		}
		assets[fn] = asset{dir: dir, built: built}
	}
	return assets, nil
}

// functionsToDeploy lists the functions this configuration deploys.
func (s *Pipeline) functionsToDeploy() []string {
	fns := []string{Intake, Processor, Dispatcher, Reconciler}
	if len(s.props().eventBridgeSources()) > 0 {
		fns = append(fns, Bridge)
	}
	return fns
}

// props returns the props with their defaults applied.
func (s *Pipeline) props() *Props { return &s.Props }

// prefix starts every physical name: "<Name>-<Stage>-".
func (s *Pipeline) prefix() string { return s.Props.Name + "-" + s.Props.Stage + "-" }

// secretName is a created secret's name: "<Name>/<Stage>/<what>/<name>".
func (s *Pipeline) secretName(what, name string) *string {
	return jsii.String(s.Props.Name + "/" + s.Props.Stage + "/" + what + "/" + name)
}

// newTable declares the ledger table exactly as ledger.TableSchema
// describes it (keys, the sparse due index and its projection), billed on
// demand or by provisioned capacity with auto scaling (Props.Billing).
func (s *Pipeline) newTable() awsdynamodb.Table {
	schema := ledger.TableSchema(s.prefix() + "ledger")
	types := map[string]awsdynamodb.AttributeType{}
	for _, a := range schema.AttributeDefinitions {
		switch a.AttributeType {
		case "N":
			types[*a.AttributeName] = awsdynamodb.AttributeType_NUMBER
		case "B":
			types[*a.AttributeName] = awsdynamodb.AttributeType_BINARY
		default:
			types[*a.AttributeName] = awsdynamodb.AttributeType_STRING
		}
	}
	attr := func(name *string) *awsdynamodb.Attribute {
		return &awsdynamodb.Attribute{Name: name, Type: types[*name]}
	}
	removal := awscdk.RemovalPolicy_RETAIN
	if s.Props.AllowTableDeletion {
		removal = awscdk.RemovalPolicy_DESTROY
	}
	prov := s.Props.Billing.Provisioned
	tp := &awsdynamodb.TableProps{
		TableName:    schema.TableName,
		PartitionKey: attr(schema.KeySchema[0].AttributeName),
		SortKey:      attr(schema.KeySchema[1].AttributeName),
		// On demand by default: webhook traffic is bursty and unplanned.
		BillingMode: awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(!s.Props.AllowTableDeletion),
		RemovalPolicy:      removal,
		// Encrypted at rest with the account's AWS managed key (aws/dynamodb):
		// visible in the template and in CloudTrail, and the functions need no
		// KMS grant for it.
		Encryption:          awsdynamodb.TableEncryption_AWS_MANAGED,
		TimeToLiveAttribute: jsii.String(ledger.TTLAttribute),
	}
	if prov != nil {
		// The template holds the minimum; auto scaling moves the capacity
		// between min and max, and a deploy that leaves these values alone
		// does not reset what it set.
		tp.BillingMode = awsdynamodb.BillingMode_PROVISIONED
		tp.ReadCapacity = jsii.Number(float64(prov.Read.Min))
		tp.WriteCapacity = jsii.Number(float64(prov.Write.Min))
	}
	t := awsdynamodb.NewTable(s, jsii.String("Ledger"), tp)
	for _, g := range schema.GlobalSecondaryIndexes {
		gp := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:        g.IndexName,
			PartitionKey:     attr(g.KeySchema[0].AttributeName),
			SortKey:          attr(g.KeySchema[1].AttributeName),
			ProjectionType:   awsdynamodb.ProjectionType(g.Projection.ProjectionType),
			NonKeyAttributes: jsii.Strings(g.Projection.NonKeyAttributes...),
		}
		if prov != nil {
			gp.ReadCapacity = jsii.Number(float64(prov.IndexRead.Min))
			gp.WriteCapacity = jsii.Number(float64(prov.IndexWrite.Min))
		}
		t.AddGlobalSecondaryIndex(gp)
	}
	if prov != nil {
		target := &awsdynamodb.UtilizationScalingProps{TargetUtilizationPercent: jsii.Number(float64(prov.TargetUtilizationPercent))}
		scale := func(c Capacity) *awsdynamodb.EnableScalingProps {
			return &awsdynamodb.EnableScalingProps{MinCapacity: jsii.Number(float64(c.Min)), MaxCapacity: jsii.Number(float64(c.Max))}
		}
		t.AutoScaleReadCapacity(scale(prov.Read)).ScaleOnUtilization(target)
		t.AutoScaleWriteCapacity(scale(prov.Write)).ScaleOnUtilization(target)
		for _, g := range schema.GlobalSecondaryIndexes {
			t.AutoScaleGlobalSecondaryIndexReadCapacity(g.IndexName, scale(prov.IndexRead)).ScaleOnUtilization(target)
			t.AutoScaleGlobalSecondaryIndexWriteCapacity(g.IndexName, scale(prov.IndexWrite)).ScaleOnUtilization(target)
		}
	}
	return t
}

// newQueuePair declares a queue and its DLQ from the shared spec: SSE with
// SQS-owned keys, TLS required, and a DLQ that allows the console's "start
// DLQ redrive" back to this one queue only.
func newQueuePair(scope constructs.Construct, id string, spec queue.Spec) QueuePair {
	st := awscdk.Stack_Of(scope)
	// The source queue's ARN is built from its name, not referenced: the DLQ's
	// redrive allow policy and the queue's redrive policy would otherwise
	// depend on each other.
	sourceArn := st.FormatArn(&awscdk.ArnComponents{Service: jsii.String("sqs"), Resource: jsii.String(spec.Name)})
	dlq := awssqs.NewQueue(scope, jsii.String(id+"DLQ"), &awssqs.QueueProps{
		QueueName:       jsii.String(spec.DLQName()),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(spec.DLQRetention.Seconds())),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RedriveAllowPolicy: &awssqs.RedriveAllowPolicy{
			RedrivePermission: awssqs.RedrivePermission_BY_QUEUE,
			SourceQueues:      &[]awssqs.IQueue{awssqs.Queue_FromQueueArn(scope, jsii.String(id+"Source"), sourceArn)},
		},
	})
	q := awssqs.NewQueue(scope, jsii.String(id+"Queue"), &awssqs.QueueProps{
		QueueName:         jsii.String(spec.Name),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(spec.VisibilityTimeout.Seconds())),
		// Pointers only; a message older than this has been through every
		// receive long ago (4 days is SQS's default, written out).
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(4)),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(float64(spec.MaxReceiveCount))},
	})
	return QueuePair{Spec: spec, Queue: q, DLQ: dlq}
}

// Which secrets a configuration has, decided from the props alone (so the
// documents can be checked before anything is created): a source's signing
// secret when given, or when its deliveries are signed (SNS verifies AWS's
// signing certificate, and an EventBridge-only source has no webhook); a
// truth's API key when given, asked for, or a Stripe truth; an api's key
// always; an effect's token when given or asked for.
func hasSourceSecret(src Source) bool { return src.SecretArn != "" || signed(src) }
func hasTruthSecret(src Source) bool {
	t := src.Truth
	return t != nil && (t.SecretArn != "" || t.Secret || t.Kind == "stripe")
}
func hasAPISecret(src Source) bool  { return src.API != nil }
func hasEffectSecret(e Effect) bool { return e.SecretArn != "" || e.Secret }

// secrets creates a secret for every source and secret-bearing effect that
// names no ARN (validate has refused a missing one when GivenSecretsOnly).
// Secrets Manager stores them encrypted with the account's
// aws/secretsmanager key.
func (s *Pipeline) secrets() {
	for _, src := range s.props().Sources {
		switch {
		case !hasSourceSecret(src):
		case src.SecretArn != "":
			s.SourceSecrets[src.Name] = jsii.String(src.SecretArn)
		default:
			sec := awssecretsmanager.NewSecret(s, jsii.String("SourceSecret"+pascal(src.Name)), &awssecretsmanager.SecretProps{
				SecretName: s.secretName("source", src.Name),
				Description: jsii.String("Signing secret of webhook source " + src.Name + " (" + src.Kind + "). Created with a random " +
					"placeholder: put the provider's secret here (infra/README.md); several active secrets as a JSON array during rotation."),
			})
			rotationNotApplicable(sec, "source "+src.Name)
			s.SourceSecrets[src.Name] = sec.SecretArn()
		}
	}
	for _, src := range s.props().Sources {
		switch t := src.Truth; {
		case !hasTruthSecret(src):
		case t.SecretArn != "":
			s.TruthSecrets[src.Name] = jsii.String(t.SecretArn)
		default:
			sec := awssecretsmanager.NewSecret(s, jsii.String("TruthSecret"+pascal(src.Name)), &awssecretsmanager.SecretProps{
				SecretName: s.secretName("truth", src.Name),
				Description: jsii.String("API key the reconciler uses to read source " + src.Name + "'s current facts (" + t.Kind +
					"; for Stripe a restricted key that can read events). Created with a random placeholder: put the key here."),
			})
			rotationNotApplicable(sec, "source-of-truth "+src.Name)
			s.TruthSecrets[src.Name] = sec.SecretArn()
		}
	}
	for _, src := range s.props().Sources {
		switch a := src.API; {
		case !hasAPISecret(src):
		case a.SecretArn != "":
			s.APISecrets[src.Name] = jsii.String(a.SecretArn)
		default:
			sec := awssecretsmanager.NewSecret(s, jsii.String("APISecret"+pascal(src.Name)), &awssecretsmanager.SecretProps{
				SecretName: s.secretName("api", src.Name),
				Description: jsii.String("Restricted API key the processor uses to fetch the objects thin events of source " + src.Name +
					" name (Stripe: read on subscriptions, invoices and payment intents). Created with a random placeholder: put the key here."),
			})
			rotationNotApplicable(sec, "provider API key of "+src.Name)
			s.APISecrets[src.Name] = sec.SecretArn()
		}
	}
	for _, e := range s.props().Effects {
		switch {
		case !hasEffectSecret(e):
		case e.SecretArn != "":
			s.EffectSecrets[e.Kind] = jsii.String(e.SecretArn)
		default:
			sec := awssecretsmanager.NewSecret(s, jsii.String("EffectSecret"+pascal(e.Kind)), &awssecretsmanager.SecretProps{
				SecretName:  s.secretName("effect", e.Kind),
				Description: jsii.String("Bearer token for effect " + e.Kind + ". Created with a random placeholder: put the downstream's token here."),
			})
			rotationNotApplicable(sec, "effect "+e.Kind)
			s.EffectSecrets[e.Kind] = sec.SecretArn()
		}
	}
}

func rotationNotApplicable(sec awssecretsmanager.Secret, what string) {
	cdknag.NagSuppressions_AddResourceSuppressions(sec, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-SMG4"),
		Reason: jsii.String("The " + what + " secret is issued by a third party (the provider's dashboard or the downstream), " +
			"so no rotation Lambda can create a new value; it is rotated there and pasted here, and the functions accept " +
			"several active values during the overlap."),
	}}, jsii.Bool(false))
}

// placeholderARN stands in for a token while the documents are validated
// with the runtime's own parsers; it is as long as a created secret's ARN
// in a long region name, so the size check below errs on the safe side.
const placeholderARN = "arn:aws:secretsmanager:ap-southeast-2:000000000000:secret:webhooks/stagename/source/placeholder-AbCdEf"

// maxDocumentBytes bounds SOURCES and EFFECTS: Lambda's environment holds
// 4 KB per function, and the other variables need the rest.
const maxDocumentBytes = 3300

// checkArn renders a secret as placeholderARN, for the checks.
func checkArn(map[string]*string, string) string { return placeholderARN }

// realArn renders a secret as its ARN (a token for a created one).
func realArn(m map[string]*string, name string) string { return *m[name] }

// sourcesDocument renders SOURCES as package source reads it, after
// checking it with source.Parse; before the secrets exist (check) every
// secret is placeholderARN.
func (s *Pipeline) sourcesDocument() (*string, error) {
	render := func(arn func(map[string]*string, string) string) ([]byte, error) {
		doc := struct {
			Sources []source.Source `json:"sources"`
		}{}
		for _, src := range s.props().Sources {
			out := source.Source{Name: src.Name, Kind: src.Kind, Secrets: []string{},
				ToleranceSeconds: src.ToleranceSeconds, MaxBodyBytes: src.MaxBodyBytes, Options: src.Options,
				Delivery: src.Delivery, EventSource: src.EventSource}
			if hasSourceSecret(src) {
				out.Secrets = append(out.Secrets, arn(s.SourceSecrets, src.Name))
			}
			if t := src.Truth; t != nil {
				out.Truth = &source.Truth{Kind: t.Kind, URL: t.URL, LookbackMinutes: t.LookbackMinutes}
				if hasTruthSecret(src) {
					out.Truth.Secret = arn(s.TruthSecrets, src.Name)
				}
			}
			if a := src.API; a != nil {
				out.API = &source.API{Secret: arn(s.APISecrets, src.Name), URL: a.URL, TimeoutSeconds: a.TimeoutSeconds}
			}
			doc.Sources = append(doc.Sources, out)
		}
		return json.Marshal(doc)
	}
	check, _ := render(checkArn)
	if _, err := source.Parse(check); err != nil {
		return nil, propErr("Sources", "%v", err)
	}
	// Lambda allows 4 KB of environment per function; the reconciler's four
	// queue URLs and settings take about 600 bytes of it.
	if len(check) > maxDocumentBytes {
		return nil, propErr("Sources", "the SOURCES document is %d bytes, over the %d that fit in a Lambda environment", len(check), maxDocumentBytes)
	}
	if s.Construct == nil {
		return nil, nil // checked only: the secrets do not exist yet
	}
	b, err := render(realArn)
	return jsii.String(string(b)), err
}

// effectsDocument renders EFFECTS as package outbox reads it, after
// checking it with outbox.ParseEffectsIn in the stack's region when that
// is concrete (outbox.ParseEffects otherwise: a target's region is then
// checked by the dispatcher at its start). With no effect configured it is
// the empty list, which the dispatcher refuses at start: its mapping stays
// disabled until effects exist.
func (s *Pipeline) effectsDocument() (*string, error) {
	render := func(arn func(map[string]*string, string) string) ([]byte, error) {
		out := struct {
			Effects []outbox.EffectConfig `json:"effects"`
		}{Effects: []outbox.EffectConfig{}}
		for _, e := range s.props().Effects {
			ec := outbox.EffectConfig{Kind: e.Kind, URL: e.URL, Target: e.Target, StatusURL: e.StatusURL,
				TimeoutSeconds: e.TimeoutSeconds, IdempotencyWindowHours: e.IdempotencyWindowHours, Scopes: e.Scopes}
			if hasEffectSecret(e) {
				ec.Secret = arn(s.EffectSecrets, e.Kind)
			}
			out.Effects = append(out.Effects, ec)
		}
		return json.Marshal(out)
	}
	if len(s.props().Effects) > 0 {
		check, _ := render(checkArn)
		if _, err := outbox.ParseEffectsIn(check, s.region); err != nil {
			return nil, propErr("Effects", "%v", err)
		}
		if len(check) > maxDocumentBytes {
			return nil, propErr("Effects", "the EFFECTS document is %d bytes, over the %d that fit in a Lambda environment", len(check), maxDocumentBytes)
		}
	}
	if s.Construct == nil {
		return nil, nil // checked only: the secrets do not exist yet
	}
	b, err := render(realArn)
	return jsii.String(string(b)), err
}

func (s *Pipeline) functions(assets map[string]asset, sourcesDoc, effectsDoc *string) error {
	ev, ef := s.Events, s.Effects
	secs := func(d time.Duration) *string { return jsii.String(strconv.Itoa(int(d.Seconds()))) }
	specs := []functionProps{
		{
			Name: Intake,
			// 512 MB: Lambda CPU scales with memory; intake verifies signatures
			// (RSA for SNS) and answers the provider while it waits, so the
			// faster cold start and hashing are worth more than the price.
			MemoryMB: 512,
			Timeout:  awscdk.Duration_Seconds(jsii.Number(IntakeTimeout.Seconds())),
			Env: map[string]*string{
				"TABLE_NAME": s.Table.TableName(), "EVENTS_QUEUE_URL": ev.Queue.QueueUrl(), "SOURCES": sourcesDoc,
			},
			// Props.IntakeReservedConcurrency: a flood of deliveries is
			// throttled here (the provider gets a 5xx and retries) instead
			// of taking the concurrency the processors and the dispatcher
			// need to drain what was already accepted.
			ReservedConcurrency: *s.props().IntakeReservedConcurrency,
		},
		{
			Name: Processor,
			// 256 MB: a batch of up to 10 pointers, each payload at most 1 MiB,
			// handled one by one; the work is DynamoDB round trips, not CPU.
			MemoryMB: 256,
			// queue.ProcessorTimeout: the events queue's visibility is 6x it.
			Timeout: awscdk.Duration_Seconds(jsii.Number(queue.ProcessorTimeout.Seconds())),
			Env: map[string]*string{
				"TABLE_NAME": s.Table.TableName(), "SOURCES": sourcesDoc, "EFFECTS_QUEUE_URL": ef.Queue.QueueUrl(),
				// The attempt budget is the queue's maxReceiveCount: the last
				// attempt marks the event DEAD as SQS moves it to the DLQ.
				"MAX_ATTEMPTS": jsii.String(strconv.Itoa(ev.Spec.MaxReceiveCount)),
				// The lease outlives the function's timeout, so a worker that
				// is still running can never lose its claim mid-commit.
				"LEASE_SECONDS":            secs(2 * queue.ProcessorTimeout),
				"QUEUE_VISIBILITY_SECONDS": secs(ev.Spec.VisibilityTimeout),
			},
		},
		{
			Name: Dispatcher,
			// 256 MB: up to 10 HTTP effects in flight at once, each small.
			MemoryMB: 256,
			// queue.DispatcherTimeout: an effect's own timeout (at most 20 s)
			// plus the ledger writes around it; the effects queue's
			// visibility is 6x it.
			Timeout: awscdk.Duration_Seconds(jsii.Number(queue.DispatcherTimeout.Seconds())),
			Env: map[string]*string{
				"TABLE_NAME": s.Table.TableName(), "EFFECTS": effectsDoc, "EFFECTS_QUEUE_URL": ef.Queue.QueueUrl(),
				"DISPATCH_MAX_ATTEMPTS":  jsii.String(strconv.Itoa(DispatchMaxAttempts)),
				"DISPATCH_LEASE_SECONDS": secs(2 * queue.DispatcherTimeout),
			},
		},
		{
			Name: Reconciler,
			// 256 MB: pages of at most RECONCILE_MAX_ITEMS small index items.
			MemoryMB: 256,
			// 2 minutes: a run stops itself after RECONCILE_BUDGET_SECONDS
			// (90 s) and leaves the rest to the next run 5 minutes later.
			Timeout: awscdk.Duration_Seconds(jsii.Number(ReconcilerTimeout.Seconds())),
			Env: map[string]*string{
				"TABLE_NAME": s.Table.TableName(), "SOURCES": sourcesDoc,
				"EVENTS_QUEUE_URL": ev.Queue.QueueUrl(), "EVENTS_DLQ_URL": ev.DLQ.QueueUrl(),
				"EFFECTS_QUEUE_URL": ef.Queue.QueueUrl(), "EFFECTS_DLQ_URL": ef.DLQ.QueueUrl(),
				"RECONCILE_STUCK_SECONDS":  jsii.String(strconv.Itoa(ReconcileStuck)),
				"RECONCILE_MAX_ITEMS":      jsii.String(strconv.Itoa(ReconcileMaxItems)),
				"RECONCILE_BUDGET_SECONDS": jsii.String(strconv.Itoa(ReconcileBudgetSec)),
			},
		},
	}
	for i := range specs {
		if specs[i].Name == Dispatcher {
			maps.Copy(specs[i].Env, environment(s.props().dispatcherSettings()))
		}
	}
	if len(s.props().Effects) > 0 {
		// The reconciler's drift check asks each latest effect's status
		// endpoint which version a subject holds: it reads the same
		// document (and never performs an effect).
		for i := range specs {
			if specs[i].Name == Reconciler {
				specs[i].Env["EFFECTS"] = effectsDoc
			}
		}
	}
	for _, p := range specs {
		f, err := s.newFunction(assets[p.Name], p)
		if err != nil {
			return err
		}
		s.Functions[p.Name] = f
	}
	// The reconciler is invoked only by its schedule: a failed run is not
	// retried (the next one comes in 5 minutes) and runs never pile up.
	s.Functions[Reconciler].Fn.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(0),
		MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(ReconcileEvery.Seconds())),
	})
	return nil
}

// Actions the code performs (verified against internal/ledger, internal/queue,
// internal/outbox, internal/source). TransactWriteItems has no IAM action of its own:
// DynamoDB authorizes each Put/Update inside it as PutItem/UpdateItem, with
// that item's own partition key (the ledger's transactions hold no
// ConditionCheck or Delete).
const (
	ddbGet    = "dynamodb:GetItem"
	ddbPut    = "dynamodb:PutItem"
	ddbUpdate = "dynamodb:UpdateItem"
	ddbQuery  = "dynamodb:Query"
	ddbScan   = "dynamodb:Scan"

	sqsSend       = "sqs:SendMessage" // also covers SendMessageBatch
	sqsReceive    = "sqs:ReceiveMessage"
	sqsDelete     = "sqs:DeleteMessage"
	sqsAttributes = "sqs:GetQueueAttributes"
	sqsVisibility = "sqs:ChangeMessageVisibility"

	getSecret = "secretsmanager:GetSecretValue"
)

// The ledger's partition key prefixes (internal/ledger: eventPK, projectionKey,
// intentKey, cursorKey, ClaimBody). An event's payload chunks share its
// partition key (sort key PL#…), so "events" covers them. Body markers
// (BH#<source>#<hash>) record which event id a body of an unsigned-id
// scheme first came under.
const (
	pkEvents      = "EV#"
	pkProjections = "PJ#"
	pkIntents     = "OP#"
	pkCursors     = "CUR#"
	pkBodies      = "BH#"
	// pkRecordIntents is the warehouse sink's record intents' own shape
	// among intents (OP#warehouse.<hash>): no business intent has it.
	pkRecordIntents = pkIntents + "warehouse."
)

// ledgerWrites is what one function may write in the ledger: per write
// action, the partition key patterns (IAM StringLike) it may write.
type ledgerWrites map[string][]string

// anyKey matches every partition key under a prefix.
func anyKey(prefix string) string { return prefix + "*" }

// sourceKeys matches the items under prefix of the named sources only:
// <prefix><source>#…. Source names cannot hold a StringLike wildcard
// (package source's name rule), and the '#' after the name keeps "stripe"
// from matching "stripe-eu".
func sourceKeys(prefix string, names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, prefix+n+"#*")
	}
	return out
}

// httpsSources lists the configured sources that deliver over HTTPS (to
// intake), in configuration order.
func (p *Props) httpsSources() []Source {
	var out []Source
	for _, s := range p.Sources {
		if (source.Source{Delivery: s.Delivery}).HTTPS() {
			out = append(out, s)
		}
	}
	return out
}

// grants gives each function the actions its code performs, on exactly the
// resources it touches. DynamoDB writes are further limited to the
// partition keys the function's code writes (dynamodb:LeadingKeys; see
// Function.grantWrites): the intake cannot write an intent or a projection,
// the dispatcher cannot touch an event, and so on. GetItem is limited the
// same way to the partition keys the function's code reads
// (Function.grantReads): the dispatcher, which calls third parties, reads
// intents, projections and cursors, never an event or its payload. Query
// on the due index stays unconditioned in a statement of its own, since a
// LeadingKeys condition on an index query would apply to the index's
// partition key (due_shard), and so does the reconciler's Scan (warehouse
// check), which names no partition key at all.
func (s *Pipeline) grants() {
	table := s.Table.TableArn()
	dueIndex := jsii.String(*table + "/index/" + ledger.DueIndex)
	in, pr, di, re := s.Functions[Intake], s.Functions[Processor], s.Functions[Dispatcher], s.Functions[Reconciler]
	ev, ef := s.Events, s.Effects

	// intake: Accept is one conditional UpdateItem (the inbox upsert, or a
	// conflict recorded on the row) plus a PutItem per payload chunk, both
	// under the event's partition key; for a scheme whose ids are not
	// signed, ClaimBody first puts the body's marker. Only for the sources
	// it serves over HTTPS; then one SendMessage.
	if names := sourceNames(s.props().httpsSources()); len(names) > 0 {
		evs := sourceKeys(pkEvents, names)
		in.grantWrites(table, ledgerWrites{ddbPut: append(evs, sourceKeys(pkBodies, names)...), ddbUpdate: evs})
		// Accept and ClaimBody read the row or marker a refused write
		// names only when the refusal returned no item (DynamoDB returns
		// it; see internal/ledger's package doc): items it may write.
		in.grantReads(table, append(sourceKeys(pkEvents, names), sourceKeys(pkBodies, names)...)...)
	}
	ev.Queue.Grant(in.Role, jsii.String(sqsSend))

	// processor: claim and transitions are UpdateItem on the event; payload
	// chunks and the version guard's projection read are GetItem; the commit
	// transaction updates the event, puts or updates the projection, puts
	// new intents (and compensations) and updates intents a revision
	// contradicts. It announces intents with SendMessageBatch.
	pr.grantReads(table, anyKey(pkEvents), anyKey(pkIntents), anyKey(pkProjections))
	pr.grantWrites(table, ledgerWrites{
		ddbPut:    {anyKey(pkProjections), anyKey(pkIntents)},
		ddbUpdate: {anyKey(pkEvents), anyKey(pkProjections), anyKey(pkIntents)},
	})
	ev.Queue.Grant(pr.Role, jsii.String(sqsReceive), jsii.String(sqsDelete), jsii.String(sqsAttributes))
	ef.Queue.Grant(pr.Role, jsii.String(sqsSend))

	// dispatcher: ClaimIntent/RecordIntent are UpdateItem on the intent,
	// LockSubject an UpdateItem on the subject's cursor; the projection and
	// intent reads are GetItem (LockSubject also reads a cursor and its
	// holder intent); it hides a waiting message until it is due.
	di.grantReads(table, anyKey(pkCursors), anyKey(pkIntents), anyKey(pkProjections))
	di.grantWrites(table, ledgerWrites{ddbUpdate: {anyKey(pkIntents), anyKey(pkCursors)}})
	ef.Queue.Grant(di.Role, jsii.String(sqsReceive), jsii.String(sqsDelete), jsii.String(sqsAttributes), jsii.String(sqsVisibility))

	// reconciler (internal/reconciler): every sweep (ListDue, ListDueIntents,
	// ListOpen, ListSyncDue) queries the due index only; GiveUp is an
	// UpdateItem on the event, a missed event found at the source of truth
	// (or a bridge dead letter) is Accepted (UpdateItem + PutItem chunks,
	// any source: a source removed from the configuration may still have
	// events), the drift check's MarkSynced is an UpdateItem on a cursor;
	// GetProjection, GetIntentState and the cursor reads are GetItem. It
	// writes no intent (it re-announces them on the effects queue) and no
	// body marker (a bridge dead letter's id comes from AWS). It
	// re-enqueues events (SendMessage/SendMessageBatch), reads both DLQs'
	// depths, and sweeps both DLQs (receive, delete what is finished).
	re.grantOn([]string{ddbQuery}, dueIndex)
	re.grantReads(table, anyKey(pkCursors), anyKey(pkEvents), anyKey(pkIntents), anyKey(pkProjections))
	re.grantWrites(table, ledgerWrites{
		ddbPut:    {anyKey(pkEvents)},
		ddbUpdate: {anyKey(pkEvents), anyKey(pkCursors)},
	})
	ev.Queue.Grant(re.Role, jsii.String(sqsSend))
	ef.Queue.Grant(re.Role, jsii.String(sqsSend))
	ef.DLQ.Grant(re.Role, jsii.String(sqsReceive), jsii.String(sqsDelete), jsii.String(sqsAttributes))
	ev.DLQ.Grant(re.Role, jsii.String(sqsReceive), jsii.String(sqsDelete), jsii.String(sqsAttributes))

	// Secrets: read-only, and only where the code reads them: signing
	// secrets in intake, source-of-truth keys in the reconciler, effect
	// tokens in the dispatcher, provider API keys (thin Stripe events) in
	// the processor.
	var sourceArns, truthArns, apiArns, effectArns []*string
	for _, src := range s.props().Sources {
		if arn, ok := s.SourceSecrets[src.Name]; ok {
			sourceArns = append(sourceArns, arn)
		}
		if arn, ok := s.TruthSecrets[src.Name]; ok {
			truthArns = append(truthArns, arn)
		}
		if arn, ok := s.APISecrets[src.Name]; ok {
			apiArns = append(apiArns, arn)
		}
	}
	for _, e := range s.props().Effects {
		if arn, ok := s.EffectSecrets[e.Kind]; ok {
			effectArns = append(effectArns, arn)
		}
	}
	if len(sourceArns) > 0 {
		in.grantOn([]string{getSecret}, sourceArns...)
	}
	if len(truthArns) > 0 {
		re.grantOn([]string{getSecret}, truthArns...)
	}
	if len(apiArns) > 0 {
		pr.grantOn([]string{getSecret}, apiArns...)
	}
	if len(effectArns) > 0 {
		di.grantOn([]string{getSecret}, effectArns...)
		// The drift check calls the same status endpoints with the same
		// tokens (read only: it never performs an effect).
		re.grantOn([]string{getSecret}, effectArns...)
	}
	s.grantTargets()
}

// Event source mappings. Batch sizes, windows and concurrency:
//   - processor: 10 messages (handled in order, each a claim and a
//     transaction, well inside 30 s), a 1 s window to fill batches under
//     load, at most 10 concurrent invocations so a burst of webhooks
//     cannot outrun the table's on-demand ramp or hot projection keys.
//   - dispatcher: 10 messages dispatched concurrently (each effect has its
//     own timeout), no window (an effect should go out as soon as it is
//     committed), at most 5 concurrent invocations: 50 calls in flight is
//     the most a downstream sees from us. Enabled when effects are
//     configured or the warehouse is on (the dispatcher writes its records).
func (s *Pipeline) mappings() {
	type m struct {
		id          string
		fn          *Function
		q           awssqs.Queue
		batch       float64
		window      float64
		concurrency float64
		enabled     bool
	}
	for _, x := range []m{
		{"EventsMapping", s.Functions[Processor], s.Events.Queue, 10, 1, 10, true},
		{"EffectsMapping", s.Functions[Dispatcher], s.Effects.Queue, 10, 0, 5, len(s.props().Effects) > 0 || s.Warehouse != nil},
	} {
		esm := awslambda.NewEventSourceMapping(x.fn.Scope, jsii.String(x.id), &awslambda.EventSourceMappingProps{
			Target:                  x.fn.Fn,
			EventSourceArn:          x.q.QueueArn(),
			BatchSize:               jsii.Number(x.batch),
			MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(x.window)),
			MaxConcurrency:          jsii.Number(x.concurrency),
			ReportBatchItemFailures: jsii.Bool(true),
			Enabled:                 jsii.Bool(x.enabled),
		})
		// The mapping is validated against the role when it is created.
		esm.Node().AddDependency(x.fn.Role)
	}
}

// schedule runs the reconciler every 5 minutes. Until the reconciler's code
// exists the rule is created disabled, so no placeholder ever runs.
func (s *Pipeline) schedule() {
	re := s.Functions[Reconciler]
	s.Schedule = awsevents.NewRule(s, jsii.String("ReconcileSchedule"), &awsevents.RuleProps{
		RuleName:    jsii.String(s.prefix() + "reconcile"),
		Description: jsii.String("Runs the reconciler: re-enqueue stuck work, expire leases, resolve uncertain effects, compare with provider truth"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(ReconcileEvery.Minutes()))),
		Enabled:     jsii.Bool(re.Built),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(re.Fn, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0),
			MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(ReconcileEvery.Seconds())),
		})},
	})
}

// httpAPI is POST /webhooks/{source} -> intake, with stage throttling and
// JSON access logs.
func (s *Pipeline) httpAPI() {
	access := awslogs.NewLogGroup(s, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/apigateway/" + s.prefix() + "http-api"),
		Retention:     retentionByDays[s.props().LogRetentionDays],
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	s.API = awsapigatewayv2.NewHttpApi(s, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(s.prefix() + "http-api"),
		Description:        jsii.String("Webhook intake: POST /webhooks/{source}"),
		CreateDefaultStage: jsii.Bool(false),
	})
	// The throttle is the stage's, shared by every source. An HTTP API
	// throttles per route too (the stage's RouteSettings, by route key),
	// but all sources share the one route POST /webhooks/{source}, and
	// intake learns the source from that path parameter: a limit per source
	// would need a route per source (POST /webhooks/stripe, ...), which has
	// no path parameter, so intake would first have to read the source from
	// the route key. Until then one source's flood can use the whole stage
	// limit; the others are answered 429 and their providers retry.
	stage := s.API.AddStage(jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageOptions{
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(float64(s.props().ThrottleRate)),
			BurstLimit: jsii.Number(float64(s.props().ThrottleBurst)),
		},
	})
	// Access logs through the L1 stage: one JSON line per request, no
	// headers or bodies (signatures and payloads stay out of logs).
	cfn := stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	cfn.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: access.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	s.URL = jsii.String(*s.API.ApiEndpoint() + "/webhooks/")
	routes := s.API.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
		Path:    jsii.String("/webhooks/{source}"),
		Methods: &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_POST},
		Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("Intake"), s.Functions[Intake].Fn,
			&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()}),
	})
	for _, r := range *routes {
		cdknag.NagSuppressions_AddResourceSuppressions(r, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String("AwsSolutions-APIG4"),
			Reason: jsii.String("Webhook providers (Stripe, Shopify, GitHub, SNS, ...) cannot send IAM, JWT or Lambda-authorizer " +
				"credentials; every request is authenticated by intake, which verifies the provider's signature over the raw body " +
				"before anything is written. An unverified request gets 401 and touches nothing."),
		}}, jsii.Bool(true))
	}
}

const accessLogFormat = `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","requestTime":"$context.requestTime",` +
	`"method":"$context.httpMethod","routeKey":"$context.routeKey","path":"$context.path","status":"$context.status",` +
	`"protocol":"$context.protocol","responseLength":"$context.responseLength","latency":"$context.responseLatency",` +
	`"integrationLatency":"$context.integrationLatency","integrationError":"$context.integrationErrorMessage",` +
	`"errorMessage":"$context.error.message","userAgent":"$context.identity.userAgent"}`

// PascalCase turns a source name or an effect kind into the form the
// construct's ids use ("stripe-eu" → "StripeEu"), for ids of a team's own
// (outputs per source, say).
func PascalCase(s string) string { return pascal(s) }

// pascal turns "stripe-eu" into "StripeEu" for construct ids.
func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		switch {
		case r == '-' || r == '_' || r == '.':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

// SourceURL is the webhook URL of a configured source (URL + its name),
// the address to give its provider; nil for a source that delivers only
// through EventBridge or is not configured.
func (s *Pipeline) SourceURL(name string) *string {
	for _, src := range s.Props.Sources {
		if src.Name == name && (source.Source{Delivery: src.Delivery}).HTTPS() {
			return jsii.String(*s.URL + name)
		}
	}
	return nil
}
