package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// Props configures a Pipeline. The zero value of every field is a safe
// default; only Sources is required. New checks every field (and the
// SOURCES and EFFECTS documents they render, with the parsers the
// functions use) and returns a *PropError naming the prop, so a wrong
// value fails synth, never a deployed function.
type Props struct {
	// Name starts every physical name: "<Name>-<Stage>-ledger",
	// "<Name>-<Stage>-intake", secrets "<Name>/<Stage>/…". Lowercase
	// letters, digits and inner hyphens, at most 16. Default "webhooks".
	Name string
	// Stage names the environment ("dev", "prod"): lowercase letters and
	// digits, at most 12, starting with a letter. Two stages (or two
	// Names) live side by side in one account. Default "dev".
	Stage string
	// Sources are the webhook sources intake accepts (the SOURCES
	// document). At least one.
	Sources []Source
	// Effects are the outbox's effects (the EFFECTS document): HTTP
	// endpoints or AWS targets. None means the dispatcher is deployed with its queue mapping disabled:
	// intents wait PENDING in the ledger and nothing downstream is called
	// (unless the warehouse is on: the dispatcher writes its records, so
	// the mapping is enabled).
	Effects []Effect
	// Code says where each function's built bootstrap is, when the team
	// builds its functions itself. Leave it zero when Build is set.
	Code Code
	// Build, when set, builds each function from the team's Go module at
	// synth (CDK asset bundling with a local `go build`, never Docker) and
	// never deploys a placeholder; see GoBuild. nil: the functions' code
	// comes from Code.
	Build *GoBuild
	// AlarmEmail, when set, subscribes this address to the alarm topic.
	AlarmEmail string
	// Tracing turns on X-Ray active tracing for every function.
	Tracing bool
	// BridgeDLQSenders are SenderIds, beyond the bridge function's role,
	// whose letters in the bridge DLQ the reconciler redelivers. None by
	// default: SQS's SenderId for EventBridge's own deliveries to the DLQ
	// is not documented, so such a letter is refused and recorded until an
	// operator who has checked one adds the SenderId it names.
	BridgeDLQSenders []string
	// LedgerDataEvents creates a CloudTrail trail that records every write
	// to the ledger table (its DynamoDB data events) into an encrypted,
	// versioned, TLS-only bucket with log file validation: the server-side
	// evidence of who wrote what, audit entries included. Off by default:
	// data events cost, and an account often records them in an
	// organization trail already.
	LedgerDataEvents bool
	// AllowTableDeletion turns the ledger's deletion protection off and
	// deletes the table with the stack (throwaway stages only). By default
	// the table is protected and retained when the stack is deleted.
	AllowTableDeletion bool
	// GivenSecretsOnly: the construct creates no secret. Every secret a
	// function reads must then be given as an ARN: each source whose
	// deliveries are signed (HTTPS, every kind but sns) its SecretArn, each
	// Stripe truth and each api its SecretArn, each effect with Secret its
	// SecretArn. By default a secret that is not given is created with a
	// random placeholder value (put the real one in after the deploy).
	GivenSecretsOnly bool
	// LogRetentionDays is how long function and access logs are kept: a
	// value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, …, 3653).
	// Default 30.
	LogRetentionDays int
	// RetentionDays is how long a finished event stays in the ledger
	// (RETENTION_DAYS), 4 to 3650. Default 30.
	RetentionDays int
	// LogLevel is the functions' LOG_LEVEL and Lambda application log
	// level: debug, info, warn or error. Default info.
	LogLevel string
	// ThrottleRate and ThrottleBurst limit the HTTP API stage (requests per
	// second, 1 to 10000, and the burst above it, 1 to 5000), shared by
	// every source. Defaults 50 and 100.
	ThrottleRate, ThrottleBurst int
	// IntakeReservedConcurrency reserves, and caps, the intake function's
	// concurrent executions, so a flood of deliveries cannot take the
	// account's concurrency from the processor, dispatcher and reconciler.
	// nil: ThrottleBurst (the most requests the stage lets through at
	// once); a pointer to 0 reserves nothing (a reservation comes out of
	// the account's unreserved pool, which Lambda keeps at 100 or more);
	// at most 5000.
	IntakeReservedConcurrency *int
	// DueShards and DueShardsRead size the ledger's due index (every
	// function's DUE_SHARDS and DUE_SHARDS_READ), 1 to 64 each, and
	// DueShardsRead never below DueShards. About 567 events/s per 4 shards
	// (BENCHMARKS.md, "Scale"). Raise DueShards in one deploy; lower it in
	// two, keeping DueShardsRead at the old count until the retired shards
	// are empty. Defaults 4 and DueShards.
	DueShards, DueShardsRead int
	// Billing is the ledger table's billing mode: on demand by default.
	Billing Billing
	// MetricsNamespace is where the functions' embedded metrics land and
	// the alarms and dashboard read. Default "EffectivelyOnce/<Name>-<Stage>".
	MetricsNamespace string
	// OutboxEventSource is the source of the events the dispatcher puts on
	// EventBridge buses (effects with an event bus target;
	// OUTBOX_EVENT_SOURCE), so a rule on a shared bus can tell one
	// pipeline and stage from another by source. Default
	// "effectively-once.<Name>-<Stage>". EventBridge's rules apply: 1 to
	// 256 characters, not starting with "aws."; we also keep to letters,
	// digits and / . _ -. A stage whose rules match the former fixed
	// source sets it to "effectively-once.outbox".
	OutboxEventSource string
	// Warehouse, when set, turns on the warehouse sink: every applied
	// projection revision becomes an immutable JSON change record in an S3
	// bucket, queried with Athena (see WarehouseProps and warehouse.go).
	// nil, the default: no bucket, no catalog, no variable.
	Warehouse *WarehouseProps
}

