package operator

import (
	"context"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// The `make dev` stack's defaults (internal/harness/devstack, Config.defaults): where its
// emulators listen unless DEV_DYNAMODB_ADDR / DEV_SQS_ADDR say otherwise,
// its table, and its queue name prefix.
const (
	LocalDynamoAddr = "127.0.0.1:8000"
	LocalSQSAddr    = "127.0.0.1:4100"
	LocalTable      = "local-ledger"
	LocalPrefix     = "local-"
	// The make-dev stack's warehouse sink: its local S3 (DEV_S3_ADDR), its
	// bucket and its records' prefix; the stack runs them unless
	// DEV_WAREHOUSE=off.
	LocalS3Addr          = "127.0.0.1:4566"
	LocalWarehouseBucket = "local-warehouse"
	LocalWarehousePrefix = "records"
	// The emulators' region and visibly fake credentials (the values of
	// package localaws, which webhookctl does not link: it ships; a test
	// keeps the two equal).
	LocalRegion    = "us-east-1"
	LocalAccessKey = "AKIDLOCALFAKEKEY"
	LocalSecretKey = "local-fake-secret-not-a-real-key"
)

// Connect builds the clients. With s.Local it targets the `make dev` stack
// with the emulators' visibly fake credentials (its local S3 on
// DEV_S3_ADDR), and no STS client (there is
// no AWS identity to verify); otherwise it uses the normal AWS
// configuration chain (profile, environment, SSO, instance role), which
// also honours AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS and
// AWS_ENDPOINT_URL_S3 (and the
// generic AWS_ENDPOINT_URL, a profile's endpoint_url and services) for
// the ledger and the queues, but for no STS request: see identityClient.
// Connecting calls nothing: STS is asked only before a write.
func Connect(ctx context.Context, s Settings, getenv func(string) string) (Clients, error) {
	return ConnectWith()(ctx, s, getenv)
}

// ConnectWith is Connect with more AWS configuration options, applied
// after the chain's (a test's HTTP client, say). They do not reach the
// --local clients.
func ConnectWith(opts ...func(*awsconfig.LoadOptions) error) func(ctx context.Context, s Settings, getenv func(string) string) (Clients, error) {
	return func(ctx context.Context, s Settings, getenv func(string) string) (Clients, error) {
		return connect(ctx, s, getenv, opts)
	}
}

func connect(ctx context.Context, s Settings, getenv func(string) string, opts []func(*awsconfig.LoadOptions) error) (Clients, error) {
	if s.Local {
		dynAddr, sqsAddr := getenv("DEV_DYNAMODB_ADDR"), getenv("DEV_SQS_ADDR")
		if dynAddr == "" {
			dynAddr = LocalDynamoAddr
		}
		if sqsAddr == "" {
			sqsAddr = LocalSQSAddr
		}
		s3Addr := getenv("DEV_S3_ADDR")
		if s3Addr == "" {
			s3Addr = LocalS3Addr
		}
		cfg := aws.Config{Region: LocalRegion, Credentials: credentials.NewStaticCredentialsProvider(LocalAccessKey, LocalSecretKey, "")}
		return Clients{
			DynamoDB: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String("http://" + dynAddr) }),
			SQS:      sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + sqsAddr) }),
			S3:       s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String("http://"+s3Addr), true }),
		}, nil
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return Clients{}, fmt.Errorf("%w: load AWS config: %w", ErrConfig, err)
	}
	if cfg.Region == "" {
		return Clients{}, fmt.Errorf("%w: no AWS region: set AWS_REGION or a profile with a region (or --local for the `make dev` stack)", ErrConfig)
	}
	if !regionName.MatchString(cfg.Region) {
		return Clients{}, fmt.Errorf("%w: AWS region %q is not a region name like eu-west-1", ErrConfig, cfg.Region)
	}
	return Clients{DynamoDB: dynamodb.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), STS: identityClient(cfg), S3: s3.NewFromConfig(cfg, s3PathStyle)}, nil
}

// s3PathStyle makes an S3 client whose endpoint is overridden
// (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL: an S3 emulator) address buckets
// by path, as the dispatcher's and the reconciler's do (outbox.S3PathStyle,
// which webhookctl does not link); against AWS it changes nothing.
func s3PathStyle(o *s3.Options) {
	if o.BaseEndpoint != nil {
		o.UsePathStyle = true
	}
}

// regionName is the shape of every AWS region's name (eu-west-1,
// us-gov-west-1, cn-northwest-1, eusc-de-east-1): the STS host is
// sts.<region>.<partition's domain>, so a "region" with a dot in it would
// name another host.
var regionName = regexp.MustCompile(`^[a-z]{2,}(-[a-z]+)+-[0-9]+$`)

// identityClient is the STS client that asks who the credentials are, for
// the audit (CallerARN). Whatever answers that question chooses the
// identity the audit records, so this client asks the region's own STS
// endpoint (sts.<region>.amazonaws.com; sts-fips or the dual-stack name
// when the configuration asks for those) and ignores every endpoint the
// configuration can name for it: the SDK copies the generic
// AWS_ENDPOINT_URL and a profile's endpoint_url into aws.Config's
// BaseEndpoint, and NewFromConfig reads AWS_ENDPOINT_URL_STS and a
// profile's services section into the client's BaseEndpoint; an
// EndpointResolver or EndpointResolverV2 set in code would do the same.
// The option below runs after all of them and clears each. (The local
// stack has no STS client at all: Connect gives none with --local.)
func identityClient(cfg aws.Config) *sts.Client {
	return sts.NewFromConfig(cfg, func(o *sts.Options) {
		o.BaseEndpoint = nil
		//lint:ignore SA1019 clearing the deprecated resolver is the point: set in code, it would choose the endpoint
		o.EndpointResolver = nil
		o.EndpointResolverV2 = sts.NewDefaultEndpointResolverV2()
	})
}
