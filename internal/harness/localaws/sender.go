package localaws

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQS records who sent each message from the credentials of the
// SendMessage request and returns it as the message's SenderId system
// attribute when a ReceiveMessage asks for it (MessageSystemAttributeNames
// SenderId or All): for an IAM user, the user's unique id; for a role
// session, the role's unique id and the session name, "AROA…:session".
// goaws v0.5.4 answers every message with SenderId = its account id
// (000000000000), asked or not, so a consumer that checks who wrote a
// message could not be tested against it. senderIDs sits in front of
// goaws and does what SQS does, from the request's credentials:
//
//   - a request signed with a Role's credentials (its session token says
//     which role and session) is that role session: SenderId
//     "<role id>:<session>";
//   - any other signed request is the IAM user its access key stands for:
//     SenderId is the access key id (SQS records the user's unique id, not
//     the key; locally one key is one user, so the key serves as its id);
//   - an unsigned request records nothing, and its messages keep goaws's
//     answer.
//
// It remembers the sender of each message goaws accepted (SendMessage,
// SendMessageBatch) by message id, which a message keeps when goaws moves
// it to a dead-letter queue, as SQS does, and forgets it when the message
// is deleted. A ReceiveMessage that names SenderId gets it; one that does
// not gets no SenderId at all, as from SQS. Only the JSON protocol (what
// the SDK speaks) is rewritten; a query-protocol request passes unchanged.
type senderIDs struct {
	mu   sync.Mutex
	byID map[string]string // message id → SenderId
}

func newSenderIDs() *senderIDs { return &senderIDs{byID: map[string]string{}} }

// Role is a local stand-in for an IAM role session: requests signed with
// its Credentials are that session's, and the local SQS records their
// messages' SenderId as AWS does for a role session (SenderID).
type Role struct {
	// ID is the role's unique id (on AWS, AROA followed by letters and
	// digits: the role's RoleId).
	ID string
	// Session is the role session's name (Lambda names a function's
	// session after the function).
	Session string
}

// roleToken prefixes the session token of a Role's credentials; the rest
// is "<id>:<session>" (neither an IAM unique id nor a session name can
// hold a colon).
const roleToken = "localaws-role:"

var (
	roleIDRE   = regexp.MustCompile(`^AROA\w+$`)
	nonWordsRE = regexp.MustCompile(`\W`)
)

// FunctionRole is the role a function of the local stack runs with: its
// own, as a deployed function runs with its own execution role. Its
// session is named after the function, as Lambda names it.
func FunctionRole(fn, functionName string) Role {
	id := "AROALOCAL" + strings.ToUpper(nonWordsRE.ReplaceAllString(fn, ""))
	return Role{ID: id, Session: functionName}
}

// SenderID is the SenderId SQS records for a message this role session sends.
func (r Role) SenderID() string { return r.ID + ":" + r.Session }

// Credentials are the role session's visibly fake temporary credentials.
func (r Role) Credentials() aws.Credentials {
	return aws.Credentials{AccessKeyID: "ASIALOCALFAKEKEY", SecretAccessKey: FakeSecretKey, SessionToken: roleToken + r.ID + ":" + r.Session, Source: "localaws"}
}

// Env is the role session's credentials as the environment variables the
// SDK reads (a Lambda runtime gets its execution role's session this way).
func (r Role) Env() []string {
	c := r.Credentials()
	return []string{"AWS_ACCESS_KEY_ID=" + c.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + c.SecretAccessKey, "AWS_SESSION_TOKEN=" + c.SessionToken}
}

// Config is Config() with the role session's credentials.
func (r Role) Config() aws.Config {
	cfg := Config()
	c := r.Credentials()
	cfg.Credentials = credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	return cfg
}