// Source is one webhook source; its JSON form is the CDK context's:
// {"name","kind","options"?,"secretArn"?,"toleranceSeconds"?,
// "maxBodyBytes"?,"truth"?,"delivery"?,"eventSource"?,"api"?}.
// A source's scope (what effects name in their Scopes, and the prefix of
// the projections it writes) is its name.
type Source struct {
	// Name is the source's name, the last part of its webhook URL
	// (POST /webhooks/<name>): lowercase letters, digits and hyphens.
	Name string `json:"name"`
	// Kind is the provider: stripe, standard-webhooks, shopify, github,
	// quiltt, hmac, sns, or a kind a team registered (provider.Register).
	Kind string `json:"kind"`
	// Options are the provider's options (for sns, "topic_arns").
	Options map[string]string `json:"options,omitempty"`
	// SecretArn is an existing Secrets Manager secret holding the signing
	// secret. Empty: the construct creates one, unless GivenSecretsOnly
	// (sources whose deliveries are not signed, sns and EventBridge-only,
	// have none).
	SecretArn string `json:"secretArn,omitempty"`
	// ToleranceSeconds and MaxBodyBytes override the provider's replay
	// window and body limit.
	ToleranceSeconds int `json:"toleranceSeconds,omitempty"`
	MaxBodyBytes     int `json:"maxBodyBytes,omitempty"`
	// Truth, when set, lets the reconciler compare the ledger with the
	// provider's current facts.
	Truth *Truth `json:"truth,omitempty"`
	// Delivery is "https" (default), "eventbridge" or "https+eventbridge";
	// with eventbridge, EventSource is the partner event source name
	// ("aws.partner/…") and the construct adds the bridge.
	Delivery    string `json:"delivery,omitempty"`
	EventSource string `json:"eventSource,omitempty"`
	// API, for a stripe source, is the Stripe API the processor reads the
	// objects thin events name from.
	API *API `json:"api,omitempty"`
}

// API is a stripe source's API access for thin events:
// {"secretArn"?,"url"?,"timeoutSeconds"?}. Without SecretArn the construct
// creates the secret for the restricted key (unless GivenSecretsOnly).
type API struct {
	SecretArn      string `json:"secretArn,omitempty"`
	URL            string `json:"url,omitempty"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty"`
}

// Truth is a source's source of truth for the reconciler:
// {"kind":"stripe"|"http","url"?,"lookbackMinutes"?,"secretArn"?,"secret"?}.
// A stripe truth always has an API key secret (created unless SecretArn is
// given); an http truth has a bearer token only with SecretArn or Secret.
type Truth struct {
	Kind            string `json:"kind"`
	URL             string `json:"url,omitempty"`
	LookbackMinutes int    `json:"lookbackMinutes,omitempty"`
	SecretArn       string `json:"secretArn,omitempty"`
	Secret          bool   `json:"secret,omitempty"`
}

