package localaws

import (
	"testing"

	"github.com/truora/minidyn/server"
)

// The index repair reaches minidyn's unexported fields; a minidyn whose
// internals changed must make it refuse, loudly, not skip the repair.
func TestMinidynInternals(t *testing.T) {
	if _, err := minidynTables(server.NewServer()); err != nil {
		t.Fatal(err)
	}
}
