package capacity_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// The published write units hold on the running local stack: the real
// bootstraps under aws-lambda-rie, named from Lambda-shaped log streams,
// billed on the wire by a meter in front of DynamoDB, agree with the
// in-process rig phase by phase, for an inline and a 4 KB event.
func TestTheStackBillsWhatTheRigPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local stack")
	}
	ctx := context.Background()
	sizes := []int{0, 4 << 10}
	var log bytes.Buffer
	stack, err := capacity.MeasureOnStack(ctx, "../../..", &log, sizes)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rig, err := capacity.MeasurePipeline(ctx, sizes, capacity.Realistic)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	capacity.WriteStackTable(&buf, stack, rig)
	t.Log("\n" + buf.String())
	if d := capacity.Disagreements(stack, rig); len(d) > 0 {
		t.Fatalf("the stack and the rig disagree:\n%s", strings.Join(d, "\n"))
	}
	for _, s := range stack {
		if s.EventItemBytes >= 1024 || !strings.HasPrefix(s.Owner, "processor/") || len(s.Owner) != len("processor/")+8+1+6 {
			t.Fatalf("%d B: item %d B, processor named %q", s.PayloadBytes, s.EventItemBytes, s.Owner)
		}
	}
	if stack[0].ProcessedUnits() != 12 || stack[1].ProcessedUnits() != 14 {
		t.Fatalf("delivery → processed on the stack: %d and %d WU, published 12 and 14", stack[0].ProcessedUnits(), stack[1].ProcessedUnits())
	}
}
