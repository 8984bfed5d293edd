package intake

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// HandleHTTPAPI adapts an API Gateway HTTP API (payload format 2.0) event to
// Handle. A body the gateway base64-encoded is decoded first, so the
// signature is checked on the bytes the provider sent.
func (h *Handler) HandleHTTPAPI(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp := h.handleHTTPAPI(ctx, ev)
	return events.APIGatewayV2HTTPResponse{
		StatusCode: resp.Status,
		Headers:    map[string]string{"content-type": "application/json"},
		Body:       string(resp.Body),
	}, nil
}

func (h *Handler) handleHTTPAPI(ctx context.Context, ev events.APIGatewayV2HTTPRequest) Response {
	if ev.RequestContext.HTTP.Method != "" && ev.RequestContext.HTTP.Method != http.MethodPost {
		return reply(http.StatusMethodNotAllowed, map[string]any{"error": "POST only"})
	}
	headers := make(map[string]string, len(ev.Headers))
	for k, v := range ev.Headers {
		headers[strings.ToLower(k)] = v
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		// Bound the work before decoding: the decoded size is at most 3/4.
		if len(ev.Body)/4*3 > ledger.MaxPayloadBytes+3 {
			return reply(http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large", "limit_bytes": ledger.MaxPayloadBytes})
		}
		dec, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return reply(http.StatusBadRequest, map[string]any{"error": "body is not valid base64"})
		}
		body = dec
	}
	return h.Handle(ctx, Request{
		Source:    ev.PathParameters["source"],
		Headers:   headers,
		Body:      body,
		RequestID: ev.RequestContext.RequestID,
	})
}

// New builds the intake function's handler from its configuration and the
// runtime its cold start built (config.Common.Start): what the intake's
// composition root serves.
func New(cfg config.Intake, rt config.Runtime) *Handler {
	return &Handler{
		Sources: cfg.Sources, Secrets: rt.Secrets, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
}
