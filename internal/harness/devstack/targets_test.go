package devstack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// shipmentModule is a team's module in miniature (testdata/shopmodule):
// the shape of the example shop, with rules that turn Stripe's
// payment_intent.succeeded into the order's ship_order (while_current,
// status=paid) and send_confirmation (once), the shop's fulfilment
// function as ship_order's Lambda target, and the shop's dev.json.
const shipmentModule = "internal/harness/devstack/testdata/shopmodule"

// shipments reads the fulfilment function's own record (example.com/shop/
// fulfilment, shipments.jsonl in its state directory): the operation ids
// it shipped, one line per shipment.
func shipments(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "shipments.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var sh struct {
			OperationID string `json:"operation_id"`
			Order       string `json:"order"`
		}
		if err := json.Unmarshal([]byte(line), &sh); err != nil {
			t.Fatalf("shipments.jsonl: %q: %v", line, err)
		}
		ops = append(ops, sh.OperationID+" "+sh.Order)
	}
	return ops
}

// TestAPaymentShipsTheOrderOnceThroughTheTeamsLambda runs the local stack
// with a team's module whose ship_order effect is its own Lambda function
// (the shop's fulfilment, under aws-lambda-rie behind the local Lambda
// front). One signed Stripe payment_intent.succeeded ships the order
// exactly once, by the function's own record; the webhook's redelivery,
// a duplicate announcement of the intent and a repeated invocation of
// the function with the same operation id add no shipment.
func TestAPaymentShipsTheOrderOnceThroughTheTeamsLambda(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stack test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stack, file, logs := devstack.StartModuleForTest(t, ctx, shipmentModule)
	if !strings.Contains(logs.String(), "effect function fulfilment: arn:aws:lambda:us-east-1:000000000000:function:fulfilment") {
		t.Fatalf("the stack does not run the fulfilment function:\n%s", logs.Tail(40))
	}
	secret := file.Secrets["LOCAL_SHOP_STRIPE_WEBHOOK_SECRET"]

	const id, order, pi = "evt_local_ship_1", "O-2001", "pi_local_ship_1"
	body := shopPayment(id, pi, order)
	post := func() (int, string) { return postShopStripe(ctx, t, stack, secret, body) }
	// WHEN the payment is delivered
	if code, b := post(); code != http.StatusAccepted {
		t.Fatalf("delivery: %d %s\n%s", code, b, logs.Tail(40))
	}
	l, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		t.Fatal(err)
	}
	ship := projection.ScopedOperationID("shop-stripe", projection.OperationID(order, "ship", pi))
	confirm := projection.ScopedOperationID("shop-stripe", projection.OperationID(order, "confirm", pi))
	wait := func(op string) ledger.IntentState {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			in, err := l.GetIntentState(ctx, op)
			if err == nil && in.Status == ledger.IntentStatusSucceeded {
				return in
			}
			if time.Now().After(deadline) {
				t.Fatalf("intent %s: %+v %v\n%s", op, in, err, logs.Tail(60))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// THEN both effects succeed: the shipment through the function, the
	// confirmation through the fake downstream
	wait(ship)
	wait(confirm)
	dir := stack.Targets.StateDir("fulfilment")
	want := []string{ship + " " + order}
	if got := shipments(t, dir); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the function's record %v, want one shipment %v\n%s", got, want, logs.Tail(40))
	}
	if n := stack.Targets.Lambda.Invocations("fulfilment"); n != 1 {
		t.Fatalf("%d invocations of the function, want 1", n)
	}
	if n := stack.Downstream.Fake("send_confirmation").EffectiveByKey()[confirm]; n != 1 {
		t.Fatalf("confirmation effective %d times", n)
	}

	// WHEN the webhook is redelivered and the intent announced again (a
	// second reconciler, a duplicate announcement)
	if code, b := post(); code != http.StatusOK || !strings.Contains(b, "duplicate") {
		t.Fatalf("redelivery: %d %s", code, b)
	}
	if _, err := (queue.Sender{Client: stack.SQS, URL: stack.EffectsQueues.Queue}).SendIntents(ctx,
		[]queue.IntentPointer{{OperationID: ship, Reason: "duplicate"}}); err != nil {
		t.Fatal(err)
	}
	// (the pointer is consumed: the effects queue drains)
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := depth(ctx, stack, stack.EffectsQueues.Queue)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("effects queue not drained: %d %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// THEN nothing is shipped again: the intent is SUCCEEDED, so the
	// function is not called
	if got := shipments(t, dir); len(got) != 1 {
		t.Fatalf("after the redelivery: %v", got)
	}
	if n := stack.Targets.Lambda.Invocations("fulfilment"); n != 1 {
		t.Fatalf("%d invocations after the redelivery, want 1", n)
	}

	// AND the function itself is idempotent by operation id: the same call
	// invoked again (what an uncertain dispatch may do inside a target's
	// deduplication window) answers applied and replayed, and ships nothing
	call, _ := json.Marshal(outbox.TargetCall{OperationID: ship, Kind: "ship_order", Scope: "shop-stripe", Source: "shop-stripe", Subject: order})
	cfg := localaws.Config()
	client := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.BaseEndpoint = aws.String(stack.Targets.Lambda.URL) })
	out, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("arn:aws:lambda:us-east-1:000000000000:function:fulfilment"), Payload: call})
	if err != nil || out.FunctionError != nil {
		t.Fatalf("invoke: %v %v", err, out)
	}
	var ans outbox.LambdaAnswer
	if err := json.Unmarshal(out.Payload, &ans); err != nil || ans.Status != outbox.LambdaApplied || !ans.Replayed {
		t.Fatalf("answer %s: %v", out.Payload, err)
	}
	if got := shipments(t, dir); len(got) != 1 {
		t.Fatalf("after a repeated invocation: %v", got)
	}
	// AND GET /_dev/targets shows the function's invocations
	resp, err := http.Get(stack.HTTPURL() + "/_dev/targets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st devstack.TargetsState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Invocations["fulfilment"] != 2 {
		t.Fatalf("/_dev/targets: %+v %v", st, err)
	}
}

