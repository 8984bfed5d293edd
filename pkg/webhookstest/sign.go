package webhookstest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// delivery is one event as the kit posts it: a body and, for a scheme
// that carries it beside the body, the id it is signed under.
type delivery struct {
	src  source.Source
	id   string // Standard Webhooks' webhook-id; "" for Stripe
	body []byte
}

// headers signs d at now with secret, as its provider would.
func (d delivery) headers(secret string, now time.Time) (map[string]string, error) {
	switch d.src.Kind {
	case "stripe":
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: d.body, Secret: secret, Timestamp: now})
		return map[string]string{"stripe-signature": p.Header, "content-type": "application/json"}, nil
	case "standard-webhooks":
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, err
		}
		sig, err := wh.Sign(d.id, now, d.body)
		if err != nil {
			return nil, err
		}
		return map[string]string{
			"webhook-id": d.id, "webhook-timestamp": strconv.FormatInt(now.Unix(), 10), "webhook-signature": sig,
			"content-type": "application/json",
		}, nil
	}
	_, err := secretFor(d.src.Kind)
	return nil, err
}

// identify signs d and verifies it with its source's verifier, as the
// intake does: the event id and type it gets, and the bytes a projection
// sees.
func (d delivery) identify(secret string, now time.Time) (provider.Identity, error) {
	h, err := d.headers(secret, now)
	if err != nil {
		return provider.Identity{}, err
	}
	v, err := provider.New(d.src.Kind, d.src.Options)
	if err != nil {
		return provider.Identity{}, err
	}
	got, err := v.Verify(context.Background(), provider.Request{Headers: h, Body: d.body},
		provider.Config{Secrets: []string{secret}, Now: func() time.Time { return now }})
	switch {
	case err != nil:
		return provider.Identity{}, fmt.Errorf("the %s verifier refuses it: %w", d.src.Kind, err)
	case got.Unidentified != "":
		return provider.Identity{}, fmt.Errorf("the %s verifier finds no event in it: %s", d.src.Kind, got.Unidentified)
	case len(got.Events) != 1:
		return provider.Identity{}, fmt.Errorf("the %s verifier finds %d events in it; the kit delivers one per body", d.src.Kind, len(got.Events))
	}
	id := got.Events[0]
	if id.Payload == nil {
		id.Payload = d.body
	}
	return id, nil
}

// resent is d re-sent under another event id: the same fact, as a sender
// that sends it again (a replay tool, a second endpoint) does. A Stripe
// event's id is in its body, so the body's "id" changes; every other
// field is kept as sent.
func (d delivery) resent(suffix string) (delivery, error) {
	out := d
	switch d.src.Kind {
	case "stripe":
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.body, &obj); err != nil {
			return d, fmt.Errorf("a Stripe event body is a JSON object: %w", err)
		}
		var id string
		if err := json.Unmarshal(obj["id"], &id); err != nil || id == "" {
			return d, errors.New("a Stripe event body has its id in \"id\"")
		}
		obj["id"], _ = json.Marshal(id + suffix)
		b, err := json.Marshal(obj)
		if err != nil {
			return d, err
		}
		out.body = b
	default:
		out.id = d.id + suffix
	}
	return out, nil
}

// bodyID is the id the kit gives a Standard Webhooks event that has none:
// derived from its body, so one fact keeps one id.
func bodyID(body []byte) string {
	sum := sha256.Sum256(body)
	return "msg_" + hex.EncodeToString(sum[:8])
}
