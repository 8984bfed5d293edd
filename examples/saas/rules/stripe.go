package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// maxCreated bounds a Stripe event's created (the year 2100), so
// created×4 + rank cannot overflow and stays far below endedTier.
const maxCreated = 4102444800

// stripeEvent is the envelope of a Stripe snapshot event.
type stripeEvent struct {
	Created int64 `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// readEvent reads a Stripe event's envelope and checks its created time.
func readEvent(payload []byte) (stripeEvent, error) {
	var e stripeEvent
	if err := json.Unmarshal(payload, &e); err != nil {
		return e, projection.Permanent("malformed", fmt.Errorf("stripe event is not JSON: %v", err))
	}
	if e.Created <= 0 || e.Created >= maxCreated {
		return e, projection.Permanent("malformed", fmt.Errorf("stripe event created %d is missing or out of range", e.Created))
	}
	return e, nil
}

// objectID reads a Stripe reference that is either an id or an expanded
// object with an id.
func objectID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.ID
}

// checkID refuses an id the ledger cannot key: empty, too long, or with
// control characters.
func checkID(what, id string) error {
	switch {
	case id == "":
		return projection.Permanent("unknown_subject", fmt.Errorf("no %s", what))
	case len(id) > projection.MaxIDLength:
		return projection.Permanent("malformed", fmt.Errorf("%s is longer than %d bytes", what, projection.MaxIDLength))
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return projection.Permanent("malformed", errors.New(what+" has control characters: "+strconv.Quote(id)))
		}
	}
	return nil
}
