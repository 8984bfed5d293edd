package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// TargetKind is the AWS service an effect's target ARN names.
type TargetKind string

// The AWS targets an effect can name.
const (
	TargetLambda        TargetKind = "lambda"
	TargetSQS           TargetKind = "sqs"
	TargetEventBridge   TargetKind = "events"
	TargetStepFunctions TargetKind = "states"
)

// Target is a parsed AWS target ARN.
type Target struct {
	ARN       string
	Kind      TargetKind
	Partition string
	Region    string
	Account   string
	// Name is the function, queue, event bus or state machine name.
	Name string
	// Qualifier is a Lambda function's version or alias ("" for none).
	Qualifier string
}

// FIFO reports whether an SQS target is a FIFO queue: SQS requires a FIFO
// queue's name to end in ".fifo", and only a FIFO queue's may.
func (t Target) FIFO() bool { return t.Kind == TargetSQS && strings.HasSuffix(t.Name, ".fifo") }

// The ARN shapes the API references document for each target.
var (
	arnRE = regexp.MustCompile(`^arn:(aws[a-z-]*):([a-z0-9-]+):([a-z0-9-]*):([0-9]*):(.+)$`)
	// Lambda: a function name of 1 to 64 letters, digits, hyphens and
	// underscores, optionally qualified by a version ($LATEST or a number)
	// or an alias (letters, digits, hyphens, underscores; 1 to 128).
	lambdaResourceRE = regexp.MustCompile(`^function:([a-zA-Z0-9_-]{1,64})(?::(\$LATEST|[a-zA-Z0-9_-]{1,128}))?$`)
	// SQS: a queue name of 1 to 80 letters, digits, hyphens and
	// underscores; a FIFO queue's ends in ".fifo", within the 80.
	sqsNameRE = regexp.MustCompile(`^(?:[a-zA-Z0-9_-]{1,80}|[a-zA-Z0-9_-]{1,75}\.fifo)$`)
	// EventBridge: event-bus/<name>, the name as PutEvents' EventBusName
	// takes it (letters, digits, dot, hyphen, underscore; at most 256).
	busResourceRE = regexp.MustCompile(`^event-bus/([a-zA-Z0-9._-]{1,256})$`)
	// Step Functions: stateMachine:<name>, unqualified (no :version or
	// :alias), the name 1 to 80 characters.
	smResourceRE = regexp.MustCompile(`^stateMachine:([^:]{1,80})$`)
)

// ParseTarget parses an effect's target ARN. When region is not empty the
// ARN's region must be it: the dispatcher calls targets in its own region.
func ParseTarget(arn, region string) (Target, error) {
	m := arnRE.FindStringSubmatch(arn)
	if m == nil {
		return Target{}, fmt.Errorf("%q is not an ARN (arn:<partition>:<service>:<region>:<account>:<resource>)", arn)
	}
	t := Target{ARN: arn, Partition: m[1], Kind: TargetKind(m[2]), Region: m[3], Account: m[4]}
	resource := m[5]
	switch t.Kind {
	case TargetLambda:
		r := lambdaResourceRE.FindStringSubmatch(resource)
		if r == nil {
			return Target{}, fmt.Errorf("%q is not a Lambda function ARN (…:function:<name>[:<version or alias>])", arn)
		}
		t.Name, t.Qualifier = r[1], r[2]
	case TargetSQS:
		if !sqsNameRE.MatchString(resource) {
			return Target{}, fmt.Errorf("%q is not an SQS queue ARN (…:<queue name>, 1 to 80 letters, digits, - and _, a FIFO queue's ending in .fifo)", arn)
		}
		t.Name = resource
	case TargetEventBridge:
		r := busResourceRE.FindStringSubmatch(resource)
		if r == nil {
			return Target{}, fmt.Errorf("%q is not an EventBridge event bus ARN (…:event-bus/<name>)", arn)
		}
		if strings.HasPrefix(r[1], "aws.") {
			return Target{}, fmt.Errorf("%q names a partner event bus (aws.…): events are put on a bus of one's own", arn)
		}
		t.Name = r[1]
	case TargetStepFunctions:
		r := smResourceRE.FindStringSubmatch(resource)
		if r == nil {
			return Target{}, fmt.Errorf("%q is not an unqualified Step Functions state machine ARN (…:stateMachine:<name>; a version or alias ARN is refused: executions are looked up by the state machine's name)", arn)
		}
		if !validSFNName(r[1]) {
			return Target{}, fmt.Errorf("%q: the state machine name holds a character Step Functions does not allow in names", arn)
		}
		t.Name = r[1]
	default:
		return Target{}, fmt.Errorf("%q is an ARN of service %q: a target is a Lambda function (lambda), an SQS queue (sqs), an EventBridge event bus (events) or a Step Functions state machine (states)", arn, m[2])
	}
	if t.Region == "" || len(t.Account) != 12 {
		return Target{}, fmt.Errorf("%q: a target ARN names its region and its 12-digit account", arn)
	}
	if region != "" && t.Region != region {
		return Target{}, fmt.Errorf("%q is in region %s, the dispatcher runs in %s: a target must be in the dispatcher's region", arn, t.Region, region)
	}
	return t, nil
}

