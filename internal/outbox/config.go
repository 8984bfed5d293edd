package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// ErrConfig wraps every effect configuration error.
var ErrConfig = errors.New("effects config")

// EffectConfig configures one built-in effect: an HTTP endpoint (url) or
// an AWS target (target, an ARN). The document is
//
//	{"effects":[{"kind":"refund","url":"https://payments.example/refunds",
//	  "status_url":"https://payments.example/refunds/status",
//	  "secret":"arn:aws:secretsmanager:…","timeout_seconds":10,
//	  "idempotency_window_hours":24,"scopes":["orders"]},
//	 {"kind":"order.fulfil","target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil",
//	  "timeout_seconds":15,"scopes":["shop"]}]}
//
// The secret is a reference (Secrets Manager ARN, "sm:<name>", or "env:<VAR>"
// on a local stack), never the token itself.
//
// An effect has a url or a target, never both. A target's ARN decides its
// kind: a Lambda function (arn:…:lambda:…:function:<name>[:<qualifier>],
// LambdaEffect), an SQS queue (arn:…:sqs:…:<queue>, a FIFO one ending in
// .fifo, SQSEffect), an EventBridge event bus (arn:…:events:…:event-bus/<name>,
// EventBridgeEffect) or a STANDARD Step Functions state machine
// (arn:…:states:…:stateMachine:<name>, StepFunctionsEffect), or, for the
// kind warehouse.record only, an S3 bucket and prefix
// (arn:aws:s3:::<bucket>/<prefix>, WarehouseEffect). Its region
// must be the dispatcher's (ParseEffectsIn). How long the target
// deduplicates and whether it can say what it applied are the target's
// documented behaviour, not configuration: status_url, secret and
// idempotency_window_hours are refused with a target. timeout_seconds
// bounds each call as for HTTP.
//
// Scopes is required: the scopes whose facts may trigger the effect (a
// source's scope is its domain, else its name). Every source of a kind
// emits the same intent kinds, so a second source of the operator's kind
// (a vendor's Standard Webhooks sender, a Stripe test-mode account) would
// otherwise reach this endpoint with the operator's token. ["*"] opts in to
// every scope, and is the only way to let through intents that have no
// scope (an unscoped source's, or any other stored without one).
// An intent whose scope is not allowed is never sent: it is QUARANTINED
// with code scope_not_allowed.
type EffectConfig struct {
	Kind                   string   `json:"kind"`
	URL                    string   `json:"url,omitempty"`
	Target                 string   `json:"target,omitempty"` // an AWS ARN, instead of url
	StatusURL              string   `json:"status_url,omitempty"`
	Secret                 string   `json:"secret,omitempty"`
	TimeoutSeconds         int      `json:"timeout_seconds,omitempty"`          // default 10; at most 20, under the dispatcher's timeout
	IdempotencyWindowHours int      `json:"idempotency_window_hours,omitempty"` // how long the downstream remembers a key; default 24
	Scopes                 []string `json:"scopes"`
	// EventSource is the source of the events an EventBridge target puts:
	// the dispatcher's OUTBOX_EVENT_SOURCE, never part of the document.
	EventSource string `json:"-"`
}

// AllScopes, alone in an effect's scopes, lets every scope use it.
const AllScopes = "*"

// scopeRE is the rule of a scope: a source's name or domain (package
// source's names).
var scopeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckScopes validates an effect's scopes: at least one; either "*"
// alone or scope names, each once.
func CheckScopes(scopes []string) error {
	if len(scopes) == 0 {
		return errors.New(`scopes is required: list the scopes whose facts may trigger this effect (a source's domain, else its name), or ["*"] for every scope`)
	}
	seen := map[string]bool{}
	for _, sc := range scopes {
		switch {
		case sc == AllScopes && len(scopes) > 1:
			return errors.New(`scopes: "*" allows every scope and must be alone`)
		case sc == AllScopes:
		case !scopeRE.MatchString(sc):
			return fmt.Errorf("scopes: %q is not a scope (a source's name or domain, matching %s)", sc, scopeRE)
		case seen[sc]:
			return fmt.Errorf("scopes: %q appears twice", sc)
		}
		seen[sc] = true
	}
	return nil
}