// Effect is one outbox effect; its JSON form is the CDK context's:
// {"kind","url"|"target","scopes","statusUrl"?,"timeoutSeconds"?,
// "idempotencyWindowHours"?,"secretArn"?,"secret"?,"kmsKeyArn"?}.
//
// An effect calls an HTTP endpoint (URL) or an AWS target (Target), never
// both. A target is checked as the dispatcher checks it at start
// (outbox.ParseEffectsIn): its service, its shape, and, when the stack's
// region is concrete, that it is in the stack's region. The dispatcher's
// role is granted exactly what its target's calls need, on that target
// only (see grantTargets).
type Effect struct {
	// Kind is the intent kind the projections emit ("ship_order").
	Kind string `json:"kind"`
	// URL receives the call (https).
	URL string `json:"url,omitempty"`
	// Target is an AWS target's ARN instead of URL: a Lambda function
	// (optionally qualified by a version or alias), an SQS queue
	// (standard or FIFO), an EventBridge event bus or a STANDARD Step
	// Functions state machine (unqualified). StatusURL,
	// IdempotencyWindowHours, SecretArn and Secret are HTTP's only: an AWS
	// target is called with the dispatcher's role, and its deduplication
	// and status lookup are its service's.
	Target string `json:"target,omitempty"`
	// KMSKeyArn is the customer managed KMS key an SQS target's queue is
	// encrypted with (SSE-KMS), if any: sending to such a queue needs
	// kms:GenerateDataKey and kms:Decrypt on the key. Only with an SQS
	// target; a queue encrypted with SQS's own keys needs none.
	KMSKeyArn string `json:"kmsKeyArn,omitempty"`
	// Scopes (required) names the sources whose facts may trigger the
	// effect, each a configured source's name, or is ["*"] for every
	// source. An intent of another scope is refused without a call.
	Scopes []string `json:"scopes"`
	// StatusURL, when set, is asked whether an uncertain call took effect.
	StatusURL              string `json:"statusUrl,omitempty"`
	TimeoutSeconds         int    `json:"timeoutSeconds,omitempty"`
	IdempotencyWindowHours int    `json:"idempotencyWindowHours,omitempty"`
	// SecretArn is an existing secret holding the bearer token; Secret
	// asks the construct to create one. Neither: the call has no token.
	SecretArn string `json:"secretArn,omitempty"`
	Secret    bool   `json:"secret,omitempty"`
}

// Code says where each function's code is: a directory holding its built
// bootstrap (linux/arm64, provided.al2023). Resolve, when set, replaces
// the rest; otherwise Dirs[fn], else BuildDir/<fn>.
type Code struct {
	// Dirs maps a function (Intake, Processor, Dispatcher, Reconciler,
	// Bridge) to the directory holding its bootstrap.
	Dirs map[string]string
	// BuildDir holds <fn>/bootstrap for every function not in Dirs.
	// Default: this repository's build/ (what `make build` writes), found
	// from this package's source location; a copy of the module without
	// it (the module cache) has no binaries there.
	BuildDir string
	// Strict makes a missing bootstrap an error (deploys). Otherwise the
	// function is synthesized from a placeholder folder with a warning,
	// and a reconciler without code keeps its schedule disabled, so
	// `cdk synth` works before anything is built.
	Strict bool
	// Resolve, when set, finds every function's code: dir is the folder
	// to deploy, built false when it is a placeholder.
	Resolve func(fn string) (dir string, built bool, err error)
}

// Billing is the ledger table's billing mode.
type Billing struct {
	// Provisioned, when set, bills the table and its due index by
	// provisioned capacity with auto scaling (target tracking on
	// utilisation). nil: on demand, the default, for bursty and
	// unplanned webhook traffic.
	Provisioned *Provisioned `json:"provisioned,omitempty"`
}

// Provisioned is provisioned capacity with auto scaling, for the table and
// for its due index (every event writes the index too: about a third of
// its write units, BENCHMARKS.md).
type Provisioned struct {
	// Read and Write bound the table's capacity units.
	Read  Capacity `json:"read"`
	Write Capacity `json:"write"`
	// IndexRead and IndexWrite bound the due index's; the zero value uses
	// the table's.
	IndexRead  Capacity `json:"indexRead,omitzero"`
	IndexWrite Capacity `json:"indexWrite,omitzero"`
	// TargetUtilizationPercent is the consumed-to-provisioned ratio auto
	// scaling keeps, 10 to 90 (what CDK's DynamoDB scaling accepts).
	// Default 70.
	TargetUtilizationPercent int `json:"targetUtilizationPercent,omitempty"`
}

