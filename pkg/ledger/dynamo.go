package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func sv(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func nv(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func join(parts []string) string { return strings.Join(parts, ", ") }

// translate maps DynamoDB errors onto the ledger's closed set. It is the only
// place that knows AWS exception names (STYLE.md: translate at the adapter).
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
		for _, r := range tce.CancellationReasons {
			if r.Code != nil && (*r.Code == "TransactionConflict" || *r.Code == "ThrottlingError" || *r.Code == "ProvisionedThroughputExceeded") {
				return fmt.Errorf("%w: %v", ErrConflict, err)
			}
		}
		return fmt.Errorf("%w: %v", ErrConflict, err)
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

// IsRetryable reports whether err is worth retrying later.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConflict)
}
