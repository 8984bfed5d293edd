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
	kgzip "github.com/klauspost/compress/gzip"
)

// How a payload is stored: gzip-compressed above compressAbove bytes
// (unless that makes it larger), inline in the event item up to
// Options.InlinePayloadMax stored bytes, else in chunk items of at most
// chunkBytes, keyed by the payload's hash. Chunks are written once, after
// the event item, so a duplicate of a processed event needs nothing but
// the one conditional update; an intake that dies between the two writes
// has not answered 2xx, and the provider's retry writes the same chunks
// again, whatever state the row reached meanwhile (acceptDuplicate). A
// processor that finds a chunk missing does not spend an attempt on it:
// the row waits for that retry (AwaitPayload).
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
func storePayload(source, eventID string, raw []byte, inlineMax int) (storedPayload, error) {
	hash := payloadHash(raw)
	overhead := 0 // only a compressed payload's item size matters (encodePayload)
	if len(raw) > compressAbove {
		overhead = chunkOverhead(source, eventID, hash)
	}
	stored, enc, err := encodePayload(raw, overhead)
	if err != nil {
		return storedPayload{}, err
	}
	p := storedPayload{bytes: stored, enc: enc, hash: hash, size: len(raw)}
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

// chunkOverhead is the size DynamoDB bills for a chunk item's attributes
// other than its data's bytes: the names and key values, the data
// attribute's name and the expiry (a number of ten digits: 6 bytes).
func chunkOverhead(source, eventID, hash string) int {
	n := len(TTLAttribute) + 6 + len("data")
	for name, v := range chunkKey(source, eventID, hash, 0) {
		n += len(name) + len(v.(*types.AttributeValueMemberS).Value)
	}
	return n
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
// its chunk items (one GetItem per chunk). A chunk item that does not exist
// is ErrPayloadMissing: chunks are only ever written by the intake, after
// the row, so the intake that wrote the row died before it stored them,
// and only the provider's retry of the delivery rewrites them. A payload
// that was stored and cannot be read (bytes that do not decode or do not
// match the row's hash) is ErrUnavailable.
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
				return nil, fmt.Errorf("payload chunk %d of %d of %s/%s was never stored: %w", i, ev.PayloadChunks, ev.Source, ev.EventID, ErrPayloadMissing)
			}
			buf.Write(b.Value)
		}
		stored = buf.Bytes()
	}
	raw, err := decodePayload(stored, ev.encoded)
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s: %w: %w", ev.Source, ev.EventID, ErrUnavailable, err)
	}
	if payloadHash(raw) != ev.PayloadHash {
		return nil, fmt.Errorf("payload of %s/%s does not match its hash: %w", ev.Source, ev.EventID, ErrUnavailable)
	}
	return raw, nil
}

// The payload is compressed fast, and again at the best level only when
// that could save a write unit. The chunk item is billed per started KB;
// the best level (the standard library's, which stored every payload
// before) saves a few percent over the fast one (at most 14.8 % on the
// provider fixtures, invoice-like JSON up to 64 KB and bodies mixing JSON
// with random tokens; maxBestGain leaves room) for 3 to 20 times the CPU. So a payload whose item could
// drop a unit at that gain is compressed twice and the smaller kept; any
// other is billed the same whichever level wrote it. The fast level
// (klauspost/compress, standard gzip that compress/gzip reads, as it reads
// rows written before) leaves data without repeats unencoded, where
// Huffman coding alone still saves a quarter (random tokens, base64): such
// output is encoded again with Huffman coding only, which is cheap.
const maxBestGain = 0.16

// Reusable gzip writers: the standard library's compressor is hundreds
// of KB of state, and building one per delivery was most of the intake's
// CPU and garbage (Reset gives the same output as a new writer).
var (
	gzipFast    = writerPool(func() (gzipWriter, error) { return kgzip.NewWriterLevel(io.Discard, kgzip.StatelessCompression) })
	gzipHuffman = writerPool(func() (gzipWriter, error) { return gzip.NewWriterLevel(io.Discard, gzip.HuffmanOnly) })
	gzipBest    = writerPool(func() (gzipWriter, error) { return gzip.NewWriterLevel(io.Discard, gzip.BestCompression) })
)

type gzipWriter interface {
	Reset(io.Writer)
	Write([]byte) (int, error)
	Close() error
}

func writerPool[W gzipWriter](build func() (W, error)) *sync.Pool {
	return &sync.Pool{New: func() any {
		zw, _ := build() // a valid level: no error
		return zw
	}}
}

// encodePayload returns the stored form of raw and its encoding: raw up to
// compressAbove bytes or when gzip does not make it smaller, else gzip.
// overhead is the bytes the stored form's item adds around it (keys,
// expiry), so that the best level is tried only when it could bring the
// item under a KB boundary.
func encodePayload(raw []byte, overhead int) ([]byte, string, error) {
	if len(raw) <= compressAbove {
		return raw, "raw", nil
	}
	stored, err := gzipWith(gzipFast, raw)
	if err == nil && 10*len(stored) >= 9*len(raw) {
		stored, err = smaller(stored, gzipHuffman, raw)
	}
	if err == nil && units(len(stored)+overhead) > units(int((1-maxBestGain)*float64(len(stored)))+overhead) {
		stored, err = smaller(stored, gzipBest, raw)
	}
	if err != nil {
		return nil, "", err
	}
	if len(stored) >= len(raw) {
		return raw, "raw", nil // incompressible: store as is
	}
	return stored, "gzip", nil
}

// units is the write units of an item of n bytes.
func units(n int) int { return (n + 1023) / 1024 }

// smaller compresses raw with a writer from pool and returns the smaller
// of that and stored.
func smaller(stored []byte, pool *sync.Pool, raw []byte) ([]byte, error) {
	again, err := gzipWith(pool, raw)
	if err != nil || len(again) >= len(stored) {
		return stored, err
	}
	return again, nil
}

// gzipWith compresses raw with a writer from pool.
func gzipWith(pool *sync.Pool, raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(raw)/2 + 64)
	zw := pool.Get().(gzipWriter)
	defer pool.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("compress payload: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress payload: %w", err)
	}
	return buf.Bytes(), nil
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