// Capacity bounds one auto-scaled dimension, in capacity units: Min (at
// least 1; default 1) and Max (required, at least Min).
type Capacity struct {
	Min int `json:"min,omitempty"`
	Max int `json:"max"`
}

// Prefix starts every physical name: "<Name>-<Stage>-".
func (p Props) Prefix() string {
	d := p.withDefaults()
	return d.Name + "-" + d.Stage + "-"
}

// Function names, as in functions/<name> and build/<name>/bootstrap.
const (
	Intake     = "intake"
	Processor  = "processor"
	Dispatcher = "dispatcher"
	Reconciler = "reconciler"
	// Bridge is the EventBridge intake (functions/bridge): the target of
	// one rule per source whose delivery includes eventbridge. It exists
	// only when such a source is configured.
	Bridge = "bridge"
)

// ErrProps wraps every error New returns for its props.
var ErrProps = errors.New("pipeline props")

// PropError is a contradictory or out-of-range prop. Prop names it as Go
// code would ("DueShards", "Sources[0].SecretArn", "Effects[1] (refund)",
// "Billing.Provisioned.Read"); errors.Is(err, ErrProps) holds.
type PropError struct {
	Prop string
	Err  error
}

func (e *PropError) Error() string { return ErrProps.Error() + ": " + e.Prop + ": " + e.Err.Error() }

// Unwrap lets errors.Is find ErrProps and the cause.
func (e *PropError) Unwrap() []error { return []error{ErrProps, e.Err} }

func propErr(prop, format string, a ...any) error {
	return &PropError{Prop: prop, Err: fmt.Errorf(format, a...)}
}

var (
	nameRE  = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,14}[a-z0-9])?$`)
	stageRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	// The same rule as package source's names, checked here so a bad name
	// fails synth rather than the deployed function's cold start.
	sourceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	arnRE        = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$`)
	// A KMS key's ARN (key/<key id>): IAM needs the key's full ARN, not an
	// alias, to grant its use.
	kmsKeyRE = regexp.MustCompile(`^arn:aws[a-z-]*:kms:([a-z0-9-]+):[0-9]{12}:key/[a-zA-Z0-9-]{1,128}$`)
)

// maxReservedConcurrency bounds IntakeReservedConcurrency: far above what
// the stage's throttle lets through (its own maximum burst is 5000), and a
// reservation the account cannot give fails the deployment anyway.
const maxReservedConcurrency = 5000

// validRetention lists the log retentions CloudWatch Logs accepts (days).
var validRetention = map[int]bool{1: true, 3: true, 5: true, 7: true, 14: true, 30: true, 60: true, 90: true,
	120: true, 150: true, 180: true, 365: true, 400: true, 545: true, 731: true, 1096: true, 1827: true,
	2192: true, 2557: true, 2922: true, 3288: true, 3653: true}

// withDefaults returns p with every zero value replaced by its default.
func (p Props) withDefaults() Props {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if p.Name == "" {
		p.Name = "webhooks"
	}
	if p.Stage == "" {
		p.Stage = "dev"
	}
	if p.LogLevel == "" {
		p.LogLevel = "info"
	}
	p.LogLevel = strings.ToLower(p.LogLevel)
	def(&p.LogRetentionDays, 30)
	def(&p.RetentionDays, 30)
	def(&p.ThrottleRate, 50)
	def(&p.ThrottleBurst, 100)
	def(&p.DueShards, 4)
	def(&p.DueShardsRead, p.DueShards)
	if p.IntakeReservedConcurrency == nil {
		n := p.ThrottleBurst
		p.IntakeReservedConcurrency = &n
	}
	if p.MetricsNamespace == "" {
		p.MetricsNamespace = "EffectivelyOnce/" + p.Name + "-" + p.Stage
	}
	if p.OutboxEventSource == "" {
		p.OutboxEventSource = "effectively-once." + p.Name + "-" + p.Stage
	}
	p.Warehouse = withWarehouseDefaults(p.Warehouse)
	if pr := p.Billing.Provisioned; pr != nil {
		c := *pr
		def(&c.TargetUtilizationPercent, 70)
		for _, x := range []*Capacity{&c.Read, &c.Write} {
			def(&x.Min, 1)
		}
		if c.IndexRead == (Capacity{}) {
			c.IndexRead = c.Read
		}
		if c.IndexWrite == (Capacity{}) {
			c.IndexWrite = c.Write
		}
		for _, x := range []*Capacity{&c.IndexRead, &c.IndexWrite} {
			def(&x.Min, 1)
		}
		p.Billing.Provisioned = &c
	}
	return p
}