// depth is a queue's visible and in-flight messages.
func depth(ctx context.Context, stack *devstack.Stack, url string) (int, error) {
	out, err := stack.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		c, _ := strconv.Atoi(v)
		n += c
	}
	return n, nil
}

// The local configuration's targets are checked when it is loaded: in
// the local region and account, and a Lambda function target one of the
// effect functions.
func TestALocalTargetIsCheckedWhenTheConfigurationIsLoaded(t *testing.T) {
	for name, c := range map[string]struct {
		effect    string
		functions string
		says      string
	}{
		"another region": {`"target":"arn:aws:states:eu-west-1:000000000000:stateMachine:ship"`, `[]`,
			"is in region eu-west-1, the dispatcher runs in us-east-1"},
		"another account": {`"target":"arn:aws:events:us-east-1:123456789012:event-bus/orders"`, `[]`,
			"the local targets are in account 000000000000"},
		"a function not run": {`"target":"arn:aws:lambda:us-east-1:000000000000:function:fulfilment"`, `[]`,
			`no effect function "fulfilment"`},
		"a pipeline function": {`"target":"arn:aws:lambda:us-east-1:000000000000:function:dispatcher"`, `["dispatcher"]`,
			`"dispatcher" is a function of the pipeline`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev.json")
			doc := `{"sources_config":{"sources":[{"name":"shop-stripe","kind":"stripe","secrets":["env:S"]}]},` +
				`"effects_config":{"effects":[{"kind":"ship_order",` + c.effect + `,"scopes":["shop-stripe"]}]},` +
				`"effect_functions":` + c.functions + `,"secrets":{"S":"whsec_local_FAKE"}}`
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, err := devstack.LoadFile(path); err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "effects_config") {
				t.Fatalf("err %v, want one saying %q", err, c.says)
			}
		})
	}
	// The shop's own dev.json names its fulfilment function as ship_order's
	// target.
	f, _, err := devstack.LoadFile("../../../examples/shop/" + devstack.TeamConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := outbox.ParseEffects(f.Effects)
	if err != nil || len(f.EffectFunctions) != 1 || f.EffectFunctions[0] != "fulfilment" {
		t.Fatalf("%+v %v", f.EffectFunctions, err)
	}
	for _, c := range cfgs {
		if c.Kind == "ship_order" && c.Target != "arn:aws:lambda:us-east-1:000000000000:function:fulfilment" {
			t.Fatalf("ship_order's target %q", c.Target)
		}
	}
}