// ClientAs returns an SQS client for it that signs as the role session r.
func (s *SQS) ClientAs(r Role, apiOptions ...func(*middlewareStack) error) *sqs.Client {
	return sqs.NewFromConfig(r.Config(), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(s.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// callerSenderID is the SenderId SQS would record for a request: the role
// session its session token names, or the access key id of its signature,
// or "" when it is not signed.
func callerSenderID(r *http.Request) string {
	if tok, ok := strings.CutPrefix(r.Header.Get("X-Amz-Security-Token"), roleToken); ok {
		if id, session, ok := strings.Cut(tok, ":"); ok && roleIDRE.MatchString(id) && session != "" {
			return id + ":" + session
		}
	}
	auth := r.Header.Get("Authorization")
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	key, _, _ := strings.Cut(cred, "/")
	return key
}

func (s *senderIDs) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := ""
		if r.Header.Get("Content-Type") == "application/x-amz-json-1.0" {
			_, action, _ = strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		}
		switch action {
		case "SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch":
		default:
			next.ServeHTTP(w, r)
			return
		}
		req, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(req))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		out := rec.Body.Bytes()
		if rec.Code == http.StatusOK {
			switch action {
			case "SendMessage", "SendMessageBatch":
				s.sent(action, callerSenderID(r), out)
			case "ReceiveMessage":
				out = s.received(req, out)
			case "DeleteMessage", "DeleteMessageBatch":
				s.deleted(action, req, out)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(out)
	})
}

// sent remembers the sender of the messages a send's answer names.
func (s *senderIDs) sent(action, sender string, answer []byte) {
	if sender == "" {
		return
	}
	var ids []string
	if action == "SendMessage" {
		var a struct{ MessageId string }
		if json.Unmarshal(answer, &a) == nil && a.MessageId != "" {
			ids = append(ids, a.MessageId)
		}
	} else {
		// goaws names a batch's entries as the query protocol does.
		var a struct {
			Entries []struct{ MessageId string } `json:"SendMessageBatchResultEntry"`
		}
		if json.Unmarshal(answer, &a) == nil {
			for _, e := range a.Entries {
				ids = append(ids, e.MessageId)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if id != "" {
			s.byID[id] = sender
		}
	}
}

// received sets or removes SenderId in a receive's answer, as the request asked.
func (s *senderIDs) received(req, answer []byte) []byte {
	var in struct{ AttributeNames, MessageSystemAttributeNames []string }
	_ = json.Unmarshal(req, &in)
	names := append(in.AttributeNames, in.MessageSystemAttributeNames...)
	want := slices.Contains(names, "SenderId") || slices.Contains(names, "All")
	var out map[string]json.RawMessage
	if json.Unmarshal(answer, &out) != nil {
		return answer
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(out["Messages"], &msgs) != nil || len(msgs) == 0 {
		return answer
	}
	s.mu.Lock()
	for _, m := range msgs {
		var id string
		_ = json.Unmarshal(m["MessageId"], &id)
		attrs := map[string]string{}
		_ = json.Unmarshal(m["Attributes"], &attrs)
		if sender, ok := s.byID[id]; ok && want {
			attrs["SenderId"] = sender
		} else if !want {
			delete(attrs, "SenderId")
		}
		m["Attributes"], _ = json.Marshal(attrs)
	}
	s.mu.Unlock()
	out["Messages"], _ = json.Marshal(msgs)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(out) != nil {
		return answer
	}
	return b.Bytes()
}

// deleted forgets the senders of the messages a delete removed. goaws's
// receipt handle is the message id, "#", and a random part.
func (s *senderIDs) deleted(action string, req, answer []byte) {
	var handles []string
	if action == "DeleteMessage" {
		var in struct{ ReceiptHandle string }
		_ = json.Unmarshal(req, &in)
		handles = append(handles, in.ReceiptHandle)
	} else {
		var in struct {
			Entries []struct{ Id, ReceiptHandle string }
		}
		var a struct{ Successful []struct{ Id string } }
		_ = json.Unmarshal(req, &in)
		_ = json.Unmarshal(answer, &a)
		for _, ok := range a.Successful {
			for _, e := range in.Entries {
				if e.Id == ok.Id {
					handles = append(handles, e.ReceiptHandle)
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range handles {
		if id, _, ok := strings.Cut(h, "#"); ok {
			delete(s.byID, id)
		}
	}
}
