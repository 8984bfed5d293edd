package localaws

import (
	"errors"
	"testing"

	"github.com/truora/minidyn/types"
)

// A value of no type that no stored item explains fails the answer, rather
// than reach the SDK, which would decode it as some other value; a NULL no
// stored item explains is a NULL.
func TestRepairAnswerRefusesAnUnexplainedValueOfNoType(t *testing.T) {
	none := func(string, map[string]any, bool) []*types.Item { return nil }
	_, err := repairAnswer("GetItem", []byte(`{"TableName":"t"}`), []byte(`{"Item":{"pk":{"S":"a"},"x":{"M":{"y":{}}}}}`), none)
	if !errors.Is(err, errNoStoredValue) {
		t.Errorf("unexplained {}: %v, want errNoStoredValue", err)
	} else if want := errNoStoredValue.Error() + ": x.y (table t)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	const null = `{"Item":{"pk":{"S":"a"},"x":{"NULL":true}}}`
	out, err := repairAnswer("GetItem", []byte(`{"TableName":"t"}`), []byte(null), none)
	if err != nil || string(out) != null {
		t.Errorf("NULL: %s, %v; want it unchanged", out, err)
	}
}
