package state_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/pkg/state"
)

// A team's service reads an order's canonical state and what became of
// its effects. Its role needs only the construct's GrantReadState (and
// GrantReadIntents for the intents).
func ExampleReader_Subject() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		panic(err)
	}
	r := state.New(dynamodb.NewFromConfig(cfg), "webhooks-prod-ledger")
	order, err := r.Subject(ctx, "shop-stripe", "order", "O-1001")
	if errors.Is(err, state.ErrNotFound) {
		fmt.Println("no such order yet")
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(order.State["status"], order.Version)
	for _, in := range order.Intents {
		fmt.Println(in.Kind, in.Status, in.Status.Done())
	}
}
