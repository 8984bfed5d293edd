package localaws

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an in-process S3 for the warehouse sink: github.com/johannesboyne/gofakes3
// over its in-memory backend (s3mem), spoken to over S3's REST protocol
// by the real SDK client (path-style addressing).
//
// What it does as S3 does: PutObject, GetObject, HeadObject, DeleteObject
// and ListObjectsV2 on buckets; PutObject with If-None-Match: * is a
// conditional create, checked and written under one lock (412
// PreconditionFailed when the key exists), as are If-Match puts.
//
// Where it differs from S3 (AWS, not the emulator, is the truth):
//   - it never answers 409 ConditionalRequestConflict: concurrent
//     conditional writes to one key are serialized, one wins and the
//     others get 412. FailNext injects a 409 so the sink's handling of it
//     is tested;
//   - nothing checks a signature, a permission, a bucket policy (such as
//     aws:SecureTransport) or encryption; it has no lifecycle rules;
//   - objects live in memory only, for the life of the process;
//   - ETags are MD5 of the body for every object (S3's are not for
//     multipart or SSE-KMS objects); the sink compares SHA-256 of the bytes
//     it reads, never an ETag.
//
// Down makes every request answer 503 SlowDown (S3's throttle) without
// touching the store: the warehouse unavailable. HangNext holds the next
// PutObject's answer until the client gives up (a timeout), after or
// before the write.
type S3 struct {
	URL     string
	Backend *s3mem.Backend
	srv     *httptest.Server

	mu       sync.Mutex
	down     bool
	failNext []s3Failure
	requests map[string]int // by operation, as S3 would bill them
	writes   []S3Write
}

type s3Failure struct {
	status int
	code   string
	// hang: hold the request until the client gives up (or HangLimit),
	// having written it first when apply is set.
	hang, apply bool
}

// HangLimit bounds how long a held request waits for its client to give
// up (real time).
const HangLimit = 5 * time.Second

// NewS3 starts an empty local S3 with the given buckets on a free
// loopback port.
func NewS3(buckets ...string) *S3 {
	s, err := StartS3("127.0.0.1:0", buckets...)
	if err != nil {
		panic(fmt.Sprintf("localaws: %v", err))
	}
	return s
}

// StartS3 starts an empty local S3 with the given buckets listening on
// addr (host:port; port 0 for a free one): the local stack's, on a port
// its users and its functions know in advance.
func StartS3(addr string, buckets ...string) (*S3, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the S3 emulator on %s: %w", addr, err)
	}
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	faker := gofakes3.New(be, gofakes3.WithoutVersioning())
	s := &S3{Backend: be, requests: map[string]int{}}
	h := faker.Server()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := s3Operation(r)
		s.mu.Lock()
		s.requests[op]++
		down := s.down
		var f *s3Failure
		if !down && len(s.failNext) > 0 && (op == "PutObject") {
			f = &s.failNext[0]
			s.failNext = s.failNext[1:]
		}
		s.mu.Unlock()
		// A PutObject's body is kept for the write log, and read whole
		// before a hang: the server notices the client hanging up only
		// once the request body is consumed.
		var body []byte
		if op == "PutObject" && !down {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		switch {
		case down:
			writeS3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		case f != nil && f.hang:
			if f.apply {
				s.serve(h, httptest.NewRecorder(), r, body)
			}
			select {
			case <-r.Context().Done():
			case <-time.After(HangLimit):
			}
			writeS3Error(w, http.StatusServiceUnavailable, "RequestTimeout", "held by the local S3 past the client's timeout")
		case f != nil:
			writeS3Error(w, f.status, f.code, "injected by the local S3")
		default:
			s.serve(h, w, r, body)
		}
	}))
	// The server's own listener (a free port) gives way to the one on addr.
	_ = s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL
	return s, nil
}

