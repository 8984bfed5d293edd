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

// The stored item the answer was read from decides: an ALL_OLD answer's
// NULL that the old item holds as NULL stays NULL, though the write made
// it an empty list.
func TestRepairAnswerTakesTheOldItemFirstForALLOLD(t *testing.T) {
	yes := true
	old := &types.Item{M: map[string]*types.Item{"x": {NULL: &yes}, "y": {M: map[string]*types.Item{}}}}
	new := &types.Item{M: map[string]*types.Item{"x": {L: []*types.Item{}}}}
	stored := func(_ string, _ map[string]any, wantOld bool) []*types.Item {
		if wantOld {
			return []*types.Item{old, new}
		}
		return []*types.Item{new, old}
	}
	out, err := repairAnswer("UpdateItem", []byte(`{"TableName":"t","ReturnValues":"ALL_OLD"}`), []byte(`{"Attributes":{"x":{"NULL":true},"y":{}}}`), stored)
	if want := `{"Attributes":{"x":{"NULL":true},"y":{"M":{}}}}`; err != nil || string(out) != want {
		t.Errorf("ALL_OLD: %s, %v; want %s", out, err, want)
	}
	out, err = repairAnswer("UpdateItem", []byte(`{"TableName":"t","ReturnValues":"ALL_NEW"}`), []byte(`{"Attributes":{"x":{}}}`), stored)
	if want := `{"Attributes":{"x":{"L":[]}}}`; err != nil || string(out) != want {
		t.Errorf("ALL_NEW: %s, %v; want %s", out, err, want)
	}
}
