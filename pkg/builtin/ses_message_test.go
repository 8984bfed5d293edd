package builtin_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// sesEvent wraps an SES notification in an SNS envelope, as the intake
// stores it. snsID is the SNS MessageId (the event id).
func sesEvent(t testing.TB, typ, snsID string, notification map[string]any) projection.Event {
	msg, err := json.Marshal(notification)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": snsID, "TopicArn": "arn:aws:sns:us-east-1:1:ses", "Message": string(msg), "Timestamp": "2026-11-30T12:00:00Z"})
	return projection.Event{Source: "ses", Kind: "sns", EventID: snsID, Type: typ, Payload: env}
}

func sesMail(id string) map[string]any {
	return map[string]any{"messageId": id, "timestamp": "2026-11-30T11:59:57.000Z", "destination": []string{"a@example.com", "b@example.com"}}
}

func sesNote(kind, msgID string, part map[string]any) map[string]any {
	n := map[string]any{"notificationType": kind, "mail": sesMail(msgID)}
	switch kind {
	case "Bounce":
		n["bounce"] = part
	case "Complaint":
		n["complaint"] = part
	case "Delivery":
		n["delivery"] = part
	}
	return n
}

func hardBounce(addrs ...string) map[string]any {
	var rs []map[string]string
	for _, a := range addrs {
		rs = append(rs, map[string]string{"emailAddress": a, "status": "5.1.1"})
	}
	return map[string]any{"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": rs}
}

func complaint(addrs ...string) map[string]any {
	var rs []map[string]string
	for _, a := range addrs {
		rs = append(rs, map[string]string{"emailAddress": a})
	}
	return map[string]any{"complainedRecipients": rs, "complaintFeedbackType": "abuse"}
}

func fixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../events/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSESFixtures(t *testing.T) {
	p := builtin.NewSESMessages()
	cases := []struct {
		file, typ, msgID, status string
		version                  int64
		suppressed               []string
	}{
		{"sns/ses-bounce.json", "ses.bounce", "0100019ad6c3b8f0-2f4e6a1d-7c5b-4e2a-9d3f-1b8c0a6e5d47-000000", "hard_bounced", 6, []string{"bounce@simulator.amazonses.com"}},
		{"sns/ses-complaint.json", "ses.complaint", "0100019ad6cf77e3-61a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8-000000", "complained", 7, []string{"complaint@simulator.amazonses.com"}},
		{"sns/ses-delivery.json", "ses.delivery", "0100019ad6c1f2a3-0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9-000000", "delivered", 3, []string{}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			res, err := p.Project(projection.Event{Kind: "sns", Type: c.typ, Payload: fixture(t, c.file)})
			if err != nil {
				t.Fatal(err)
			}
			w := res.Write
			if w.Name != builtin.SESMessageProjection || w.Subject != c.msgID || w.Version != c.version || w.Terminal {
				t.Fatalf("write %+v", w)
			}
			if w.State["status"] != c.status || !reflect.DeepEqual(w.State["suppressed"], c.suppressed) {
				t.Fatalf("state %+v", w.State)
			}
			if len(res.Intents) != len(c.suppressed) {
				t.Fatalf("intents %+v", res.Intents)
			}
			for i, in := range res.Intents {
				addr := c.suppressed[i]
				if in.Kind != "suppression.add" || in.Subject != addr || in.OperationID != projection.OperationID("ses_suppression", addr, "add") {
					t.Fatalf("intent %+v", in)
				}
				if in.Payload["email"] != addr || in.Payload["message_id"] != c.msgID || in.Payload["version"] != c.version {
					t.Fatalf("payload %+v", in.Payload)
				}
			}
		})
	}
}

