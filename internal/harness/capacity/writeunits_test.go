package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// TestWriteUnitFloor records why a realistic 4 KB event costs what it
// does: the payload item needs two units because its stored bytes exceed
// what one unit leaves after the keys, and no lossless change of the
// codec's framing brings it under.
func TestWriteUnitFloor(t *testing.T) {
	f, err := capacity.MeasureWriteUnitFloor(context.Background(), 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Payload
	t.Logf("delivery → processed %d WU (intake %s; processing %s)", f.Row.ProcessedUnits(), f.Row.Intake, f.Row.Process)
	t.Logf("payload: body %d B, stored %d B (gzip at its best %d B), raw deflate %d B, item %d B (overhead %d B), one unit holds at most %d B stored", p.BodyBytes, p.StoredBytes, p.BestGzip, p.RawDeflate, p.ItemBytes, p.Overhead, p.OneUnitLimit)
	var b bytes.Buffer
	capacity.WriteWriteUnitFloor(&b, f)
	t.Logf("\n%s", b.String())
	if p.ItemBytes <= 1024 {
		t.Errorf("the payload item (%d B) fits one unit: the 4 KB budget changed", p.ItemBytes)
	}
	if p.RawDeflate <= p.OneUnitLimit {
		t.Errorf("raw deflate (%d B) would fit one unit (%d B): worth taking", p.RawDeflate, p.OneUnitLimit)
	}
}
