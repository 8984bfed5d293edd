package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func sv(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func nv(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func join(parts []string) string { return strings.Join(parts, ", ") }

// unmarshalExact decodes an item into out keeping every number exact:
// typed fields are parsed from the number's text (int64 exactly), and a
// number inside an any (a projection's state, an intent's payload) becomes
// an attributevalue.Number, which exactNumbers turns into json.Number. The
// default decoder makes the latter a float64, which rounds integers above
// 2^53 (an order id, a Stripe deletion's version) and loses digits past 17.
func unmarshalExact(av map[string]types.AttributeValue, out any) error {
	return attributevalue.UnmarshalMapWithOptions(av, out, func(o *attributevalue.DecoderOptions) { o.UseNumber = true })
}

// translate maps DynamoDB errors onto the ledger's closed set. It is the only
// place that knows AWS exception names: callers see the ledger's errors.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var (
		tce      *types.TransactionCanceledException
		throttle *types.ProvisionedThroughputExceededException
		limit    *types.RequestLimitExceeded
		internal *types.InternalServerError
		conflict *types.TransactionConflictException
		inprog   *types.TransactionInProgressException
	)
	switch {
	case errors.As(err, &tce):
		cl := classifyCancellation(tce)
		if cl.kind == ErrInvalid {
			return cl.unstorable(fmt.Sprintf("transaction item %d", cl.index))
		}
		return fmt.Errorf("%w: %v", cl.kind, err)
	case errors.As(err, &conflict), errors.As(err, &inprog):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case errors.As(err, &throttle), errors.As(err, &limit), errors.As(err, &internal):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ThrottlingException", "ServiceUnavailable", "InternalFailure", "RequestLimitExceeded":
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		case "ValidationException", "ResourceNotFoundException":
			// A misconfigured table or a bug: not retryable by waiting, but we
			// still surface it as an error so nothing is acknowledged.
			return fmt.Errorf("ledger store rejected the request: %w", err)
		}
	}
	// Connection errors, timeouts, cancelled contexts: retryable.
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// cancellation is what a cancelled transaction means for its caller,
// decided from its reasons, and the reason that decided it.
type cancellation struct {
	// kind is ErrInvalid (no retry can succeed), ErrUnavailable (throttled:
	// retry with backoff) or ErrConflict (a concurrent writer, or a
	// condition that failed: the caller looks at conditionFailures).
	kind    error
	index   int // the item whose reason decided kind (-1: none did)
	code    string
	message string
}

// classifyCancellation reads a TransactionCanceledException's reasons one
// by one. DynamoDB gives one reason per item of the request, in its order,
// with code "None" (or, in older documentation, a null code) for an item
// without error; the codes and their messages are listed in the API
// reference of TransactWriteItems and TransactionCanceledException:
//
//   - ValidationError: the item cannot be written as asked ("Item size to
//     update has exceeded the maximum allowed size", "Number overflow…",
//     "Nesting Levels have exceeded supported limits", …). Permanent:
//     ErrInvalid, whatever the other items say.
//   - ItemCollectionSizeLimitExceeded: an item collection with a local
//     secondary index is over 10 GB (this table has none). Permanent too.
//   - ThrottlingError, ProvisionedThroughputExceeded (and
//     RequestLimitExceeded, the account-level throttle): ErrUnavailable,
//     worth a retry after a backoff.
//   - TransactionConflict: another transaction holds one of the items:
//     ErrConflict, worth a retry.
//   - ConditionalCheckFailed: the caller's own conditions; ErrConflict
//     here, and the caller reads which item failed (conditionFailures).
//
// An unknown code counts as a conflict: retryable, so a code this list
// does not know is retried rather than taken for permanent.
func classifyCancellation(tce *types.TransactionCanceledException) cancellation {
	out := cancellation{kind: ErrConflict, index: -1}
	rank := 0 // 3 permanent, 2 throttled, 1 conflict
	for i, r := range tce.CancellationReasons {
		code := aws.ToString(r.Code)
		var kind error
		var k int
		switch code {
		case "", "None":
			continue
		case "ValidationError", "ItemCollectionSizeLimitExceeded":
			kind, k = ErrInvalid, 3
		case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			kind, k = ErrUnavailable, 2
		default: // TransactionConflict, ConditionalCheckFailed, unknown
			kind, k = ErrConflict, 1
		}
		if k > rank {
			rank = k
			out = cancellation{kind: kind, index: i, code: code, message: aws.ToString(r.Message)}
		}
	}
	return out
}

// unstorable is the permanent error of a cancellation whose reason is a
// validation error, naming the item it concerns.
func (c cancellation) unstorable(item string) error {
	rule := "DynamoDB refused it (" + c.code
	if c.message != "" {
		rule += ": " + c.message
	}
	return &UnstorableError{Item: item, Rule: rule + ")"}
}

// IsRetryable reports whether err is worth retrying later.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConflict)
}

// exactNumbers turns the numbers of a value decoded with UseNumber into
// json.Number, which encodes as the same digits: exact in the JSON a
// downstream receives, whatever its size.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case attributevalue.Number:
		return json.Number(x)
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
		return x
	}
	return v
}
