package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/effectively-once/webhooks/internal/source"
)

// Errors.
var (
	// ErrTruthUnavailable: the source of truth could not answer now.
	ErrTruthUnavailable = errors.New("reconciler: source of truth unavailable")
	// ErrTruthInvalid: it answered with something this code cannot use.
	ErrTruthInvalid = errors.New("reconciler: source of truth answer invalid")
)

// Fact is what a source of truth says now about one subject, shaped like
// the source's own webhook body so the source's projection reads it.
type Fact struct {
	// EventID is the provider's event id when the fact is an event the
	// provider keeps (Stripe); otherwise empty, and the reconciler derives
	// a deterministic id from the body.
	EventID   string
	EventType string
	Payload   []byte
}

// SourceOfTruth answers "what are your current facts changed since?".
type SourceOfTruth interface {
	Facts(ctx context.Context, since time.Time, limit int) ([]Fact, error)
}

// MaxFactBytes bounds one fact's body.
const MaxFactBytes = 256 << 10

// HTTPTruth is a generic source of truth, such as an order service's for a
// Standard Webhooks orders source:
//
//	GET <URL>?since=<RFC 3339>&limit=<n>   Authorization: Bearer <token>
//	200 {"facts":[{"id":"optional event id","type":"order.updated",
//	               "body":{"type":"order.updated","data":{"id":"O-42","revision":12,...}}}]}
//
// Each body is what the source's webhook would carry for the subject's
// current revision.
type HTTPTruth struct {
	URL    string
	Token  func(ctx context.Context) (string, error) // optional
	Client *http.Client                              // default: 10 s timeout
}

var _ SourceOfTruth = (*HTTPTruth)(nil)

// Facts asks the endpoint.
func (h *HTTPTruth) Facts(ctx context.Context, since time.Time, limit int) ([]Fact, error) {
	u, err := url.Parse(h.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: url: %v", ErrTruthInvalid, err)
	}
	q := u.Query()
	q.Set("since", since.UTC().Format(time.RFC3339))
	q.Set("limit", strconv.Itoa(limit))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTruthInvalid, err)
	}
	if h.Token != nil {
		tok, err := h.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: token: %v", ErrTruthUnavailable, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	// Never follows a redirect: the token goes only to the configured
	// URL, and only its own answer reaches the ledger.
	resp, err := source.NoRedirects(h.Client).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTruthUnavailable, err)
	}
	defer resp.Body.Close()
	if rerr := source.CheckRedirect(resp); rerr != nil {
		return nil, fmt.Errorf("%w: %v", ErrTruthInvalid, rerr)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: HTTP %d", ErrTruthUnavailable, resp.StatusCode)
	}
	var doc struct {
		Facts []struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Body json.RawMessage `json:"body"`
		} `json:"facts"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(limit+1)*MaxFactBytes)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTruthInvalid, err)
	}
	out := make([]Fact, 0, len(doc.Facts))
	for i, f := range doc.Facts {
		if i == limit {
			break
		}
		if len(f.Body) == 0 || f.Body[0] != '{' || len(f.Body) > MaxFactBytes {
			return nil, fmt.Errorf("%w: facts[%d]: body must be a JSON object of at most %d bytes", ErrTruthInvalid, i, MaxFactBytes)
		}
		typ := f.Type
		if typ == "" {
			var env struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(f.Body, &env)
			typ = env.Type
		}
		if typ == "" {
			return nil, fmt.Errorf("%w: facts[%d]: no type", ErrTruthInvalid, i)
		}
		out = append(out, Fact{EventID: f.ID, EventType: typ, Payload: []byte(f.Body)})
	}
	return out, nil
}

// ReconcileEventID is the id a fact without its own event id is accepted
// under: derived from the source and the body, so every reconciler run that
// sees the same truth feeds the same event (the second is a duplicate).
func ReconcileEventID(source string, f Fact) string {
	if f.EventID != "" {
		return f.EventID
	}
	sum := sha256.Sum256(append([]byte(source+"\x00"+f.EventType+"\x00"), f.Payload...))
	return "reconcile_" + hex.EncodeToString(sum[:12])
}

// BuildTruths makes the sources of truth the configuration declares
// (source.Truth), reading their secrets through secrets (cached).
func BuildTruths(set *source.Set, secrets *source.Secrets) map[string]SourceOfTruth {
	out := map[string]SourceOfTruth{}
	for _, name := range set.Names() {
		src, _ := set.Lookup(name)
		t := src.Truth
		if t == nil {
			continue
		}
		var key func(ctx context.Context) (string, error)
		if ref := t.Secret; ref != "" {
			key = func(ctx context.Context) (string, error) { return secrets.Value(ctx, ref) }
		}
		switch t.Kind {
		case "stripe":
			out[name] = &StripeTruth{Key: key, Backend: NewStripeBackend(t.URL, &http.Client{Timeout: 20 * time.Second})}
		case "http":
			out[name] = &HTTPTruth{URL: t.URL, Token: key}
		}
	}
	return out
}
