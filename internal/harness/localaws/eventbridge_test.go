package localaws_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

func entry(bus, detail string) types.PutEventsRequestEntry {
	return types.PutEventsRequestEntry{EventBusName: aws.String(bus), Source: aws.String("local.test"),
		DetailType: aws.String("thing.happened"), Detail: aws.String(detail)}
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// The local PutEvents answers as the API reference says, through the real
// SDK client: results in request order with FailedEntryCount, failed
// entries not put, and the request-level limits refused whole.
func TestLocalEventBridgePutEventsContract(t *testing.T) {
	ctx := context.Background()
	eb := localaws.NewEventBridge("eu-west-1", "123456789012")
	defer eb.Close()
	bus := eb.CreateBus("orders")
	c := eb.Client()

	// GIVEN a good entry, one without Detail, one with a Detail that is
	// not a JSON object, and one for a bus that does not exist.
	out, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{
		entry(bus, `{"operation_id":"op-1"}`),
		{EventBusName: aws.String(bus), Source: aws.String("local.test"), DetailType: aws.String("x")},
		entry(bus, `[1,2]`),
		entry(eb.BusARN("nope"), `{}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// THEN each answer is in its entry's place, and only the good one is put.
	want := []string{"", "InvalidArgument", "MalformedDetail", "ResourceNotFoundException"}
	if out.FailedEntryCount != 3 || len(out.Entries) != 4 {
		t.Fatalf("FailedEntryCount %d, %d entries", out.FailedEntryCount, len(out.Entries))
	}
	for i, w := range want {
		if got := aws.ToString(out.Entries[i].ErrorCode); got != w || (w == "") != (out.Entries[i].EventId != nil) {
			t.Fatalf("entry %d: code %q event id %v, want code %q", i, got, out.Entries[i].EventId, w)
		}
	}
	if evs := eb.Events("orders"); len(evs) != 1 || evs[0].Detail != `{"operation_id":"op-1"}` || evs[0].ID != aws.ToString(out.Entries[0].EventId) {
		t.Fatalf("events put: %+v", evs)
	}

	// An injected entry failure is answered as EventBridge answers one and
	// nothing is put.
	eb.FailEntries("ThrottlingException")
	out, err = c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry(bus, `{}`)}})
	if err != nil || out.FailedEntryCount != 1 || aws.ToString(out.Entries[0].ErrorCode) != "ThrottlingException" {
		t.Fatalf("injected entry failure: %+v %v", out, err)
	}
	if n := len(eb.Events("")); n != 1 {
		t.Fatalf("%d events after a failed entry, want 1", n)
	}

	// The request as a whole: 0 or 11 entries, entries of 1 MB together,
	// no complete entry, an injected 500.
	var eleven []types.PutEventsRequestEntry
	for range 11 {
		eleven = append(eleven, entry(bus, `{}`))
	}
	big := entry(bus, `{"x":"`+strings.Repeat("a", 1048576-30)+`"}`)
	for name, in := range map[string][]types.PutEventsRequestEntry{
		"eleven entries": eleven,
		"1 MB":           {big},
		"no complete":    {{EventBusName: aws.String(bus), Source: aws.String("s")}},
	} {
		if _, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: in}); errorCode(err) != "ValidationException" {
			t.Errorf("%s: %v, want ValidationException", name, err)
		}
	}
	eb.FailNext(500, "InternalException")
	if _, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry(bus, `{}`)}}, func(o *eventbridge.Options) { o.Retryer = aws.NopRetryer{} }); errorCode(err) != "InternalException" {
		t.Fatalf("injected request failure: %v", err)
	}
	if n := len(eb.Events("")); n != 1 {
		t.Fatalf("%d events after refused requests, want 1", n)
	}
}