// validSFNName reports whether s is a name Step Functions accepts for a
// state machine or an execution: no white space, brackets < > { } [ ],
// wildcards ? *, special characters " # % \ ^ | ~ ` $ & , ; : /, control
// characters (U+0000–001F, U+007F–009F), U+FFFE–FFFF or surrogates.
func validSFNName(s string) bool {
	if s == "" || utf8.RuneCountInString(s) > 80 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r <= 0x20, r >= 0x7f && r <= 0x9f, r == 0xfffe, r == 0xffff, r >= 0xd800 && r <= 0xdfff:
			return false
		case strings.ContainsRune("<>{}[]?*\"#%\\^|~`$&,;:/", r):
			return false
		case r == 0x85 || r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000:
			return false // white space beyond ASCII
		}
	}
	return true
}

// hashedName is the form a key takes when it cannot be used as it is:
// "h-" and the SHA-256 of the key in hex (66 characters, letters, digits
// and a hyphen: valid as an SQS deduplication id or group id and as a Step
// Functions execution name). A key is used as it is only when it does not
// itself start with "h-", so the two forms never collide.
func hashedName(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return "h-" + hex.EncodeToString(h.Sum(nil))
}

// sfnNameRE is what an execution name is kept to: the characters Step
// Functions asks for when executions are logged to CloudWatch Logs.
var sfnNameRE = regexp.MustCompile(`^[0-9A-Za-z_-]{1,80}$`)

// ExecutionName is the Step Functions execution name of an operation: the
// operation id itself when it is 1 to 80 letters, digits, - and _ (and does
// not start with "h-"), else hashedName of it. The same operation id
// always gives the same name, which is what makes StartExecution
// idempotent.
func ExecutionName(op string) string {
	if sfnNameRE.MatchString(op) && !strings.HasPrefix(op, "h-") {
		return op
	}
	return hashedName(op)
}

// sqsTokenRE is what SQS allows in a MessageDeduplicationId and a
// MessageGroupId: alphanumeric characters and punctuation
// (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~), at most 128.
var sqsTokenRE = regexp.MustCompile("^[!-~]{1,128}$")

// DeduplicationID is the MessageDeduplicationId of an operation on a FIFO
// queue: the operation id itself when SQS allows it (and it does not start
// with "h-"), else hashedName of it.
func DeduplicationID(op string) string {
	if sqsTokenRE.MatchString(op) && !strings.HasPrefix(op, "h-") {
		return op
	}
	return hashedName(op)
}

