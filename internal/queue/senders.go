package queue

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Senders are the principals whose messages a consumer of a queue trusts,
// as SQS names them in a received message's SenderId system attribute.
// SQS records the sender of each message from the credentials of its
// SendMessage request: for an IAM user, the user's unique id
// ("AIDA…"); for a role session, the role's unique id and the session
// name ("AROA…:session"). ReceiveMessage returns the attribute only when
// its MessageSystemAttributeNames names it (or All).
//
// An entry is a unique id, which matches that id and every session of it
// ("AROAEXAMPLE" matches "AROAEXAMPLE:my-function"), or an id with a
// session, which matches exactly that SenderId.
type Senders []string

// senderRE is one entry: a unique id (IAM's pattern is word characters,
// at most 128), optionally ":" and a role session name (IAM allows word
// characters and +=,.@- in at most 64; a comma separates entries here, so
// an entry cannot name a session with one).
var senderRE = regexp.MustCompile(`^\w{1,128}(:[\w+=.@-]{1,64})?$`)

// ParseSenders reads a comma-separated list of entries (spaces around an
// entry are ignored). An empty list or a malformed entry is an error: a
// consumer that trusts nobody would refuse every message, which is a
// configuration mistake to report, not a state to run in.
func ParseSenders(list string) (Senders, error) {
	var out Senders
	for e := range strings.SplitSeq(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !senderRE.MatchString(e) {
			return nil, fmt.Errorf("sender %q is not an IAM unique id (AIDA…, AROA…) or a unique id and a role session name (AROA…:session)", e)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("no sender: name at least one IAM unique id")
	}
	return out, nil
}

// Allows says whether a message whose SenderId is senderID comes from one
// of the senders. An empty senderID (SQS returned none) is never allowed.
func (s Senders) Allows(senderID string) bool {
	if senderID == "" {
		return false
	}
	for _, e := range s {
		if senderID == e || (!strings.Contains(e, ":") && strings.HasPrefix(senderID, e+":")) {
			return true
		}
	}
	return false
}

// String is the list as ParseSenders reads it.
func (s Senders) String() string { return strings.Join(s, ",") }
