package ledger

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"sync"
	"testing"
)

// encodePayload reuses gzip writers; the output must be what a new writer
// gives, for any order of calls and from concurrent callers.
func TestEncodePayloadReusedWritersMatchNew(t *testing.T) {
	payload := func(i int) []byte {
		var b bytes.Buffer
		for j := 0; b.Len() < 2*compressAbove+i*97; j++ {
			fmt.Fprintf(&b, `{"id":"il_%d_%d","amount":%d,"currency":"eur"},`, i, j, i*j)
		}
		return b.Bytes()
	}
	fresh := func(raw []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(raw)
		zw.Close()
		return buf.Bytes()
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				raw := payload((g*50 + i) % 40)
				enc, kind, err := encodePayload(raw)
				if err != nil || kind != "gzip" {
					t.Errorf("payload %d: %q %v", i, kind, err)
					return
				}
				if want := fresh(raw); !bytes.Equal(enc, want) {
					t.Errorf("payload %d: reused writer's output differs from a new writer's", i)
				}
				back, err := decodePayload(enc, kind)
				if err != nil || !bytes.Equal(back, raw) {
					t.Errorf("payload %d: round trip: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
}
