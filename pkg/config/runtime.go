package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/metrics"
	"github.com/effectively-once/webhooks/pkg/source"
)

// Runtime is what every function builds once at cold start, after its
// configuration was validated: the AWS configuration (default chain,
// including AWS_ENDPOINT_URL_* on a local stack), the logger, the metrics
// emitter, the secret cache, and the ledger.
type Runtime struct {
	AWS     aws.Config
	Log     *slog.Logger
	Metrics *metrics.Emitter
	Secrets *source.Secrets
	Ledger  *ledger.Ledger
	// Owner names this instance in leases and audit entries: the Lambda
	// log stream (one per execution environment) plus a random suffix.
	Owner string
}

// Start builds the Runtime of function. actor is the ledger's audit actor;
// empty means Owner (workers that hold leases name themselves).
func (c Common) Start(ctx context.Context, function, actor string) (Runtime, error) {
	r := Runtime{Log: c.Logger(function), Metrics: c.Metrics()}
	var err error
	if r.AWS, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
		return Runtime{}, fmt.Errorf("load AWS config: %w", err)
	}
	stream := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	if stream == "" {
		stream = function
	}
	r.Owner = stream + "/" + ledger.RandomTokens()[:8]
	if actor == "" {
		actor = r.Owner
	}
	if r.Ledger, err = ledger.New(dynamodb.NewFromConfig(r.AWS), ledger.Options{Table: c.Table, Retention: c.Retention, Actor: actor, DueShards: c.DueShards, DueShardsRead: c.DueShardsRead}); err != nil {
		return Runtime{}, err
	}
	r.Secrets = &source.Secrets{SM: secretsmanager.NewFromConfig(r.AWS)}
	if c.EnvSecret {
		r.Secrets.Getenv = os.Getenv
	}
	return r, nil
}
