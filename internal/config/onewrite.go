package config

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// oneWriteMax is the largest request body OneWrite reads into memory: every
// DynamoDB and SQS request of the pipeline is far smaller; a larger body
// (an S3 object, say) is streamed as the SDK hands it over.
const oneWriteMax = 64 << 10

// OneWrite wraps the SDK's HTTP client so that a small request leaves in
// one write to the connection instead of two. The SDK hands net/http its
// body behind its own reader type, which net/http cannot know is in
// memory, so it flushes the headers first and writes the body after: two
// system calls (and two TLS records on AWS) per request. Read into a
// bytes.Reader, which net/http recognizes, headers and body go out
// together. The SDK builds a new request from its seekable stream for
// every attempt, so a retry is unaffected. A nil next (what
// LoadDefaultConfig leaves, for each service to fill) is the SDK's
// default client.
func OneWrite(next aws.HTTPClient) aws.HTTPClient {
	if next == nil {
		next = awshttp.NewBuildableClient()
	}
	return oneWrite{next}
}

type oneWrite struct{ next aws.HTTPClient }

func (c oneWrite) Do(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > oneWriteMax {
		return c.next.Do(r)
	}
	b := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, b)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return c.next.Do(r)
}