// Validate checks the props as New does, except for the functions' code
// (New looks for it): a *PropError names the first wrong prop.
func (p Props) Validate() error {
	d := p.withDefaults()
	if err := d.validate(); err != nil {
		return err
	}
	s := &Pipeline{Props: d}
	if _, err := s.sourcesDocument(); err != nil {
		return err
	}
	_, err := s.effectsDocument()
	return err
}

// validate checks p (with its defaults applied) prop by prop.
func (p Props) validate() error {
	if !nameRE.MatchString(p.Name) {
		return propErr("Name", "%q must match %s (it starts every physical name)", p.Name, nameRE)
	}
	if !stageRE.MatchString(p.Stage) {
		return propErr("Stage", "%q must match %s (it goes into every physical name)", p.Stage, stageRE)
	}
	if p.AlarmEmail != "" && !strings.Contains(p.AlarmEmail, "@") {
		return propErr("AlarmEmail", "%q is not an email address", p.AlarmEmail)
	}
	if !validRetention[p.LogRetentionDays] {
		return propErr("LogRetentionDays", "%d is not a retention CloudWatch Logs accepts", p.LogRetentionDays)
	}
	for _, r := range []struct {
		prop   string
		v      int
		lo, hi int
	}{
		{"ThrottleRate", p.ThrottleRate, 1, 10000},
		{"ThrottleBurst", p.ThrottleBurst, 1, 5000},
		{"IntakeReservedConcurrency", *p.IntakeReservedConcurrency, 0, maxReservedConcurrency},
	} {
		if r.v < r.lo || r.v > r.hi {
			return propErr(r.prop, "%d is outside %d..%d", r.v, r.lo, r.hi)
		}
	}
	if len(p.BridgeDLQSenders) > 0 {
		if _, err := queue.ParseSenders(strings.Join(p.BridgeDLQSenders, ",")); err != nil {
			return propErr("BridgeDLQSenders", "%v", err)
		}
	}
	if err := p.validateBilling(); err != nil {
		return err
	}
	if err := p.validateWarehouse(); err != nil {
		return err
	}
	if err := p.validateSettings(); err != nil {
		return err
	}
	if err := p.validateSources(); err != nil {
		return err
	}
	if err := p.validateEffects(); err != nil {
		return err
	}
	return p.validateCode()
}

func (p Props) validateBilling() error {
	pr := p.Billing.Provisioned
	if pr == nil {
		return nil
	}
	if t := pr.TargetUtilizationPercent; t < 10 || t > 90 {
		return propErr("Billing.Provisioned.TargetUtilizationPercent", "%d is outside 10..90", t)
	}
	for _, c := range []struct {
		prop string
		c    Capacity
	}{{"Read", pr.Read}, {"Write", pr.Write}, {"IndexRead", pr.IndexRead}, {"IndexWrite", pr.IndexWrite}} {
		prop := "Billing.Provisioned." + c.prop
		switch {
		case c.c.Min < 1:
			return propErr(prop, "min %d is below 1", c.c.Min)
		case c.c.Max == 0:
			return propErr(prop, "max is required with provisioned billing")
		case c.c.Min > c.c.Max:
			return propErr(prop, "min %d is above max %d", c.c.Min, c.c.Max)
		}
	}
	return nil
}

