// Package localaws provides the AWS APIs this product needs, running
// in-process for tests and the local stack: DynamoDB from
// github.com/truora/minidyn/server and SQS from github.com/Admiral-Piett/goaws,
// both spoken to over their real wire protocols by the real SDK clients;
// and, for the dispatcher's AWS targets, local endpoints of EventBridge's
// PutEvents and of Step Functions written from their API references, and
// Lambda's Invoke in front of real functions under aws-lambda-rie.
//
// goaws keeps its queues in process-global state, so one SQS server serves a
// whole test binary; give every test its own queue names (UniqueName).
//
// # Which emulator covers what (AWS, not the emulator, is the truth)
//
//   - minidyn (every test, the local stack): items, conditions, updates,
//     queries on the table and the due index, and TransactWriteItems with
//     its cancellation reasons. Known gaps: it ignores REMOVE in update
//     expressions; it rewrites every number of an item it updates through
//     a float64, so integers above 2^53 are rounded (DynamoHandler gives
//     them back their exact text, numbers.go; the ledger also keeps a
//     text copy of intents' versions: version_s); it answers an empty
//     list or map (L or M with no elements) as a value of no type, or NULL,
//     and a transaction it cancels puts its items back without them
//     (DynamoHandler gives them back, emptyvalues.go); it cannot rewrite
//     an item whose set a DELETE emptied (DynamoDB removes the
//     attribute); a PutItem answers the new item whatever its
//     ReturnValues asks (DynamoDB: the old item for ALL_OLD, else
//     nothing); it does not return the old item
//     in a transaction's cancellation reasons (the ledger reads it, one
//     request more than on AWS); it mis-maintains index key lists, which
//     DynamoHandler repairs (gsifix.go); it accepts numbers out of
//     DynamoDB's range, items over 400 KB and deep nesting.
//   - dynalite (npm, pinned in scripts/dynalite; `make test-dynalite`):
//     DynamoDB's request validation (reserved words, unused or missing
//     expression names and values, value types, number range, item size)
//     on every non-transactional call of the ledger's suite, and on each
//     part of every transaction of the ledger and pipeline suites through
//     StrictTransactions. Known gap: no transactions at all.
//   - goaws (every test, the local stack): queues, visibility timeouts,
//     redrive to a DLQ after maxReceiveCount. Known gaps: it always reports
//     ApproximateReceiveCount 1 in some paths; it does not enforce the
//     12-hour visibility limit counted from the receive; long polling is
//     approximate. It answers every message with SenderId = its account
//     id, asked or not; the SQS server here records each message's sender
//     from the request's credentials instead and returns it only when a
//     receive asks, as SQS does (sender.go). The difference that remains:
//     SQS names an IAM user by the user's unique id (AIDA…), here a user
//     is named by its access key id; a role session (Role: a role id and
//     a session name in the session token) is named as SQS names one,
//     "<role id>:<session>". Nothing checks a signature or a permission:
//     whoever signs with a role's credentials is that role here.
//     FIFO queues (a name ending in .fifo): goaws deduplicates a
//     MessageDeduplicationId for 5 minutes (turned on here) and hands out
//     one message of a MessageGroupId at a time. Known gaps: it forgets a
//     deduplication id when its message is deleted (SQS keeps it for the
//     whole interval), does not refuse a FIFO message without a group id
//     or a deduplication id, has no content-based deduplication, does not
//     return MessageDeduplicationId or MessageGroupId to a receive, and
//     checks MaximumMessageSize against the body alone (SQS counts the
//     message attributes too). A test of a FIFO sender therefore checks
//     what it sends (the ids) as well as what goaws delivered.
//   - EventBridge (eventbridge.go): PutEvents only, written here from the
//     API reference; no emulator of it is reachable. See EventBridge for
//     what it checks and what only AWS shows.
//   - Step Functions (stepfunctions.go): StartExecution,
//     DescribeExecution and DescribeStateMachine, written here from the
//     API reference; it runs no workflow. See StepFunctions.
//   - Lambda Invoke (lambda.go): real functions (a real bootstrap under
//     aws-lambda-rie) behind a front that answers as Lambda's Invoke does
//     where the emulator does not (function names and ARNs, FunctionError,
//     timeouts, size limits, throttles injected). See Lambda.
package localaws

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithymw "github.com/aws/smithy-go/middleware"
	"github.com/sirupsen/logrus"
)

// Region and credentials used against the emulators. They are visibly fake;
// the emulators do not check signatures.
const (
	Region          = "us-east-1"
	FakeAccessKey   = "AKIDLOCALFAKEKEY"
	FakeSecretKey   = "local-fake-secret-not-a-real-key"
	visibilityTicks = 100 * time.Millisecond
)

// Config returns an aws.Config for the emulators: fixed region and fake
// static credentials. SDK retries stay at their production default: on
// loopback a large response occasionally fails to read ("use of closed
// network connection") and the SDK retries it, as it would in AWS. Injected
// crashes (package awstrace) sit outside the retry loop, so they still fire
// exactly once per call.
func Config() aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(FakeAccessKey, FakeSecretKey, ""),
	}
}

// Dynamo is a minidyn server on a loopback port.
type Dynamo struct {
	URL string
	srv *httptest.Server
}

// NewDynamo starts an empty DynamoDB emulator.
func NewDynamo() *Dynamo {
	srv := httptest.NewServer(DynamoHandler())
	return &Dynamo{URL: srv.URL, srv: srv}
}

