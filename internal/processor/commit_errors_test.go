package processor_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// cancelling answers every TransactWriteItems as DynamoDB does when it
// cancels the transaction: one reason per item, "None" for the others.
type cancelling struct {
	ledger.DynamoDB
	at     int
	reason types.CancellationReason
	calls  int
}

func (c *cancelling) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls++
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i] = types.CancellationReason{Code: aws.String("None")}
	}
	reasons[c.at] = c.reason
	return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons"), CancellationReasons: reasons}
}

// The processor decides from the ledger's classification of a cancelled
// commit: DynamoDB's ValidationError (the value cannot be stored) is
// quarantined as value_unstorable at the first attempt and the message is
// acknowledged; throttling and a concurrent transaction are transient
// (RETRY_WAIT, the message comes back). Reasons as in the TransactWriteItems
// API reference.
func TestCommitCancellationDecidesQuarantineOrRetry(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		at     int // the item the reason concerns: 0 the event, 1 the projection
		reason types.CancellationReason
		status ledger.Status
		code   string
		msg    string
	}{
		{"item too large", 1, types.CancellationReason{Code: aws.String("ValidationError"), Message: aws.String("Item size to update has exceeded the maximum allowed size")},
			ledger.StatusQuarantined, ledger.CodeUnstorable, "projection stripe/stripe_subscription/sub_v: DynamoDB refused it (ValidationError: Item size to update has exceeded the maximum allowed size)"},
		{"number overflow", 1, types.CancellationReason{Code: aws.String("ValidationError"), Message: aws.String("Number overflow. Attempting to store a number with magnitude larger than supported range")},
			ledger.StatusQuarantined, ledger.CodeUnstorable, "Number overflow"},
		{"throttled", 1, types.CancellationReason{Code: aws.String("ThrottlingError"), Message: aws.String("Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly.")},
			ledger.StatusRetryWait, "commit_failed", "store unavailable"},
		{"provisioned throughput", 0, types.CancellationReason{Code: aws.String("ProvisionedThroughputExceeded"), Message: aws.String("The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.")},
			ledger.StatusRetryWait, "commit_failed", "store unavailable"},
		{"a concurrent transaction", 1, types.CancellationReason{Code: aws.String("TransactionConflict"), Message: aws.String("Transaction is ongoing for the item.")},
			ledger.StatusRetryWait, "commit_failed", "concurrent write conflict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{})
			body := pt.SubscriptionEvent("evt_v", "customer.subscription.created", "sub_v", "active", pt.Start.Unix(), "acct_1")
			if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
				t.Fatalf("deliver: %d", r.Status)
			}
			db := &cancelling{DynamoDB: h.Dynamo.Client(), at: tc.at, reason: tc.reason}
			l, err := ledger.New(db, ledger.Options{Table: h.Table, Clock: h.Clock})
			if err != nil {
				t.Fatal(err)
			}
			p, err := processor.New(l, h.Sources, builtin.Default(builtin.StripeOptions{}), processor.Options{
				Owner: "w", Now: h.Clock.Now, Rand: func() float64 { return 0.5 }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ptr := queue.Pointer{V: 1, Source: "stripe", EventID: "evt_v"}
			failed := p.Process(ctx, []processor.Message{{ID: "m1", Body: ptr.Encode(), ReceiveCount: 1}})
			ev := h.Event("evt_v")
			if ev.Status != tc.status || ev.ErrorCode != tc.code || !strings.Contains(ev.ErrorMessage, tc.msg) {
				t.Fatalf("event %s %s %q; want %s %s with %q", ev.Status, ev.ErrorCode, ev.ErrorMessage, tc.status, tc.code, tc.msg)
			}
			if ev.TotalAttempts != 1 || db.calls != 1 {
				t.Fatalf("%d attempts, %d transactions; want one of each", ev.TotalAttempts, db.calls)
			}
			if retried := len(failed) == 1; retried != (tc.status == ledger.StatusRetryWait) {
				t.Fatalf("batch item failures %v for a %s event", failed, tc.status)
			}
			if h.Projections() != 0 || len(h.Intents()) != 0 {
				t.Fatal("a cancelled commit wrote state")
			}
		})
	}
}
