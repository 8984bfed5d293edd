package fulfilment_test

import (
	"context"
	"testing"

	"example.com/shop/fulfilment"
)

func TestAnOrderShipsOncePerOperationIDAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	call := fulfilment.Call{OperationID: "op-1", Kind: fulfilment.Kind, Scope: "shop-stripe", Subject: "O-1001", Version: "7"}
	// GIVEN the function, which ships the order
	a, err := fulfilment.New(dir).Handle(context.Background(), call)
	if err != nil || a != (fulfilment.Answer{Status: "applied"}) {
		t.Fatalf("first call: %+v %v", a, err)
	}
	// WHEN the same operation comes again, to a new execution environment
	a, err = fulfilment.New(dir).Handle(context.Background(), call)
	// THEN it is applied, replayed, and the record holds one shipment
	if err != nil || a != (fulfilment.Answer{Status: "applied", Replayed: true}) {
		t.Fatalf("repeat: %+v %v", a, err)
	}
	got, err := fulfilment.Shipments(dir)
	if err != nil || len(got) != 1 || got[0].OperationID != "op-1" || got[0].Order != "O-1001" {
		t.Fatalf("record %+v %v", got, err)
	}
	// AND another operation of the same order ships again (a new order
	// line, a new operation id)
	call.OperationID = "op-2"
	if a, _ := fulfilment.New(dir).Handle(context.Background(), call); a.Status != "applied" || a.Replayed {
		t.Fatalf("second operation: %+v", a)
	}
}

func TestACallOfAnotherKindOrWithoutAnOrderIsRejected(t *testing.T) {
	s := fulfilment.New("")
	for _, c := range []fulfilment.Call{
		{OperationID: "op-1", Kind: "send_confirmation", Subject: "O-1"},
		{OperationID: "op-1", Kind: fulfilment.Kind},
		{Kind: fulfilment.Kind, Subject: "O-1"},
	} {
		if a, err := s.Handle(context.Background(), c); err != nil || a.Status != "rejected" || a.Reason == "" {
			t.Errorf("%+v: %+v %v", c, a, err)
		}
	}
}
