package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// SESMessageProjection is the SES delivery status projection's name in the
// ledger.
const SESMessageProjection = "ses_message"

// SESSuppressionNamespace is the first part of every suppression intent's
// operation id: projection.OperationID("ses_suppression", address, "add").
const SESSuppressionNamespace = "ses_suppression"

// SESMessages projects Amazon SES notifications (delivered through SNS, kind
// "sns") into one delivery status per email: the subject is the SES message
// id (mail.messageId), not the SNS MessageId, which names the notification.
//
// Ordering: the version is a precedence rank, not a time (SES events
// arrive out of order with timestamps from different systems, and how far
// the email got only moves one way):
//
//	sent (Send)                  1
//	delayed (DeliveryDelay)      2  SES is still retrying; precedes any outcome
//	delivered (Delivery)         3
//	rejected (Reject)            4  final, excludes delivery: SES refused to send (virus)
//	soft_bounced (Bounce, not Permanent) 5
//	hard_bounced (Bounce, Permanent)     6
//	complained (Complaint)       7  only ever after a delivery; the strongest signal
//
// A status is never downgraded (a late Delivery after a Bounce is stale),
// and a message with several recipients holds the most severe outcome
// reported for any of them.
//
// State: {message_id, status, suppressed}, suppressed being the sorted
// addresses the winning event suppresses (empty unless hard_bounced or
// complained). Per-recipient details are not state, so a second Delivery
// or soft Bounce for another recipient is a noop, not a conflict.
//
// Intents: a hard bounce or a complaint emits one "suppression.add" per
// recipient, policy once, keyed projection.OperationID("ses_suppression",
// lower-cased address, "add"): one per address across retries and
// messages (suppression lists compare addresses case-insensitively).
//
// Limits of one status per message: two different hard bounces (or
// complaints) for different recipients of one message share a version, so
// the second is quarantined (version_conflict) for an operator, and a hard
// bounce arriving after another recipient's complaint is stale and adds no
// suppression. SES's account-level suppression list covers both.
type SESMessages struct{}

var _ projection.Projection = (*SESMessages)(nil)

// NewSESMessages returns the projection.
func NewSESMessages() *SESMessages { return &SESMessages{} }

// Name returns the projection name.
func (*SESMessages) Name() string { return SESMessageProjection }

// EventTypes lists the event types (as the SNS intake records them) it
// handles.
func (*SESMessages) EventTypes() []string {
	return []string{"ses.send", "ses.deliverydelay", "ses.delivery", "ses.reject", "ses.bounce", "ses.complaint"}
}

// sesStatus is a status and its rank.
type sesStatus struct {
	name string
	rank int64
}

var sesStatuses = map[string]sesStatus{
	"ses.send":          {"sent", 1},
	"ses.deliverydelay": {"delayed", 2},
	"ses.delivery":      {"delivered", 3},
	"ses.reject":        {"rejected", 4},
	// ses.bounce is soft_bounced (5) or hard_bounced (6), by bounceType.
	"ses.complaint": {"complained", 7},
}

// sesRecipients are the parts of a notification that name recipients.
type sesRecipients struct {
	Bounce struct {
		BouncedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"bouncedRecipients"`
	} `json:"bounce"`
	Complaint struct {
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
	} `json:"complaint"`
}

// Project computes the delivery status from one SES notification.
func (*SESMessages) Project(ev projection.Event) (projection.Result, error) {
	message := sesMessage(ev.Payload)
	ses, ok := provider.ParseSES(message)
	if !ok {
		return projection.Result{}, projection.Permanent("malformed", errors.New("payload is not an SES notification"))
	}
	typ := "ses." + strings.ToLower(strings.ReplaceAll(ses.Type, " ", "_"))
	if ev.Type != "" && ev.Type != typ {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("event type %q but the notification is %q", ev.Type, ses.Type))
	}
	status, handled := sesStatuses[typ]
	hard := false
	if typ == "ses.bounce" {
		handled = true
		hard = ses.BounceType == "Permanent"
		status = sesStatus{"soft_bounced", 5}
		if hard {
			status = sesStatus{"hard_bounced", 6}
		}
	}
	if !handled {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("ses projection does not handle %q", ses.Type))
	}
	if err := validSubject("mail.messageId", ses.MessageID); err != nil {
		return projection.Result{}, err
	}
	suppressed := []string{}
	reason := ""
	if hard || typ == "ses.complaint" {
		var r sesRecipients
		_ = json.Unmarshal(message, &r) // an odd shape leaves the lists empty, refused below
		var raw []string
		if hard {
			reason = "hard_bounce"
			for _, x := range r.Bounce.BouncedRecipients {
				raw = append(raw, x.EmailAddress)
			}
		} else {
			reason = "complaint"
			for _, x := range r.Complaint.ComplainedRecipients {
				raw = append(raw, x.EmailAddress)
			}
		}
		var err error
		if suppressed, err = sesAddresses(raw); err != nil {
			return projection.Result{}, err
		}
	}
	state := map[string]any{
		"message_id": ses.MessageID,
		"status":     status.name,
		"suppressed": suppressed,
	}
	res := projection.Result{Write: &projection.Write{
		Name: SESMessageProjection, Subject: ses.MessageID, Version: status.rank,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	for _, addr := range suppressed {
		res.Intents = append(res.Intents, projection.Intent{
			OperationID: projection.OperationID(SESSuppressionNamespace, addr, "add"),
			Kind:        "suppression.add",
			Subject:     addr,
			Payload: map[string]any{
				"email": addr, "reason": reason, "message_id": ses.MessageID,
				"bounce_type": ses.BounceType, "bounce_sub_type": ses.BounceSubType,
				"complaint_feedback_type": ses.ComplaintFeedbackType, "version": status.rank,
			},
		})
	}
	return res, nil
}

// sesMessage returns the SES notification inside an SNS Notification
// envelope (what the SNS intake stores), or the payload itself when it is
// not one (an SES notification delivered some other way).
func sesMessage(payload []byte) []byte {
	var env struct {
		Type    string `json:"Type"`
		Message string `json:"Message"`
	}
	if json.Unmarshal(payload, &env) == nil && env.Type == "Notification" && env.Message != "" {
		return []byte(env.Message)
	}
	return payload
}

// sesAddresses lower-cases, checks, de-duplicates and sorts recipient
// addresses. A hard bounce or complaint without a usable address cannot
// be acted on and is refused whole: nothing signed is half-applied.
func sesAddresses(raw []string) ([]string, error) {
	seen := map[string]bool{}
	out := []string{}
	for _, a := range raw {
		a = strings.ToLower(strings.TrimSpace(a))
		if err := validSubject("recipient address", a); err != nil {
			return nil, err
		}
		if !strings.Contains(a, "@") {
			return nil, projection.Permanent("malformed", fmt.Errorf("recipient %q is not an email address", a))
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, projection.Permanent("malformed", errors.New("hard bounce or complaint names no recipient"))
	}
	sort.Strings(out)
	return out, nil
}
