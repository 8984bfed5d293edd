package queue_test

import (
	"testing"

	"github.com/effectively-once/webhooks/internal/queue"
)

// A role's unique id allows every session of that role and nothing else: not
// another role whose id it begins, not a user, not a message whose sender
// SQS did not name; an entry with a session allows that session only.
func TestSendersAllowARoleSessionsAndNothingElse(t *testing.T) {
	s, err := queue.ParseSenders(" AROAEXAMPLEBRIDGE01 , AIDAEXAMPLEUSER0001,AROAEXAMPLEOTHER001:one-session")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{
		"AROAEXAMPLEBRIDGE01":                       true,
		"AROAEXAMPLEBRIDGE01:webhooks-dev-bridge":   true,
		"AROAEXAMPLEBRIDGE01:awslambda_1_2026":      true,
		"AROAEXAMPLEBRIDGE012:webhooks-dev-bridge":  false,
		"AROAEXAMPLEBRIDGE0:webhooks-dev-bridge":    false,
		"AIDAEXAMPLEUSER0001":                       true,
		"AIDAEXAMPLEUSER0001:x":                     true,
		"AROAEXAMPLEOTHER001:one-session":           true,
		"AROAEXAMPLEOTHER001:another":               false,
		"AROAEXAMPLEOTHER001":                       false,
		"":                                          false,
		"000000000000":                              false,
		"arn:aws:iam::123456789012:role/attacker":   false,
		" AROAEXAMPLEBRIDGE01:webhooks-dev-bridge":  false,
		"AROAEXAMPLEBRIDGE01,AIDAEXAMPLEUSER0001":   false,
		"AROAEXAMPLEBRIDGE01\nAROAEXAMPLEBRIDGE01:": false,
	} {
		if got := s.Allows(id); got != want {
			t.Errorf("Allows(%q) = %v, want %v", id, got, want)
		}
	}
	if s.String() != "AROAEXAMPLEBRIDGE01,AIDAEXAMPLEUSER0001,AROAEXAMPLEOTHER001:one-session" {
		t.Errorf("String %q", s)
	}
}

func TestParseSendersRefusesAnEmptyListAndWhatIsNoUniqueID(t *testing.T) {
	for _, list := range []string{"", " , ", "AROA EXAMPLE", "arn:aws:iam::123456789012:role/bridge", "AROAX:a,b:", "AROAX:", "*", "AROAX:sess ion"} {
		if s, err := queue.ParseSenders(list); err == nil {
			t.Errorf("ParseSenders(%q) = %v, want an error", list, s)
		}
	}
}
