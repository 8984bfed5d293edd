// Command cpuworker is one function process of the intake CPU comparison
// (capacity.MeasureIntakeCPU): it builds the handler CPU_CONTENDER names
// (ours or bare) once from its environment, as a Lambda cold start does,
// then reads one command per line on fd 3 and answers one line each on
// fd 4. Its stdout and stderr carry what the handler logs, as in Lambda.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

func main() {
	// Started without them, the worker fails on its first write (EBADF).
	in, out := os.NewFile(3, "commands"), os.NewFile(4, "replies")
	if err := capacity.ServeCPUWorker(context.Background(), os.Getenv("CPU_CONTENDER"), os.Getenv, in, out); err != nil {
		fmt.Fprintln(os.Stderr, "cpuworker: "+err.Error())
		os.Exit(1)
	}
}
