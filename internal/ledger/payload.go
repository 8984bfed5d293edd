package ledger

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// How a payload is stored: gzip-compressed above compressAbove bytes
// (unless that makes it larger), inline in the event item up to
// Options.InlinePayloadMax stored bytes, else in chunk items of at most
// chunkBytes, keyed by the payload's hash. Chunks are written once, after
// the event item, so a duplicate of a processed event needs nothing but
// the one conditional update; an intake that dies between the two writes
// has not answered 2xx, and the provider's retry finds the row RECEIVED
// and writes the same chunks again. A processor that finds a chunk
// missing treats it as transient (Payload).
const (
	chunkBytes    = 350 * 1024 // below DynamoDB's 400 KB item limit with room for keys
	compressAbove = 1024
)

// storedPayload is a payload as the ledger stores it.
type storedPayload struct {
	bytes  []byte // raw or gzip, as enc says
	enc    string // "raw" or "gzip"
	hash   string // payloadHash of the raw bytes
	size   int    // the raw length
	chunks int    // the chunk items it takes; 0 when it is kept inline
}

// storePayload encodes raw and decides where it goes: inline when its
// stored form fits in inlineMax bytes, else in chunks.
func storePayload(raw []byte, inlineMax int) (storedPayload, error) {
	stored, enc, err := encodePayload(raw)
	if err != nil {
		return storedPayload{}, err
	}
	p := storedPayload{bytes: stored, enc: enc, hash: payloadHash(raw), size: len(raw)}
	if len(stored) > inlineMax {
		p.chunks = (len(stored) + chunkBytes - 1) / chunkBytes
	}
	return p, nil
}

// ContentID derives an event id from the payload bytes, for verified
// deliveries that carry no usable identity.
func ContentID(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// payloadHash names a payload's bytes: sha256, 128 bits, hex.
func payloadHash(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:16])
}

// putChunks writes the chunk items of a stored payload, each with the
// payload retention's TTL.
func (l *Ledger) putChunks(ctx context.Context, source, eventID, hash string, stored []byte, chunks int) error {
	expires := l.now().Add(l.opts.PayloadRetention).Unix()
	for i := 0; i < chunks; i++ {
		lo, hi := i*chunkBytes, min((i+1)*chunkBytes, len(stored))
		item := chunkKey(source, eventID, hash, i)
		item["data"] = &types.AttributeValueMemberB{Value: stored[lo:hi]}
		item[TTLAttribute] = nv(expires)
		_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(l.opts.Table), Item: item})
		if err != nil {
			return fmt.Errorf("store payload chunk %d of %s/%s: %w", i, source, eventID, translate(err))
		}
	}
	return nil
}

// Payload returns the raw payload bytes of ev: inline from the item, or from
// its chunk items (one GetItem per chunk). A missing chunk is ErrUnavailable:
// the intake that wrote the row may not have finished, and a provider retry
// rewrites it.
func (l *Ledger) Payload(ctx context.Context, ev Event) ([]byte, error) {
	stored := ev.payload
	if ev.PayloadChunks > 0 {
		var buf bytes.Buffer
		for i := 0; i < ev.PayloadChunks; i++ {
			out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:      aws.String(l.opts.Table),
				Key:            chunkKey(ev.Source, ev.EventID, ev.PayloadHash, i),
				ConsistentRead: aws.Bool(true),
			})
			if err != nil {
				return nil, fmt.Errorf("load payload chunk %d of %s/%s: %w", i, ev.Source, ev.EventID, translate(err))
			}
			b, ok := out.Item["data"].(*types.AttributeValueMemberB)
			if !ok {
				return nil, fmt.Errorf("payload chunk %d of %s/%s missing: %w", i, ev.Source, ev.EventID, ErrUnavailable)
			}
			buf.Write(b.Value)
		}
		stored = buf.Bytes()
	}
	raw, err := decodePayload(stored, ev.encoded)
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s: %w", ev.Source, ev.EventID, err)
	}
	if payloadHash(raw) != ev.PayloadHash {
		return nil, fmt.Errorf("payload of %s/%s does not match its hash: %w", ev.Source, ev.EventID, ErrUnavailable)
	}
	return raw, nil
}

// gzipWriters holds reusable gzip writers at BestCompression.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestCompression) // a valid level: no error
	return zw
}}

func encodePayload(raw []byte) ([]byte, string, error) {
	if len(raw) <= compressAbove {
		return raw, "raw", nil
	}
	var buf bytes.Buffer
	// A flate compressor is about 1 MB of state: reuse them (Reset gives
	// the same output as a new writer), or building one per delivery is
	// most of the intake's CPU and garbage.
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, "", fmt.Errorf("compress payload: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("compress payload: %w", err)
	}
	if buf.Len() >= len(raw) {
		return raw, "raw", nil // incompressible: store as is
	}
	return buf.Bytes(), "gzip", nil
}

func decodePayload(stored []byte, enc string) ([]byte, error) {
	switch enc {
	case "raw", "":
		return stored, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(stored))
		if err != nil {
			return nil, fmt.Errorf("decompress: %w", err)
		}
		raw, err := io.ReadAll(io.LimitReader(zr, MaxPayloadBytes+1))
		if err != nil {
			return nil, fmt.Errorf("decompress: %w", err)
		}
		return raw, nil
	default:
		return nil, fmt.Errorf("unknown payload encoding %q", enc)
	}
}

// PayloadHash is the hash Accept stores for a payload (sha256, 128 bits,
// hex): what ClaimBody and a conflict record name.
func PayloadHash(payload []byte) string { return payloadHash(payload) }