// Timeout is the per-call HTTP timeout.
func (c EffectConfig) Timeout() time.Duration {
	if c.TimeoutSeconds == 0 {
		return 10 * time.Second
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

// Window is the downstream's idempotency window.
func (c EffectConfig) Window() time.Duration {
	if c.IdempotencyWindowHours == 0 {
		return 24 * time.Hour
	}
	return time.Duration(c.IdempotencyWindowHours) * time.Hour
}

// MaxEffectTimeout keeps an effect's call inside the dispatcher Lambda's
// timeout with room for the ledger writes around it.
const MaxEffectTimeout = 20 * time.Second

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// ParseEffects reads and validates an effects document without knowing
// the dispatcher's region: a target's ARN is checked in every other way.
// The dispatcher checks its document with ParseEffectsIn (LoadEffects).
func ParseEffects(doc []byte) ([]EffectConfig, error) { return ParseEffectsIn(doc, "") }

// ParseEffectsIn reads and validates an effects document for a dispatcher
// in region: every target's ARN must be in it ("" leaves the region
// unchecked).
func ParseEffectsIn(doc []byte, region string) ([]EffectConfig, error) {
	var d struct {
		Effects []EffectConfig `json:"effects"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if len(d.Effects) == 0 {
		return nil, fmt.Errorf("%w: no effects configured", ErrConfig)
	}
	seen := map[string]bool{}
	for i, c := range d.Effects {
		where := fmt.Sprintf("effect %d (%q)", i, c.Kind)
		if !kindRE.MatchString(c.Kind) {
			return nil, fmt.Errorf("%w: %s: kind must match %s", ErrConfig, where, kindRE)
		}
		if seen[c.Kind] {
			return nil, fmt.Errorf("%w: %s: kind configured twice", ErrConfig, where)
		}
		seen[c.Kind] = true
		if err := checkEndpoint(c, region); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
		}
		if c.StatusURL != "" {
			if err := source.CheckEndpointURL(c.StatusURL); err != nil {
				return nil, fmt.Errorf("%w: %s: status_url: %v", ErrConfig, where, err)
			}
		}
		if c.Secret != "" {
			if err := source.CheckSecretRef(c.Secret); err != nil {
				return nil, fmt.Errorf("%w: %s: secret: %v", ErrConfig, where, err)
			}
		}
		if c.TimeoutSeconds < 0 || c.Timeout() > MaxEffectTimeout {
			return nil, fmt.Errorf("%w: %s: timeout_seconds must be between 1 and %d", ErrConfig, where, int(MaxEffectTimeout.Seconds()))
		}
		if c.IdempotencyWindowHours < 0 || c.IdempotencyWindowHours > 24*365 {
			return nil, fmt.Errorf("%w: %s: idempotency_window_hours must be between 1 and 8760", ErrConfig, where)
		}
		if err := CheckScopes(c.Scopes); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
		}
	}
	return d.Effects, nil
}

// checkEndpoint validates an effect's url or target: exactly one, and
// with a target none of the keys only HTTP has.
func checkEndpoint(c EffectConfig, region string) error {
	switch {
	case c.URL != "" && c.Target != "":
		return errors.New("url and target: an effect calls an HTTP endpoint (url) or an AWS target (target), not both")
	case c.Target == "":
		if c.URL == "" {
			return fmt.Errorf("url: %v", errNoTarget)
		}
		if err := source.CheckEndpointURL(c.URL); err != nil {
			return fmt.Errorf("url: %v", err)
		}
		return nil
	}
	if isS3Target(c.Target) {
		if c.Kind != WarehouseKind {
			_, err := ParseTarget(c.Target, region)
			return fmt.Errorf("target: %v; %v", err, errNotWarehouse)
		}
		if _, _, err := warehouse.ParseTarget(c.Target); err != nil {
			return fmt.Errorf("target: %v", err)
		}
	} else if _, err := ParseTarget(c.Target, region); err != nil {
		return fmt.Errorf("target: %v", err)
	}
	switch {
	case c.StatusURL != "":
		return errors.New("status_url: an AWS target has no status endpoint; its status lookup, if any, is its service's (Step Functions: DescribeExecution)")
	case c.Secret != "":
		return errors.New("secret: an AWS target is called with the dispatcher's role, not a bearer token")
	case c.IdempotencyWindowHours != 0:
		return errors.New("idempotency_window_hours: an AWS target's deduplication window is its service's documented one (SQS FIFO 5 minutes, Step Functions 90 days, none for Lambda, SQS standard queues and EventBridge)")
	}
	return nil
}

// LoadEffects reads EFFECTS (JSON) or the file named by EFFECTS_FILE, for
// a dispatcher in AWS_REGION (else AWS_DEFAULT_REGION): a document with
// an AWS target needs one of them, the region every target must be in.
func LoadEffects(getenv func(string) string) ([]EffectConfig, error) {
	doc := []byte(getenv("EFFECTS"))
	if len(doc) == 0 {
		path := getenv("EFFECTS_FILE")
		if path == "" {
			return nil, fmt.Errorf("%w: set EFFECTS (JSON) or EFFECTS_FILE", ErrConfig)
		}
		var err error
		if doc, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("%w: read EFFECTS_FILE: %v", ErrConfig, err)
		}
	}
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	cfgs, err := ParseEffectsIn(doc, region)
	if err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		if c.Target != "" && region == "" {
			return nil, fmt.Errorf("%w: effect %q has a target and neither AWS_REGION nor AWS_DEFAULT_REGION is set: its region cannot be checked", ErrConfig, c.Kind)
		}
	}
	return cfgs, nil
}

// S3PathStyle is an S3 client option: a client whose endpoint is
// overridden (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL: a local S3) addresses
// buckets by path (http://host:port/bucket/key), since a local endpoint
// has no host name per bucket. The SDK has no environment variable for
// it, and chooses path style by itself only for an endpoint that is an IP
// address, not for a name such as localhost. Without an override (AWS)
// it changes nothing. It runs after NewFromConfig has resolved the
// endpoint, so it sees the override.
func S3PathStyle(o *s3.Options) {
	if o.BaseEndpoint != nil {
		o.UsePathStyle = true
	}
}

// Build turns configurations into effects. Bearer tokens are read through
// secrets (cached, so a rotation is picked up within its TTL); AWS targets
// are called with clients of awsCfg (its credentials are the dispatcher's
// role, its endpoints those the SDK resolves, AWS_ENDPOINT_URL_<SERVICE>
// on a local stack), one per service. The effects turn the SDK's retries
// off on every call: the dispatcher decides what a failure means.
func Build(cfgs []EffectConfig, secrets *source.Secrets, awsCfg aws.Config) (map[string]Effect, error) {
	out := make(map[string]Effect, len(cfgs))
	var (
		lambdaClient *lambda.Client
		sqsClient    *sqs.Client
		ebClient     *eventbridge.Client
		sfnClient    *sfn.Client
		s3Client     *s3.Client
	)
	for _, c := range cfgs {
		if c.Target == "" {
			e := &HTTPEffect{Name: c.Kind, URL: c.URL, StatusURL: c.StatusURL, Window: c.Window(),
				Scopes: c.Scopes, Client: &http.Client{Timeout: c.Timeout()}}
			if ref := c.Secret; ref != "" {
				e.Token = func(ctx context.Context) (string, error) { return secrets.Value(ctx, ref) }
			}
			out[c.Kind] = e
			continue
		}
		if isS3Target(c.Target) {
			bucket, prefix, err := warehouse.ParseTarget(c.Target)
			if err != nil {
				return nil, fmt.Errorf("%w: effect %q: target: %v", ErrConfig, c.Kind, err)
			}
			if s3Client == nil {
				s3Client = s3.NewFromConfig(awsCfg, S3PathStyle)
			}
			out[c.Kind] = &WarehouseEffect{Name: c.Kind, Bucket: bucket, Prefix: prefix, Client: s3Client, Timeout: c.Timeout(), Scopes: c.Scopes}
			continue
		}
		t, err := ParseTarget(c.Target, awsCfg.Region)
		if err != nil {
			return nil, fmt.Errorf("%w: effect %q: target: %v", ErrConfig, c.Kind, err)
		}
		switch t.Kind {
		case TargetLambda:
			if lambdaClient == nil {
				lambdaClient = lambda.NewFromConfig(awsCfg)
			}
			out[c.Kind] = &LambdaEffect{Name: c.Kind, Target: t, Client: lambdaClient, Timeout: c.Timeout(), Scopes: c.Scopes}
		case TargetSQS:
			if sqsClient == nil {
				sqsClient = sqs.NewFromConfig(awsCfg)
			}
			out[c.Kind] = &SQSEffect{Name: c.Kind, Target: t, Client: sqsClient, Timeout: c.Timeout(), Scopes: c.Scopes}
		case TargetEventBridge:
			if ebClient == nil {
				ebClient = eventbridge.NewFromConfig(awsCfg)
			}
			out[c.Kind] = &EventBridgeEffect{Name: c.Kind, Target: t, Client: ebClient, Timeout: c.Timeout(), Scopes: c.Scopes, Source: c.EventSource}
		case TargetStepFunctions:
			if sfnClient == nil {
				sfnClient = sfn.NewFromConfig(awsCfg)
			}
			out[c.Kind] = &StepFunctionsEffect{Name: c.Kind, Target: t, Client: sfnClient, Timeout: c.Timeout(), Scopes: c.Scopes}
		}
	}
	return out, nil
}
