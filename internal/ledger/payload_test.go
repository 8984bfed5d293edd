package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// chunked is a payload stored in chunk items (incompressible enough).
func chunked(id string) string {
	var b strings.Builder
	x := uint32(len(id))
	for b.Len() < 8<<10 {
		x = x*1664525 + 1013904223
		b.WriteByte(byte('a' + x>>27))
	}
	return `{"id":"` + id + `","pad":"` + b.String() + `"}`
}

// acceptWithoutChunks accepts a delivery through an intake that dies
// after the event's row, before its first chunk.
func acceptWithoutChunks(t *testing.T, f fixture, id, payload string) ledger.Event {
	t.Helper()
	f.Rec.Arm(awstrace.Crash{Op: "DynamoDB.PutItem", Nth: 1, When: awstrace.Before})
	if _, err := f.L.Accept(context.Background(), delivery(id, payload)); err == nil {
		t.Fatal("setup: accept succeeded through a crash before the chunks")
	}
	f.Rec.Reset()
	ev, err := f.L.Get(context.Background(), "stripe", id)
	if err != nil || ev.Status != ledger.StatusReceived || ev.PayloadChunks == 0 {
		t.Fatalf("setup: %+v %v; want a RECEIVED row with a chunked payload", ev, err)
	}
	return ev
}

// A chunk that was never stored is ErrPayloadMissing (only the
// provider's retry can bring it); a stored chunk whose bytes are wrong is
// ErrUnavailable. Neither is the other.
func TestPayloadMissingIsNotUnreadable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	missing := acceptWithoutChunks(t, f, "evt_missing", chunked("evt_missing"))
	if _, err := f.L.Payload(ctx, missing); !errors.Is(err, ledger.ErrPayloadMissing) || errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("never stored: %v; want ErrPayloadMissing only", err)
	}

	if _, err := f.L.Accept(ctx, delivery("evt_corrupt", chunked("evt_corrupt"))); err != nil {
		t.Fatal(err)
	}
	ev, err := f.L.Get(ctx, "stripe", "evt_corrupt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.Table), Item: map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: "EV#stripe#evt_corrupt"},
		"sk":   &types.AttributeValueMemberS{Value: fmt.Sprintf("PL#%s#0", ev.PayloadHash)},
		"data": &types.AttributeValueMemberB{Value: []byte("not the payload")},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.L.Payload(ctx, ev); !errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ledger.ErrPayloadMissing) {
		t.Fatalf("stored, unreadable: %v; want ErrUnavailable only", err)
	}
}

// The provider's retry of a delivery whose chunks were never stored,
// arriving while a worker holds the row: the chunks are written (the
// worker finds them at its next look), the row is left to the worker.
// The worker, which found them missing before, waits (AwaitPayload: no
// attempt spent); a later retry reopens the row, once, even when the
// answer of the reopening is lost and the SDK sends it again.
func TestDuplicateRestoresAMissingPayload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	payload := chunked("evt_inflight")
	acceptWithoutChunks(t, f, "evt_inflight", payload)
	c, err := f.L.Claim(ctx, "stripe", "evt_inflight", ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.L.Accept(ctx, delivery("evt_inflight", payload))
	if err != nil || res.Event.Status != ledger.StatusProcessing {
		t.Fatalf("retry while PROCESSING: %+v %v", res.Event, err)
	}
	if raw, err := f.L.Payload(ctx, c.Event); err != nil || string(raw) != payload {
		t.Fatalf("after the retry: payload %d bytes, %v; want it stored", len(raw), err)
	}

	if err := f.L.AwaitPayload(ctx, c, "not found", f.Clock.Now().Add(15*time.Minute)); err != nil {
		t.Fatal(err)
	}
	ev, _ := f.L.Get(ctx, "stripe", "evt_inflight")
	if ev.Status != ledger.StatusRetryWait || ev.ErrorCode != ledger.CodePayloadMissing || ev.Attempts != 0 || ev.TotalAttempts != 1 {
		t.Fatalf("after AwaitPayload: %s (%s), attempts %d of %d; want RETRY_WAIT %s, the attempt given back", ev.Status, ev.ErrorCode, ev.Attempts, ev.TotalAttempts, ledger.CodePayloadMissing)
	}

	f.Rec.Reset()
	f.Rec.Arm(awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.Lost}) // the upsert, then the reopening
	res, err = f.L.Accept(ctx, delivery("evt_inflight", payload))
	if err != nil || res.Event.Status != ledger.StatusReceived || !res.Duplicate {
		t.Fatalf("retry of a row waiting for its payload: %+v %v; want it reopened RECEIVED", res.Event, err)
	}
	ev, _ = f.L.Get(ctx, "stripe", "evt_inflight")
	arrived := 0
	for _, a := range ev.Audit {
		if a.Action == "payload_arrived" {
			arrived++
			if a.From != ledger.StatusRetryWait || a.To != ledger.StatusReceived {
				t.Fatalf("reopening audited %s → %s", a.From, a.To)
			}
		}
	}
	if ev.Status != ledger.StatusReceived || ev.Attempts != 0 || arrived != 1 || f.Rec.Lost() != 1 {
		t.Fatalf("after the reopening: %s, attempts %d, %d payload_arrived entries, %d answers lost; want RECEIVED, 0, 1, 1", ev.Status, ev.Attempts, arrived, f.Rec.Lost())
	}
}

// A duplicate of a row whose payload a worker did read (here one waiting
// for a retry after a failed commit) writes no chunk and reopens nothing.
func TestDuplicateOfARowWithItsPayloadWritesNoChunk(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	payload := chunked("evt_read")
	if _, err := f.L.Accept(ctx, delivery("evt_read", payload)); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "stripe", "evt_read", ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RetryLater(ctx, c, "commit_failed", "throttled", f.Clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.Rec.Reset()
	res, err := f.L.Accept(ctx, delivery("evt_read", payload))
	if err != nil || res.Event.Status != ledger.StatusRetryWait {
		t.Fatalf("duplicate: %+v %v", res.Event, err)
	}
	if got := f.Rec.Counts(); got["DynamoDB.PutItem"] != 0 || got["DynamoDB.UpdateItem"] != 1 {
		t.Fatalf("a duplicate of a row with its payload made %v; want the one upsert", got)
	}
}
