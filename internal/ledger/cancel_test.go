package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// cancellingDB answers every TransactWriteItems as DynamoDB does when it
// cancels a transaction: a TransactionCanceledException with one reason
// per item, in the request's order.
type cancellingDB struct {
	ledger.DynamoDB
	reasons []types.CancellationReason
	calls   int
}

func (c *cancellingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls++
	codes := make([]string, len(c.reasons))
	for i, r := range c.reasons {
		codes[i] = aws.ToString(r.Code)
	}
	return nil, &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]"),
		CancellationReasons: c.reasons,
	}
}

// Reasons as the TransactWriteItems API reference lists them: code "None"
// and no message for an item without error.
func none() types.CancellationReason { return types.CancellationReason{Code: aws.String("None")} }

func reason(code, msg string) types.CancellationReason {
	return types.CancellationReason{Code: aws.String(code), Message: aws.String(msg)}
}

const (
	msgThrottling  = "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly. If exceptions persist, check if you have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html."
	msgProvisioned = "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."
	msgConflict    = "Transaction is ongoing for the item."
	msgCondition   = "The conditional request failed."
	msgSize        = "Item size to update has exceeded the maximum allowed size"
	msgOverflow    = "Number overflow. Attempting to store a number with magnitude larger than supported range"
	msgNesting     = "Nesting Levels have exceeded supported limits"
)

// Commit reads a cancelled transaction's reasons one by one: a
// ValidationError is permanent (ErrInvalid, naming the item and DynamoDB's
// message) whatever else failed; throttling is ErrUnavailable; a
// concurrent transaction is ErrConflict; a failed fence is ErrLeaseLost.
// Items: 0 the event, 1 the projection, 2 the intent.
func TestCommitClassifiesCancellationReasons(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		reasons []types.CancellationReason
		want    error
		item    string // for ErrInvalid: the item named
		msg     string
	}{
		{"item too large", []types.CancellationReason{none(), reason("ValidationError", msgSize), none()}, ledger.ErrInvalid, "projection sub/sub_1", msgSize},
		{"number overflow in an intent", []types.CancellationReason{none(), none(), reason("ValidationError", msgOverflow)}, ledger.ErrInvalid, "intent op-c", msgOverflow},
		{"nesting, with a throttled item", []types.CancellationReason{reason("ThrottlingError", msgThrottling), reason("ValidationError", msgNesting), none()}, ledger.ErrInvalid, "projection sub/sub_1", msgNesting},
		{"validation beside a conflict", []types.CancellationReason{none(), reason("TransactionConflict", msgConflict), reason("ValidationError", msgSize)}, ledger.ErrInvalid, "intent op-c", msgSize},
		{"throttled (on-demand)", []types.CancellationReason{none(), none(), reason("ThrottlingError", msgThrottling)}, ledger.ErrUnavailable, "", ""},
		{"throttled (provisioned)", []types.CancellationReason{reason("ProvisionedThroughputExceeded", msgProvisioned), none(), none()}, ledger.ErrUnavailable, "", ""},
		{"throttled beside a conflict", []types.CancellationReason{reason("TransactionConflict", msgConflict), reason("ThrottlingError", msgThrottling), none()}, ledger.ErrUnavailable, "", ""},
		{"a concurrent transaction", []types.CancellationReason{none(), reason("TransactionConflict", msgConflict), none()}, ledger.ErrConflict, "", ""},
		{"null codes and a conflict", []types.CancellationReason{{}, {}, reason("TransactionConflict", msgConflict)}, ledger.ErrConflict, "", ""},
		{"the lease was lost", []types.CancellationReason{reason("ConditionalCheckFailed", msgCondition), none(), none()}, ledger.ErrLeaseLost, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, db := fixtureWithClient(t)
			c := claimedEvent(t, f, "evt_c")
			cdb := &cancellingDB{DynamoDB: db, reasons: tc.reasons}
			l, err := ledger.New(cdb, ledger.Options{Table: "ledger", Clock: f.Clock})
			if err != nil {
				t.Fatal(err)
			}
			w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 1, Fingerprint: "f1", State: map[string]any{"status": "active"}}
			in := ledger.Intent{OperationID: "op-c", Kind: "entitlement.grant", Subject: "sub_1"}
			_, err = l.Commit(ctx, c, w, []ledger.Intent{in})
			if !errors.Is(err, tc.want) {
				t.Fatalf("commit: %v; want %v", err, tc.want)
			}
			if cdb.calls != 1 {
				t.Fatalf("%d transactions; the classification is made on the first answer", cdb.calls)
			}
			if tc.want != ledger.ErrInvalid {
				if tc.want != ledger.ErrLeaseLost && !ledger.IsRetryable(err) {
					t.Fatalf("%v is not retryable", err)
				}
				return
			}
			var ue *ledger.UnstorableError
			if !errors.As(err, &ue) || ledger.IsRetryable(err) {
				t.Fatalf("commit: %v; want a permanent UnstorableError", err)
			}
			if ue.Item != tc.item || !strings.Contains(ue.Rule, "ValidationError: "+tc.msg) {
				t.Fatalf("refusal names %q: %q; want %q and DynamoDB's message %q", ue.Item, ue.Rule, tc.item, tc.msg)
			}
		})
	}
}

// The same classification holds for the commit's second transaction, the
// advance of a projection's version (a newer revision with the same
// state): throttled is ErrUnavailable, a ValidationError permanent.
func TestAdvanceClassifiesCancellationReasons(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		second types.CancellationReason
		want   error
	}{
		{reason("ThrottlingError", msgThrottling), ledger.ErrUnavailable},
		{reason("TransactionConflict", msgConflict), ledger.ErrConflict},
		{reason("ValidationError", msgSize), ledger.ErrInvalid},
	} {
		t.Run(aws.ToString(tc.second.Code), func(t *testing.T) {
			f, db := fixtureWithClient(t)
			c := claimedEvent(t, f, "evt_a1")
			w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 1, Fingerprint: "f1", State: map[string]any{"status": "active"}}
			if _, err := f.L.Commit(ctx, c, w, nil); err != nil {
				t.Fatal(err)
			}
			c = claimedEvent(t, f, "evt_a2")
			// The commit's guard fails (the same state at a newer
			// version); its advance is then cancelled.
			seq := &sequenceDB{DynamoDB: db, answers: [][]types.CancellationReason{
				{none(), reason("ConditionalCheckFailed", msgCondition)},
				{none(), tc.second},
			}}
			l, err := ledger.New(seq, ledger.Options{Table: "ledger", Clock: f.Clock})
			if err != nil {
				t.Fatal(err)
			}
			w2 := *w
			w2.Version = 2
			_, err = l.Commit(ctx, c, &w2, nil)
			if !errors.Is(err, tc.want) || ledger.IsRetryable(err) == (tc.want == ledger.ErrInvalid) {
				t.Fatalf("advance: %v; want %v", err, tc.want)
			}
		})
	}
}

// sequenceDB cancels successive transactions with successive reasons.
type sequenceDB struct {
	ledger.DynamoDB
	answers [][]types.CancellationReason
}

func (s *sequenceDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if len(s.answers) == 0 {
		return s.DynamoDB.TransactWriteItems(ctx, in, opts...)
	}
	r := s.answers[0]
	s.answers = s.answers[1:]
	return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: r}
}
