package pipelinetest_test

import (
	"fmt"
	"os"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// TestMain reports, after every test, the downstream's effective calls per
// operation_id over all the tests that ran the effects stage (I2; see
// docs/architecture.md), and fails the run if any key was applied more
// than once. Keys that
// were legitimately never applied (a quarantined intent) count as "not
// applied".
func TestMain(m *testing.M) {
	code := m.Run()
	s := pt.SuiteEffects()
	fmt.Printf("effects per operation_id over all tests: %d keys, %d exactly once, %d not applied, %d more than once\n",
		s.Keys, s.Once, s.None, s.More)
	if s.More > 0 {
		fmt.Printf("applied more than once: %v\n", s.Over)
		code = 1
	}
	os.Exit(code)
}