func TestSESStatusesAndSuppression(t *testing.T) {
	p := builtin.NewSESMessages()
	cases := []struct {
		name, typ  string
		note       map[string]any
		status     string
		version    int64
		suppressed []string
	}{
		{"send", "ses.send", map[string]any{"eventType": "Send", "mail": sesMail("m1"), "send": map[string]any{}}, "sent", 1, []string{}},
		{"delay", "ses.deliverydelay", map[string]any{"eventType": "DeliveryDelay", "mail": sesMail("m1"), "deliveryDelay": map[string]any{"delayType": "MailboxFull"}}, "delayed", 2, []string{}},
		{"reject", "ses.reject", map[string]any{"eventType": "Reject", "mail": sesMail("m1"), "reject": map[string]any{"reason": "Bad content"}}, "rejected", 4, []string{}},
		{"soft bounce", "ses.bounce", sesNote("Bounce", "m1", map[string]any{"bounceType": "Transient", "bounceSubType": "MailboxFull", "bouncedRecipients": []map[string]string{{"emailAddress": "a@example.com"}}}), "soft_bounced", 5, []string{}},
		{"undetermined bounce", "ses.bounce", sesNote("Bounce", "m1", map[string]any{"bounceType": "Undetermined", "bouncedRecipients": []map[string]string{{"emailAddress": "a@example.com"}}}), "soft_bounced", 5, []string{}},
		{"hard bounce, two recipients, one twice in another case", "ses.bounce", sesNote("Bounce", "m1", hardBounce("B@Example.com", "a@example.com", "b@example.com ")), "hard_bounced", 6, []string{"a@example.com", "b@example.com"}},
		{"complaint", "ses.complaint", sesNote("Complaint", "m1", complaint("a@example.com")), "complained", 7, []string{"a@example.com"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := p.Project(sesEvent(t, c.typ, "sns-1", c.note))
			if err != nil {
				t.Fatal(err)
			}
			if res.Write.Subject != "m1" || res.Write.Version != c.version || res.Write.State["status"] != c.status || !reflect.DeepEqual(res.Write.State["suppressed"], c.suppressed) {
				t.Fatalf("write %+v", res.Write)
			}
			if len(res.Intents) != len(c.suppressed) {
				t.Fatalf("intents %+v", res.Intents)
			}
			for i, in := range res.Intents {
				if in.Subject != c.suppressed[i] || in.OperationID != projection.OperationID("ses_suppression", c.suppressed[i], "add") {
					t.Fatalf("intent %+v", in)
				}
			}
		})
	}
	// The same address bouncing on another message, redelivered under
	// another SNS id, gives the same suppression key.
	a, _ := p.Project(sesEvent(t, "ses.bounce", "sns-1", sesNote("Bounce", "m1", hardBounce("x@example.com"))))
	b, _ := p.Project(sesEvent(t, "ses.bounce", "sns-2", sesNote("Bounce", "m2", hardBounce("X@example.com"))))
	if a.Intents[0].OperationID != b.Intents[0].OperationID {
		t.Fatal("one address, two suppression keys")
	}
	// A bare SES notification (not wrapped in SNS) is read too.
	raw, _ := json.Marshal(sesNote("Delivery", "m3", map[string]any{"recipients": []string{"a@example.com"}}))
	if res, err := p.Project(projection.Event{Type: "ses.delivery", Payload: raw}); err != nil || res.Write.Subject != "m3" {
		t.Fatalf("bare notification: %v %+v", err, res.Write)
	}
}

