package operator

import (
	"context"
	"fmt"
	"os/user"
	"strings"
	"time"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// Who an operator write names in the audit: the name the operator gives
// (--actor, else $USER@host), which anyone can type, next to the identity
// of the credentials that sign the write, which the audit shows in
// parentheses:
//
//	alice@ops-box (arn:aws:sts::123456789012:assumed-role/Ops/alice)
//	ops:alice (local:alice@laptop)
//
// Against AWS the identity is the ARN of those credentials, from STS
// GetCallerIdentity (one call, only for a command that writes; it needs no
// IAM permission), asked of the region's own STS endpoint whatever
// endpoint the configuration names (identityClient): a server the operator
// points the SDK at could answer with any ARN. Against the `make dev` stack
// (--local) there are no real credentials, so it is the local user:
// "local:" and the operating system's user name (else $USER) at the host.
// With no name given, the identity alone is recorded. An identity that
// cannot be verified refuses the write (ErrUnverified): an unverified name
// is never recorded.
//
// What that proves is what webhookctl saw: whoever held the credentials
// STS answered for, when it wrote. It is no proof against a write made
// without webhookctl: anyone allowed dynamodb:UpdateItem on the table can
// append an audit entry naming anyone, and whoever controls the machine
// webhookctl runs on can change what it records. The server's own record
// of who wrote is CloudTrail's data events for the table.

// MaxActorLen bounds what an audit entry records as the actor: the ledger
// keeps at most this many bytes of it.
const MaxActorLen = ledger.MaxIDLength

// maxIdentityLen bounds the verified identity inside MaxActorLen, leaving
// at least 60 bytes for the name. An ARN is longer only with a long IAM
// path; it is then shortened in the middle, keeping its start (partition,
// service, account) and its end (the user or session).
const maxIdentityLen = 192

// identityTimeout bounds the STS call.
const identityTimeout = 10 * time.Second

// STS is the part of the STS client webhookctl uses.
type STS interface {
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, opts ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

var _ STS = (*sts.Client)(nil)

// Verifier tells who is calling, in a form the caller cannot choose.
type Verifier interface {
	Verify(ctx context.Context) (string, error)
}

var (
	_ Verifier = CallerARN{}
	_ Verifier = LocalUser{}
)

// CallerARN verifies the caller with STS GetCallerIdentity: the ARN of the
// credentials the AWS configuration chain found.
type CallerARN struct{ Client STS }

// Verify returns the caller's ARN, or ErrUnverified.
func (c CallerARN) Verify(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	out, err := c.Client.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", fmt.Errorf("%w: sts:GetCallerIdentity: %w", ErrUnverified, err)
	}
	arn := aws.ToString(out.Arn)
	if !strings.HasPrefix(arn, "arn:") || !printable(arn) {
		return "", fmt.Errorf("%w: sts:GetCallerIdentity answered no ARN (%q)", ErrUnverified, arn)
	}
	return arn, nil
}

// LocalUser is the caller of the `make dev` stack, which has no AWS
// identity: the local user at the host.
type LocalUser struct{ User, Host string }

// Verify returns "local:<user>@<host>" (or what of it is known).
func (l LocalUser) Verify(context.Context) (string, error) {
	switch {
	case l.User != "" && l.Host != "":
		return "local:" + l.User + "@" + l.Host, nil
	case l.User != "":
		return "local:" + l.User, nil
	case l.Host != "":
		return "local:" + l.Host, nil
	}
	return "local", nil
}

// AuditActor is what an operator write records: the claimed name, then the
// verified identity in parentheses, at most MaxActorLen bytes. With no name,
// or a name the identity already says (the local user's), the identity
// alone.
func AuditActor(claim, identity string) string {
	identity = shortenMiddle(identity, maxIdentityLen)
	if claim == "" || claim == identity || "local:"+claim == identity {
		return identity
	}
	room := MaxActorLen - len(identity) - len(" ()")
	if len(claim) > room {
		claim = strings.ToValidUTF8(claim[:room], "")
	}
	return claim + " (" + identity + ")"
}

// shortenMiddle keeps s within n bytes by cutting its middle ("...").
func shortenMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := n / 3
	tail := n - head - len("...")
	return strings.ToValidUTF8(s[:head], "") + "..." + strings.ToValidUTF8(s[len(s)-tail:], "")
}

// validClaim says whether a name can stand in the audit beside the
// identity: printable, and without the parentheses that would let it
// imitate one.
func validClaim(s string) bool {
	return printable(s) && !strings.ContainsAny(s, "()")
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// currentUser is the operating system's user name (Env.LocalUser's default).
func currentUser() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