func (p Props) validateSources() error {
	if len(p.Sources) == 0 {
		return propErr("Sources", "at least one source is required")
	}
	seen := map[string]bool{}
	for i, s := range p.Sources {
		at := fmt.Sprintf("Sources[%d]", i)
		if !sourceNameRE.MatchString(s.Name) {
			return propErr(at, "name %q must match %s", s.Name, sourceNameRE)
		}
		if seen[s.Name] {
			return propErr(at, "name %q appears twice", s.Name)
		}
		seen[s.Name] = true
		for _, a := range []struct {
			prop, arn string
		}{{"SecretArn", s.SecretArn}, {"API.SecretArn", apiArn(s.API)}, {"Truth.SecretArn", truthArn(s.Truth)}} {
			if a.arn != "" && !arnRE.MatchString(a.arn) {
				return propErr(at+"."+a.prop, "must be a Secrets Manager secret ARN")
			}
		}
		if !p.GivenSecretsOnly {
			continue
		}
		if s.SecretArn == "" && signed(s) {
			return propErr(at+".SecretArn", "source %s delivers signed webhooks (%s over https), which need a secret, and GivenSecretsOnly creates none", s.Name, s.Kind)
		}
		if s.Truth != nil && s.Truth.SecretArn == "" && (s.Truth.Secret || s.Truth.Kind == "stripe") {
			return propErr(at+".Truth.SecretArn", "source %s's %s truth reads with an API key, and GivenSecretsOnly creates none", s.Name, s.Truth.Kind)
		}
		if s.API != nil && s.API.SecretArn == "" {
			return propErr(at+".API.SecretArn", "source %s's api reads with a restricted key, and GivenSecretsOnly creates none", s.Name)
		}
	}
	return nil
}

// signed says whether the source's deliveries carry a signature checked
// with a shared secret: HTTPS deliveries of every kind but SNS (whose
// signature is checked with AWS's certificate).
func signed(s Source) bool {
	return provider.RequiresSecrets(s.Kind) && (source.Source{Delivery: s.Delivery}).HTTPS()
}

func apiArn(a *API) string {
	if a == nil {
		return ""
	}
	return a.SecretArn
}

func truthArn(t *Truth) string {
	if t == nil {
		return ""
	}
	return t.SecretArn
}

func (p Props) validateEffects() error {
	names := sourceNames(p.Sources)
	kinds := map[string]bool{}
	for i, e := range p.Effects {
		at := fmt.Sprintf("Effects[%d] (%s)", i, e.Kind)
		if kinds[e.Kind] {
			return propErr(at, "kind %q appears twice", e.Kind)
		}
		kinds[e.Kind] = true
		if e.SecretArn != "" && !arnRE.MatchString(e.SecretArn) {
			return propErr(at+".SecretArn", "must be a Secrets Manager secret ARN")
		}
		if p.GivenSecretsOnly && e.Secret && e.SecretArn == "" {
			return propErr(at+".SecretArn", "effect %s asks for a token secret, and GivenSecretsOnly creates none", e.Kind)
		}
		if e.Target != "" && (e.Secret || e.SecretArn != "") {
			return propErr(at+".SecretArn", "effect %s has a target: an AWS target is called with the dispatcher's role, not a bearer token", e.Kind)
		}
		if e.KMSKeyArn != "" {
			t, err := outbox.ParseTarget(e.Target, "")
			switch {
			case e.Target == "" || err != nil || t.Kind != outbox.TargetSQS:
				return propErr(at+".KMSKeyArn", "is the key of an SQS target's queue; effect %s has no SQS target", e.Kind)
			case !kmsKeyRE.MatchString(e.KMSKeyArn):
				return propErr(at+".KMSKeyArn", "%q must be a KMS key ARN (arn:aws:kms:<region>:<account>:key/<key id>; not an alias)", e.KMSKeyArn)
			case kmsKeyRE.FindStringSubmatch(e.KMSKeyArn)[1] != t.Region:
				return propErr(at+".KMSKeyArn", "the key is in %s, the queue in %s: a queue's key is in its region", kmsKeyRE.FindStringSubmatch(e.KMSKeyArn)[1], t.Region)
			}
		}
		if err := outbox.CheckScopes(e.Scopes); err != nil {
			return propErr(at, "%v", err)
		}
		// A scope no source has is a typo or a source not deployed: the
		// effect would refuse its intended source's intents.
		for _, sc := range e.Scopes {
			if sc != outbox.AllScopes && !slices.Contains(names, sc) {
				return propErr(at, "scope %q is no source's: the sources are %s", sc, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

func (p Props) validateCode() error {
	for fn := range p.Code.Dirs {
		if !slices.Contains(allFunctions, fn) {
			return propErr("Code.Dirs["+fn+"]", "no such function: the functions are %s", strings.Join(allFunctions, ", "))
		}
	}
	return nil
}

// allFunctions lists every function the construct can deploy.
var allFunctions = []string{Intake, Processor, Dispatcher, Reconciler, Bridge}

// sourceNames lists the sources' names.
func sourceNames(srcs []Source) []string {
	out := make([]string, 0, len(srcs))
	for _, s := range srcs {
		out = append(out, s.Name)
	}
	return out
}
