package projection_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// A team's resolver may fail in ways the processor classifies: the
// helpers carry their code and least wait.
func TestRetryableErrors(t *testing.T) {
	cause := errors.New("busy")
	code, after, ok := projection.AsRetryable(fmt.Errorf("wrapped: %w", projection.RetryAfter("shop_api_unavailable", cause, 3*time.Second)))
	if !ok || code != "shop_api_unavailable" || after != 3*time.Second {
		t.Fatalf("%s %s %v", code, after, ok)
	}
	if _, after, _ := projection.AsRetryable(projection.RetryAfter("c", cause, -time.Second)); after != 0 {
		t.Fatalf("a negative wait kept: %s", after)
	}
	if err := projection.Retryable("c", cause); !errors.Is(err, cause) || err.Error() != "c: busy" {
		t.Fatalf("%v", err)
	}
	if _, _, ok := projection.AsRetryable(cause); ok {
		t.Fatal("a plain error is not marked retryable")
	}
}
