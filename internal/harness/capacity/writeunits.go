package capacity

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// PayloadFit is what the stored payload of an event costs and how far it
// is from one write unit.
type PayloadFit struct {
	BodyBytes    int // the raw event
	StoredBytes  int // as the ledger stores it (gzip; see ledger's encodePayload)
	BestGzip     int // gzip at the standard library's BestCompression
	RawDeflate   int // BestCompression without gzip's header and trailer
	ItemBytes    int // the payload item as DynamoDB stores it (keys, data, expiry)
	Overhead     int // ItemBytes − StoredBytes: keys and expiry
	OneUnitLimit int // the largest stored payload that fits one write unit
}

// WUFloor is the measured write units of one realistic event from
// delivery to processed, and its stored payload's fit.
type WUFloor struct {
	Row     Row
	Payload PayloadFit
}

// MeasureWriteUnitFloor delivers and processes one realistic Stripe
// customer.subscription.created of about size bytes through the real
// cores (as MeasurePipeline) and measures its payload item.
func MeasureWriteUnitFloor(ctx context.Context, size int) (WUFloor, error) {
	rows, err := MeasurePipeline(ctx, []int{size}, Realistic)
	if err != nil {
		return WUFloor{}, err
	}
	f := WUFloor{Row: rows[0]}
	rg, err := newRig(ctx, "", "")
	if err != nil {
		return f, err
	}
	defer rg.close()
	id := fmt.Sprintf("evt_capacity_%d", size)
	body := PaddedSubscriptionEvent(id, size, rg.clock.Now(), Realistic)
	if st := rg.deliver(ctx, body); st != http.StatusAccepted {
		return f, fmt.Errorf("intake answered %d", st)
	}
	sum := sha256.Sum256(body)
	key := map[string]types.AttributeValue{"pk": sv("EV#stripe#" + id), "sk": sv("PL#" + hex.EncodeToString(sum[:16]) + "#0")}
	item := rg.m.read(ctx, key)
	data, ok := item["data"].(*types.AttributeValueMemberB)
	if !ok {
		return f, fmt.Errorf("no payload item for %s", id)
	}
	raw, err := compressedLen(body, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestCompression) })
	if err != nil {
		return f, err
	}
	best, err := compressedLen(body, func(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, gzip.BestCompression) })
	if err != nil {
		return f, err
	}
	f.Payload = PayloadFit{BodyBytes: len(body), StoredBytes: len(data.Value), BestGzip: best, RawDeflate: raw, ItemBytes: ItemSize(item)}
	f.Payload.Overhead = f.Payload.ItemBytes - f.Payload.StoredBytes
	f.Payload.OneUnitLimit = 1024 - f.Payload.Overhead
	return f, nil
}

// compressedLen is the length of body written through a compressor.
func compressedLen(body []byte, compressor func(io.Writer) (io.WriteCloser, error)) (int, error) {
	var b bytes.Buffer
	w, err := compressor(&b)
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(body); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return b.Len(), nil
}

// WriteWriteUnitFloor renders the breakdown of the delivery → processed
// write units, what each protects, and the payload's fit, as Markdown.
func WriteWriteUnitFloor(w io.Writer, f WUFloor) {
	r, p := f.Row, f.Payload
	fmt.Fprintf(w, "| step | measured | what it protects |\n|---|---|---|\n")
	fmt.Fprintf(w, "| intake: payload item, event item and its due-index entry | %s | I1: the body is kept before anyone is told of the event, and the event stays due until processed; %d B stored (gzip of %d B), %d B as an item |\n", r.Intake, p.StoredBytes, p.BodyBytes, p.ItemBytes)
	fmt.Fprintf(w, "| processing: claim, commit | %s | claim: the lease and the attempt count, the only write that survives a crash of the worker (DEAD after N attempts, the reconciler finds a stuck claim); commit: state, status and intent in one transaction (×2), each intent on the due index (I2: an intent whose effects message is lost is redriven) |\n", r.Process)
	fmt.Fprintf(w, "| **delivery → processed** | **%d WU** | |\n", r.ProcessedUnits())
}