func TestSESPermanentErrors(t *testing.T) {
	p := builtin.NewSESMessages()
	cases := map[string]struct {
		ev   projection.Event
		code string
	}{
		"not SES":                   {projection.Event{Type: "ses.bounce", Payload: []byte(`{"Type":"Notification","Message":"hello"}`)}, "malformed"},
		"not JSON":                  {projection.Event{Type: "ses.bounce", Payload: []byte(`{`)}, "malformed"},
		"type disagrees":            {sesEvent(t, "ses.delivery", "s", sesNote("Bounce", "m1", hardBounce("a@example.com"))), "malformed"},
		"no message id":             {sesEvent(t, "ses.delivery", "s", map[string]any{"notificationType": "Delivery", "mail": map[string]any{}}), "malformed"},
		"hard bounce, no recipient": {sesEvent(t, "ses.bounce", "s", sesNote("Bounce", "m1", hardBounce())), "malformed"},
		"complaint, not an address": {sesEvent(t, "ses.complaint", "s", sesNote("Complaint", "m1", complaint("nobody"))), "malformed"},
		"open is not projected":     {sesEvent(t, "ses.open", "s", map[string]any{"eventType": "Open", "mail": sesMail("m1")}), "unsupported_type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(c.ev)
			if code, perm := projection.AsPermanent(err); !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

// One recipient's story in every order, with an SNS redelivery of the
// delivery under a new SNS id: the message ends complained, and the
// address is suppressed once.
func TestSESEveryOrder(t *testing.T) {
	events := []labelled{
		{"send", sesEvent(t, "ses.send", "s1", map[string]any{"eventType": "Send", "mail": sesMail("m1"), "send": map[string]any{}})},
		{"delay", sesEvent(t, "ses.deliverydelay", "s2", map[string]any{"eventType": "DeliveryDelay", "mail": sesMail("m1")})},
		{"delivery", sesEvent(t, "ses.delivery", "s3", sesNote("Delivery", "m1", map[string]any{"recipients": []string{"a@example.com"}}))},
		{"delivery-again", sesEvent(t, "ses.delivery", "s4", sesNote("Delivery", "m1", map[string]any{"recipients": []string{"a@example.com"}}))},
		{"complaint", sesEvent(t, "ses.complaint", "s5", sesNote("Complaint", "m1", complaint("a@example.com")))},
	}
	for _, r := range runPermutations(t, builtin.NewSESMessages(), "m1", events, true) {
		if r.final.State["status"] != "complained" || r.final.Version != 7 {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if len(r.sim.intents) != 1 || r.sim.intents[projection.OperationID("ses_suppression", "a@example.com", "add")].Kind != "suppression.add" {
			t.Fatalf("order %v: intents %v", r.order, r.sim.intents)
		}
	}
	// Several recipients: delivered to one, soft bounce for another, hard
	// bounce for a third. The message reads hard_bounced; only the hard
	// bounce's recipient is suppressed.
	events = []labelled{
		{"send", sesEvent(t, "ses.send", "s1", map[string]any{"eventType": "Send", "mail": sesMail("m2")})},
		{"delivery-a", sesEvent(t, "ses.delivery", "s2", sesNote("Delivery", "m2", map[string]any{"recipients": []string{"a@example.com"}}))},
		{"soft-b", sesEvent(t, "ses.bounce", "s3", sesNote("Bounce", "m2", map[string]any{"bounceType": "Transient", "bouncedRecipients": []map[string]string{{"emailAddress": "b@example.com"}}}))},
		{"hard-c", sesEvent(t, "ses.bounce", "s4", sesNote("Bounce", "m2", hardBounce("c@example.com")))},
	}
	for _, r := range runPermutations(t, builtin.NewSESMessages(), "m2", events, true) {
		if r.final.State["status"] != "hard_bounced" || !reflect.DeepEqual(r.final.State["suppressed"], []string{"c@example.com"}) || len(r.sim.intents) != 1 {
			t.Fatalf("order %v: %+v, intents %v", r.order, r.final, r.sim.intents)
		}
	}
}

// The documented limit: two hard bounces for different recipients of one
// message share a version, so the second is quarantined (visible to an
// operator), never silently dropped as a noop.
func TestSESTwoHardBouncesForOneMessageConflict(t *testing.T) {
	p := builtin.NewSESMessages()
	a, _ := p.Project(sesEvent(t, "ses.bounce", "s1", sesNote("Bounce", "m1", hardBounce("a@example.com"))))
	b, _ := p.Project(sesEvent(t, "ses.bounce", "s2", sesNote("Bounce", "m1", hardBounce("b@example.com"))))
	sim := newSim()
	if got := sim.commit("a", a); got != simApplied {
		t.Fatal(got)
	}
	if got := sim.commit("b", b); got != simConflict {
		t.Fatalf("second hard bounce: %s, want quarantined", got)
	}
}
