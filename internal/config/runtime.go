package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/source"
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
	// Owner names this instance in leases and audit entries (OwnerName).
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
	r.AWS.HTTPClient = OneWrite(r.AWS.HTTPClient)
	stream := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	r.Owner = OwnerName(function, stream, ledger.RandomTokens())
	if stream != "" {
		r.Log.Info("owner", "owner", r.Owner, "log_stream", stream)
	}
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

// OwnerName names one runtime in leases and audit entries:
// "<function>/<stream id>.<random>", for example
// "processor/9f3c61ab.4e02d7". The stream id is the last 8 letters and
// digits of the Lambda log stream name ("2026/12/02/[$LATEST]" and 32 hex
// digits, one per execution environment), so an operator finds the
// stream from the owner (Start also logs the pair once); the random part
// tells apart the runtimes Lambda restarts in the same environment after
// a crash, which keep the stream. Without a stream (outside Lambda) it is
// "<function>/<8 random>".
//
// The name is short on purpose: it is written in the lease and in two
// audit entries of every event the runtime processes, and every later
// write of the item pays for those bytes again. The full stream name (about
// 52 characters) pushed a processed event with a small inline payload past
// 1 KB, doubling the write units of its commit and of each duplicate.
func OwnerName(function, stream, random string) string {
	var id []byte
	for i := len(stream) - 1; i >= 0 && len(id) < 8; i-- {
		c := stream[i]
		if c == ']' || c == '/' {
			break
		}
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			id = append(id, c)
		}
	}
	if len(id) == 0 {
		return function + "/" + random[:min(8, len(random))]
	}
	slices.Reverse(id)
	return function + "/" + string(id) + "." + random[:min(6, len(random))]
}