// MessageGroupID is the MessageGroupId of a subject's calls on a FIFO
// queue: "<scope>/<subject>" when SQS allows it as it is, else hashedName
// of scope and subject. A scope never holds "/", so the readable form is
// unambiguous, and the hashed form holds none, so the two never collide.
// One subject's messages are delivered in order; other subjects' proceed.
func MessageGroupID(scope, subject string) string {
	g := scope + "/" + subject
	if sqsTokenRE.MatchString(g) {
		return g
	}
	return hashedName(scope, subject)
}

// TargetCall is the JSON every AWS target receives: the Lambda function's
// event, the SQS message body, the EventBridge event's detail and the
// Step Functions execution's input. Version is the subject's version as
// an exact decimal (absent when the intent has none); scope and source
// are absent when empty.
type TargetCall struct {
	OperationID string         `json:"operation_id"`
	Kind        string         `json:"kind"`
	Scope       string         `json:"scope,omitempty"`
	Source      string         `json:"source,omitempty"`
	Subject     string         `json:"subject"`
	Version     string         `json:"version,omitempty"`
	Payload     map[string]any `json:"payload,omitempty"`
}

// targetJSON encodes c as TargetCall. U+FFFE and U+FFFF, which SQS refuses
// in a message body, are written as JSON escapes (the same text once
// decoded), as encoding/json does for U+2028 and U+2029.
func targetJSON(c Call) ([]byte, error) {
	b, err := json.Marshal(TargetCall{OperationID: c.Key, Kind: c.Kind, Scope: c.Scope, Source: c.Source,
		Subject: c.Subject, Version: c.Version, Payload: c.Payload})
	if err != nil {
		return nil, err
	}
	if strings.Contains(string(b), "\uFFFE") || strings.Contains(string(b), "\uFFFF") {
		s := strings.ReplaceAll(string(b), "\uFFFE", `\ufffe`)
		b = []byte(strings.ReplaceAll(s, "\uFFFF", `\uffff`))
	}
	return b, nil
}

// CodePayloadTooLarge is the code of an intent QUARANTINED because its call
// is larger than its target accepts: it is never truncated.
const CodePayloadTooLarge = "payload_too_large"

// tooLarge is the error of a call over its target's documented limit.
func tooLarge(key string, size, limit int, what string) error {
	return &MisconfiguredError{Code: CodePayloadTooLarge,
		Err: fmt.Errorf("%s: the call is %d bytes, over the %d bytes %s accepts; it was not sent (never truncated)", key, size, limit, what)}
}

// The targets' documented deduplication windows.
const (
	// SQSFIFODedupWindow: a FIFO queue accepts a second message with the
	// same MessageDeduplicationId without delivering it during the
	// 5-minute deduplication interval.
	SQSFIFODedupWindow = 5 * time.Minute
	// StepFunctionsNameWindow: an execution name is unique per account,
	// region and state machine for 90 days.
	StepFunctionsNameWindow = 90 * 24 * time.Hour
)

// The targets' documented size limits.
const (
	// MaxLambdaSyncPayload: a synchronous Invoke's request payload
	// (6 MB; Lambda refuses "Request must be smaller than 6291456 bytes").
	MaxLambdaSyncPayload = 6291456
	// MaxSQSMessage: SQS's largest message (1 MiB, 1,048,576 bytes), body
	// and message attributes (name, type and value) together; a queue's
	// MaximumMessageSize may be lower.
	MaxSQSMessage = 1048576
	// MaxEventBridgeEntry: a PutEvents entry (Source, DetailType, Detail
	// and Resources in UTF-8, Time 14 bytes) must be less than 1 MB, taken
	// as 1,048,576 bytes as SQS states the same 1 MB.
	MaxEventBridgeEntry = 1048576
	// MaxStepFunctionsInput: StartExecution's input, in UTF-8 bytes.
	MaxStepFunctionsInput = 262144
)

// errNoTarget says an effect has neither a URL nor a target.
var errNoTarget = errors.New("an effect has a url (HTTP) or a target (an AWS ARN)")