// serve passes a request to the emulator; a PutObject it answers 200 is
// added to the write log with its body.
func (s *S3) serve(h http.Handler, w http.ResponseWriter, r *http.Request, body []byte) {
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	h.ServeHTTP(sw, r)
	if s3Operation(r) == "PutObject" && sw.code == http.StatusOK {
		s.mu.Lock()
		s.writes = append(s.writes, S3Write{Key: strings.TrimPrefix(r.URL.Path, "/"), Body: body})
		s.mu.Unlock()
	}
}

// statusWriter notes the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// S3Write is one object the store wrote (a PutObject it answered 200):
// its path ("<bucket>/<key>") and its bytes.
type S3Write struct {
	Key  string
	Body []byte
}

// Writes returns the objects written so far, in the order they were
// written (a conditional create refused with 412 writes nothing).
func (s *S3) Writes() []S3Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]S3Write(nil), s.writes...)
}

// s3Operation names a REST request by the S3 operation it is.
func s3Operation(r *http.Request) string {
	path := strings.Trim(r.URL.Path, "/")
	object := strings.Contains(path, "/")
	switch {
	case r.Method == http.MethodPut && object:
		return "PutObject"
	case r.Method == http.MethodGet && object:
		return "GetObject"
	case r.Method == http.MethodHead && object:
		return "HeadObject"
	case r.Method == http.MethodDelete && object:
		return "DeleteObject"
	case r.Method == http.MethodGet:
		return "ListObjects"
	default:
		return r.Method + " " + path
	}
}

func writeS3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><RequestId>local</RequestId></Error>`, code, msg)
}

// Close stops it.
func (s *S3) Close() { s.srv.Close() }

// Client returns an S3 client for it (path-style); apiOptions are added
// to the client's middleware (for example an awstrace.Recorder).
func (s *S3) Client(apiOptions ...func(*middlewareStack) error) *s3.Client {
	return S3At(s.URL, apiOptions...)
}

// ClientWith returns an S3 client for it with optFns applied after the
// local endpoint's (for example aws.NopRetryer, so a 503 is seen at once).
func (s *S3) ClientWith(optFns ...func(*s3.Options)) *s3.Client {
	return s3.NewFromConfig(Config(), append([]func(*s3.Options){func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.URL)
		o.UsePathStyle = true
	}}, optFns...)...)
}

// S3At returns an S3 client for a local S3 at url.
func S3At(url string, apiOptions ...func(*middlewareStack) error) *s3.Client {
	return s3.NewFromConfig(Config(), func(o *s3.Options) {
		o.BaseEndpoint = aws.String(url)
		o.UsePathStyle = true
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// SetDown makes the local S3 unavailable (every request answers 503
// SlowDown) or available again.
func (s *S3) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// FailNext makes the next PutObject answer status and code without
// writing (for example 409 ConditionalRequestConflict).
func (s *S3) FailNext(status int, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, s3Failure{status: status, code: code})
}

// HangNext holds the next PutObject until its client gives up (its
// timeout) or HangLimit passes: written first when apply is set (the
// record is stored and the answer never arrives), else never written.
func (s *S3) HangNext(apply bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, s3Failure{hang: true, apply: apply})
}

// Requests returns the requests served (or refused) so far, by operation.
func (s *S3) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// Keys lists a bucket's object keys under prefix, sorted, straight from
// the store.
func (s *S3) Keys(bucket, prefix string) []string {
	list, err := s.Backend.ListBucket(bucket, &gofakes3.Prefix{HasPrefix: prefix != "", Prefix: prefix}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	sort.Strings(keys)
	return keys
}

// Object reads an object's bytes straight from the store.
func (s *S3) Object(bucket, key string) ([]byte, error) {
	obj, err := s.Backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, err
	}
	defer obj.Contents.Close()
	return io.ReadAll(obj.Contents)
}

// Put writes an object straight into the store, unconditionally (a test
// planting a conflicting record).
func (s *S3) Put(bucket, key string, body []byte) error {
	_, err := s.Backend.PutObject(bucket, key, map[string]string{}, bytes.NewReader(body), int64(len(body)), nil)
	return err
}

// Delete removes an object straight from the store (a record lost).
func (s *S3) Delete(bucket, key string) error {
	_, err := s.Backend.DeleteObject(bucket, key)
	return err
}
