package localaws

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// tokenWindow is how long DynamoDB keeps a ClientRequestToken: "valid for
// 10 minutes after the first request that uses it is completed".
const tokenWindow = 10 * time.Minute

// clientTokens makes TransactWriteItems idempotent by ClientRequestToken, as
// DynamoDB does and minidyn does not (it ignores the field).
//
// It matters because the SDK fills in a token before its retry loop: when a
// transaction was applied but its answer was lost (a reset connection, a
// 500 after the write), the SDK sends the same request with the same token,
// and DynamoDB answers success without applying it again. minidyn would run
// it again and cancel it on its own conditions, a failure AWS never gives.
//
// What is emulated, from the API reference:
//   - the same token and the same request within 10 minutes of the first
//     success: the first answer, nothing applied;
//   - the same token with other parameters: 400
//     IdempotentParameterMismatchException;
//   - after 10 minutes, a new request.
//
// Only successes are remembered. The reference does not say what a reused
// token does after a cancelled transaction; a cancelled transaction applied
// nothing, so running it again is the safe reading.
type clientTokens struct {
	mu   sync.Mutex
	now  func() time.Time
	used map[string]tokenUse
}

type tokenUse struct {
	digest [32]byte
	at     time.Time
	answer []byte
}

func newClientTokens(now func() time.Time) *clientTokens {
	return &clientTokens{now: now, used: map[string]tokenUse{}}
}

// tokenOf returns a TransactWriteItems body's token and a digest of the
// rest of the request; ok is false when the body has no token. The digest
// is of the request re-encoded with every object's keys sorted: the SDK
// writes a map's entries (Key, ExpressionAttributeValues) in Go's random
// map order, so one request can come as different bytes.
func tokenOf(body []byte) (token string, digest [32]byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]any
	if dec.Decode(&fields) != nil {
		return "", digest, false
	}
	token, _ = fields["ClientRequestToken"].(string)
	if token == "" {
		return "", digest, false
	}
	delete(fields, "ClientRequestToken")
	rest, _ := json.Marshal(fields) // sorts the keys of every object
	return token, sha256.Sum256(rest), true
}

// serve answers a TransactWriteItems with a token it has seen, or runs it
// through next and remembers a success.
func (c *clientTokens) serve(w http.ResponseWriter, body []byte, next func() (code int, answer []byte)) (int, []byte) {
	token, digest, ok := tokenOf(body)
	if !ok {
		return next()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for t, u := range c.used {
		if now.Sub(u.at) > tokenWindow {
			delete(c.used, t)
		}
	}
	if u, seen := c.used[token]; seen {
		if u.digest != digest {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			return http.StatusBadRequest, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException","message":"The request uses the same client token as a previous, but non-identical request."}`)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		return http.StatusOK, u.answer
	}
	code, answer := next()
	if code == http.StatusOK {
		c.used[token] = tokenUse{digest: digest, at: c.now(), answer: answer}
	}
	return code, answer
}