// DynamoHandler is minidyn's DynamoDB API handler with fixes that make
// it behave like DynamoDB on the wire:
//   - it reads each request body whole before minidyn decodes it: minidyn
//     answers as soon as its JSON decoder is done, and with a large body (a
//     350 KB payload chunk) the server could then close the connection while
//     the client was still writing;
//   - it sets X-Amz-Crc32 on every response, as DynamoDB does: the SDK
//     checks that header and otherwise logs a checksum mismatch on every call;
//   - it runs requests one at a time and repairs minidyn's secondary index
//     lists after each write (see indexRepair), so index queries find every
//     item, as they do in DynamoDB;
//   - a Query reads only the partition (and sort key range) it names, as
//     DynamoDB does, not every key of the index (query.go);
//   - a TransactWriteItems is idempotent by its ClientRequestToken for 10
//     minutes, as in DynamoDB (tokens.go): the SDK's retry of an applied
//     transaction whose answer was lost succeeds without applying it again;
//   - the items of every answer hold their empty lists and maps, and a
//     refused write leaves every item as it was (emptyvalues.go).
func DynamoHandler() http.Handler { return dynamoHandler(newIndexRepair()) }

func dynamoHandler(h *indexRepair) http.Handler {
	return dynamoHandlerWith(h, newClientTokens(time.Now))
}

func dynamoHandlerWith(h *indexRepair, tokens *clientTokens) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		run := func() (int, []byte) {
			rec := httptest.NewRecorder()
			h.serve(rec, r, body)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			return rec.Code, rec.Body.Bytes()
		}
		serve := run
		if opName(r.Header.Get("X-Amz-Target")) == "TransactWriteItems" {
			serve = func() (int, []byte) { return tokens.serve(w, body, run) }
		}
		code, out := serve()
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(out)), 10))
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(code)
		_, _ = w.Write(out)
	})
}

// Close stops it.
func (d *Dynamo) Close() { d.srv.Close() }

// Client returns a DynamoDB client for it; apiOptions are added to the
// client's middleware (for example an awstrace.Recorder).
func (d *Dynamo) Client(apiOptions ...func(*middlewareStack) error) *dynamodb.Client {
	return dynamodb.NewFromConfig(Config(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(d.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// DynamoAt returns a DynamoDB client for an emulator at url.
func DynamoAt(url string) *dynamodb.Client {
	return dynamodb.NewFromConfig(Config(), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
}

// SQSAt returns an SQS client for an emulator at url.
func SQSAt(url string) *sqs.Client {
	return sqs.NewFromConfig(Config(), func(o *sqs.Options) { o.BaseEndpoint = aws.String(url) })
}

// SQS is the process's goaws server.
type SQS struct {
	URL string
}

var (
	sqsOnce sync.Once
	sqsSrv  *SQS
	sqsErr  error
	seq     atomic.Int64
)

// StartSQS starts (once per process) the goaws SQS emulator on a loopback
// port, with its visibility-timeout and redrive ticker. addr may be "" for
// a free port.
func StartSQS(addr string) (*SQS, error) {
	sqsOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			sqsErr = fmt.Errorf("listen for SQS emulator on %s: %w", addr, err)
			return
		}
		host, port, _ := net.SplitHostPort(l.Addr().String())
		models.CurrentEnvironment.Host = host
		models.CurrentEnvironment.Port = port
		models.CurrentEnvironment.Region = ""
		models.CurrentEnvironment.AccountID = "000000000000"
		// FIFO queues deduplicate by MessageDeduplicationId for 5 minutes,
		// as in SQS (goaws does so only when told), and a queue's
		// MaximumMessageSize defaults to SQS's 1 MiB (goaws's default is
		// none).
		models.CurrentEnvironment.EnableDuplicates = true
		models.CurrentEnvironment.QueueAttributeDefaults.MaximumMessageSize = 1048576
		go func() { _ = http.Serve(l, newSenderIDs().wrap(serializeCreateQueue(router.New()))) }()
		go gosqs.PeriodicTasks(visibilityTicks, make(chan bool))
		sqsSrv = &SQS{URL: "http://" + l.Addr().String()}
	})
	return sqsSrv, sqsErr
}

// serializeCreateQueue makes queue creation exclusive: goaws v0.5.4 looks
// its queue map up without a lock at the top of every action, while
// CreateQueue and DeleteQueue write that map (a race go test -race reports
// when tests run in parallel). Every other action shares the lock, so they
// still run concurrently with each other.
func serializeCreateQueue(next http.Handler) http.Handler {
	var mu sync.RWMutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get("X-Amz-Target")
		action := r.URL.Query().Get("Action")
		if strings.HasSuffix(target, ".CreateQueue") || strings.HasSuffix(target, ".DeleteQueue") || action == "CreateQueue" || action == "DeleteQueue" {
			mu.Lock()
			defer mu.Unlock()
		} else {
			mu.RLock()
			defer mu.RUnlock()
		}
		next.ServeHTTP(w, r)
	})
}

// Client returns an SQS client for it.
func (s *SQS) Client(apiOptions ...func(*middlewareStack) error) *sqs.Client {
	return sqs.NewFromConfig(Config(), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(s.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// UniqueName returns prefix plus a process-unique suffix, for queue and
// table names that must not collide between tests.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, seq.Add(1))
}

type middlewareStack = smithymw.Stack
