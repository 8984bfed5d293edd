package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/devstack"
	"github.com/effectively-once/webhooks/pkg/queue"
)

// recoverySection reports what bounds the effects of a batch whose
// processor died between its commits and its announcement (issue 18): the
// redelivered pointers find their events PROCESSED and announce the intents
// still PENDING, so the wait is the events queue's visibility timeout, not
// the reconciler's grace plus its schedule. It runs the crash matrix test
// that checks it and states the bound for the deployed and the fast
// timings from their configuration.
func recoverySection(ctx context.Context, w io.Writer, _ options) error {
	args := []string{"test", "-count=1", "-run", "TestCrashMatrix_BeforeAnnouncement", "-v", "./pkg/harness/pipelinetest"}
	out, err := command(ctx, "go", args...)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "intents dispatched once each") {
			_, l, _ = strings.Cut(l, ": ")
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	var fast devstack.Config
	fast.FastProfile()
	deployed := queue.Events("").VisibilityTimeout
	const (
		deployedStuck    = 5 * time.Minute  // reconciler.Options.StuckAfter's default (RECONCILE_STUCK_SECONDS)
		deployedSchedule = 5 * time.Minute  // infra/stack ReconcileEvery
		localSchedule    = 60 * time.Second // DEV_SCHEDULE_SECONDS' default
	)
	fmt.Fprintf(w, "\n## Recovery of effects after a crash before their announcement\n\n"+
		"A processor announces its batch's intents once, after the batch's commits. When it dies in between, the invocation deletes nothing: every pointer of the batch comes back after the events queue's visibility timeout, and a pointer that finds its event PROCESSED reads the intents the event's stored result names (one GetItem each, only on that path) and announces those still PENDING with its batch (`Processor.recover`, reason `recover`; the dispatcher's claim makes a second announcement harmless). "+
		"`go %s` crashes the processor after the first, second or third of three commits and before the effects SendMessageBatch, then lets a fresh worker and a dispatcher run with no reconciler and the manual clock standing still: every intent must be SUCCEEDED with one effective call per key. Events queue visibility in the test: 1 s.\n\n```\n%s\n```\n\n"+
		"| timings | bound on a crash's effects (events queue visibility) | before issue 18 (reconciler grace + schedule) |\n|---|---:|---:|\n"+
		"| deployed (`queue.Events`, reconciler every 5 min) | %s | up to %s + %s |\n"+
		"| fast profile (`devstack.FastProfile`, `make demo`) | %s | up to %s + %s |\n\n"+
		"Add one processing round and one dispatch to the bound. The reconciler's re-announce stays the backstop when the announcement itself fails (the pointers were acknowledged). Not measured here: the time from a SIGKILL of a real bootstrap under load to every effect SUCCEEDED on `make dev`.\n",
		strings.Join(args, " "), strings.Join(lines, "\n"),
		deployed, deployedStuck, deployedSchedule,
		fast.Visibility, fast.ReconcileStuck, localSchedule)
	return err
}
