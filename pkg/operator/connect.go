package operator

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// The `make dev` stack's defaults (pkg/harness/devstack, Config.defaults): where its
// emulators listen unless DEV_DYNAMODB_ADDR / DEV_SQS_ADDR say otherwise,
// its table, and its queue name prefix.
const (
	LocalDynamoAddr = "127.0.0.1:8000"
	LocalSQSAddr    = "127.0.0.1:4100"
	LocalTable      = "local-ledger"
	LocalPrefix     = "local-"
	// The emulators' region and visibly fake credentials (the values of
	// package localaws, which webhookctl does not link: it ships; a test
	// keeps the two equal).
	LocalRegion    = "us-east-1"
	LocalAccessKey = "AKIDLOCALFAKEKEY"
	LocalSecretKey = "local-fake-secret-not-a-real-key"
)

// Connect builds the clients. With s.Local it targets the `make dev` stack
// with the emulators' visibly fake credentials, and no STS client (there is
// no AWS identity to verify); otherwise it uses the normal AWS
// configuration chain (profile, environment, SSO, instance role), which
// also honours AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS and
// AWS_ENDPOINT_URL_STS. Connecting calls nothing: STS is asked only before
// a write.
func Connect(ctx context.Context, s Settings, getenv func(string) string) (Clients, error) {
	if s.Local {
		dynAddr, sqsAddr := getenv("DEV_DYNAMODB_ADDR"), getenv("DEV_SQS_ADDR")
		if dynAddr == "" {
			dynAddr = LocalDynamoAddr
		}
		if sqsAddr == "" {
			sqsAddr = LocalSQSAddr
		}
		cfg := aws.Config{Region: LocalRegion, Credentials: credentials.NewStaticCredentialsProvider(LocalAccessKey, LocalSecretKey, "")}
		return Clients{
			DynamoDB: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String("http://" + dynAddr) }),
			SQS:      sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + sqsAddr) }),
		}, nil
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return Clients{}, fmt.Errorf("%w: load AWS config: %w", ErrConfig, err)
	}
	if cfg.Region == "" {
		return Clients{}, fmt.Errorf("%w: no AWS region: set AWS_REGION or a profile with a region (or --local for the `make dev` stack)", ErrConfig)
	}
	return Clients{DynamoDB: dynamodb.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), STS: sts.NewFromConfig(cfg)}, nil
}
