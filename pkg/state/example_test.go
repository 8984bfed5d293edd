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

// A seat-billing service reads a subscription's two projections (its own
// customer.subscription events, and its invoices projected onto the
// subscription id) as of one instant, and combines them with the team's
// own pure rule: the same function the team's kit test checks.
func ExampleReader_Components() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		panic(err)
	}
	r := state.New(dynamodb.NewFromConfig(cfg), "webhooks-prod-ledger")
	c, err := r.Components(ctx, "saas-stripe", "sub_1Q2w3E", "stripe_subscription", "subscription_payment")
	if errors.Is(err, state.ErrNotFound) {
		fmt.Println("no such subscription yet")
		return
	}
	if err != nil {
		panic(err) // DynamoDB failed, throttled, or a write was in flight: worth a retry
	}
	// access is the team's combine function (in its rules package).
	access := func(states map[string]map[string]any) map[string]any {
		sub, pay := states["stripe_subscription"], states["subscription_payment"]
		switch {
		case sub == nil:
			return map[string]any{"access": "none"}
		case sub["deleted"] == true:
			return map[string]any{"access": "ended"} // a paid invoice never restores it
		case pay != nil && pay["payment"] == "failed":
			return map[string]any{"access": "suspended"}
		}
		return map[string]any{"access": "active"}
	}
	fmt.Println(access(c.States())["access"])
	for name, s := range c.Subjects {
		fmt.Println(name, s.Version) // each component's own version: never compare them
	}
}
