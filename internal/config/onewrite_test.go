package config_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/config"
)

// countingConn counts the writes to a connection: each is a system call,
// and on AWS a TLS record.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

type dynamoFake struct {
	mu     sync.Mutex
	bodies []string
	fail   int // answer this many requests with a throttling error first
}

func (f *dynamoFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, string(b))
	fail := f.fail > 0
	f.fail--
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if fail {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}`)
		return
	}
	io.WriteString(w, "{}")
}

func dynamoClient(url string, wrap bool, writes *atomic.Int64) *dynamodb.Client {
	var d net.Dialer
	var hc aws.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{c, writes}, err
	}}}
	if wrap {
		hc = config.OneWrite(hc)
	}
	return dynamodb.NewFromConfig(aws.Config{Region: "eu-west-1", HTTPClient: hc,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "fake-secret", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
}

func putChunk(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ledger"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "EV#stripe#evt_1"}, "sk": &types.AttributeValueMemberS{Value: "PL#0f#0"},
		"data": &types.AttributeValueMemberB{Value: []byte(strings.Repeat("x", 1200))}}})
	return err
}

// A request leaves in one write with OneWrite, in two without (the SDK's
// body reader makes net/http flush the headers first); the server sees the
// same bytes either way.
func TestOneWriteSendsARequestInOneWrite(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		wrap bool
		want int64
	}{{false, 2}, {true, 1}} {
		fake := &dynamoFake{}
		srv := httptest.NewServer(fake)
		var writes atomic.Int64
		client := dynamoClient(srv.URL, c.wrap, &writes)
		if err := putChunk(ctx, client); err != nil { // opens the connection
			t.Fatal(err)
		}
		writes.Store(0)
		const n = 5
		for range n {
			if err := putChunk(ctx, client); err != nil {
				t.Fatal(err)
			}
		}
		if got := writes.Load(); got != c.want*n {
			t.Errorf("OneWrite %v: %d writes for %d requests, want %d each", c.wrap, got, n, c.want)
		}
		if len(fake.bodies) != n+1 || len(fake.bodies[n]) != len(fake.bodies[0]) || !strings.Contains(fake.bodies[n], `"data":{"B":"eHh4`) {
			t.Errorf("OneWrite %v: the server saw %d bodies, last %.80q", c.wrap, len(fake.bodies), fake.bodies[len(fake.bodies)-1])
		}
		srv.Close()
	}
}

// A retried request sends its whole body again.
func TestOneWriteRetrySendsTheSameBody(t *testing.T) {
	fake := &dynamoFake{fail: 2}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	var writes atomic.Int64
	if err := putChunk(context.Background(), dynamoClient(srv.URL, true, &writes)); err != nil {
		t.Fatal(err)
	}
	// (one serialization, sent three times: the same bytes)
	if len(fake.bodies) != 3 || fake.bodies[0] != fake.bodies[2] || fake.bodies[1] != fake.bodies[0] || len(fake.bodies[0]) < 1200 {
		t.Fatalf("bodies: %d, %v", len(fake.bodies), fake.bodies)
	}
}

// LoadDefaultConfig leaves the HTTP client nil: OneWrite then wraps the
// SDK's default client.
func TestOneWriteOverNilIsTheDefaultClient(t *testing.T) {
	fake := &dynamoFake{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := dynamodb.NewFromConfig(aws.Config{Region: "eu-west-1", HTTPClient: config.OneWrite(nil),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFAKE", "fake-secret", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	if err := putChunk(context.Background(), c); err != nil || len(fake.bodies) != 1 {
		t.Fatalf("%v, %d requests", err, len(fake.bodies))
	}
}
