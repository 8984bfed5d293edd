package source_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/source"
)

const (
	stripeBus  = "aws.partner/stripe.com/ed_test_FAKE_0001"
	shopifyBus = "aws.partner/shopify.com/1234567/test-FAKE-source"
)

func TestDeliveryPaths(t *testing.T) {
	set, err := source.Parse([]byte(`{"sources":[
	  {"name":"stripe","kind":"stripe","secrets":["sm:x"]},
	  {"name":"stripe-both","kind":"stripe","secrets":["sm:x"],"delivery":"https+eventbridge","event_source":"` + stripeBus + `"},
	  {"name":"shop-bus","kind":"shopify","delivery":"eventbridge","event_source":"` + shopifyBus + `"},
	  {"name":"gh","kind":"github","secrets":["sm:y"],"delivery":"https"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name               string
		https, eventbridge bool
	}{{"stripe", true, false}, {"stripe-both", true, true}, {"shop-bus", false, true}, {"gh", true, false}} {
		src, _ := set.Lookup(c.name)
		if src.HTTPS() != c.https || src.EventBridge() != c.eventbridge {
			t.Errorf("%s: https %v eventbridge %v, want %v %v", c.name, src.HTTPS(), src.EventBridge(), c.https, c.eventbridge)
		}
	}
	// The bridge finds a source by its exact partner event source name only.
	if src, ok := set.ByEventSource(stripeBus); !ok || src.Name != "stripe-both" {
		t.Errorf("ByEventSource(stripe) = %+v %v", src, ok)
	}
	if src, ok := set.ByEventSource(shopifyBus); !ok || src.Name != "shop-bus" || len(src.Secrets) != 0 {
		t.Errorf("ByEventSource(shopify) = %+v %v", src, ok)
	}
	for _, miss := range []string{"", "aws.partner/stripe.com", stripeBus + "x", strings.ToUpper(stripeBus)} {
		if _, ok := set.ByEventSource(miss); ok {
			t.Errorf("ByEventSource(%q) found a source", miss)
		}
	}
	var names []string
	for _, s := range set.EventBridgeSources() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "shop-bus,stripe-both" {
		t.Errorf("EventBridgeSources = %v", names)
	}
}

func TestDeliveryErrorsNameTheSource(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		wantIn []string
	}{
		{"unknown delivery", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"delivery":"sqs"}`),
			[]string{`sources[0] ("s")`, `delivery "sqs"`}},
		{"eventbridge without event_source", doc(`{"name":"s","kind":"stripe","delivery":"eventbridge"}`),
			[]string{`sources[0] ("s")`, "needs event_source", "aws.partner/stripe.com/"}},
		{"event_source that is an ARN", doc(`{"name":"s","kind":"stripe","delivery":"eventbridge","event_source":"arn:aws:events:eu-west-1::event-source/` + stripeBus + `"}`),
			[]string{`sources[0] ("s")`, "must start with aws.partner/"}},
		{"event_source of another provider", doc(`{"name":"s","kind":"stripe","delivery":"eventbridge","event_source":"` + shopifyBus + `"}`),
			[]string{`sources[0] ("s")`, "not a stripe partner event source"}},
		{"event_source with bad characters", doc(`{"name":"s","kind":"stripe","delivery":"eventbridge","event_source":"aws.partner/stripe.com/ed test"}`),
			[]string{`sources[0] ("s")`, "event_source must be"}},
		{"event_source without eventbridge delivery", doc(`{"name":"s","kind":"stripe","secrets":["sm:x"],"event_source":"` + stripeBus + `"}`),
			[]string{`sources[0] ("s")`, "does not include eventbridge"}},
		{"a kind that has no partner source", doc(`{"name":"g","kind":"github","secrets":["sm:x"],"delivery":"eventbridge","event_source":"aws.partner/github.com/x"}`),
			[]string{`sources[0] ("g")`, "kind github cannot deliver through Amazon EventBridge"}},
		{"https delivery still needs secrets", doc(`{"name":"s","kind":"stripe","delivery":"https+eventbridge","event_source":"` + stripeBus + `"}`),
			[]string{`sources[0] ("s")`, "at least one secret reference is required"}},
		{"one event source for two sources", `{"sources":[
		  {"name":"a","kind":"stripe","delivery":"eventbridge","event_source":"` + stripeBus + `"},
		  {"name":"b","kind":"stripe","delivery":"eventbridge","event_source":"` + stripeBus + `"}]}`,
			[]string{`sources[1] ("b")`, `already source "a"'s`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := source.Parse([]byte(tt.doc))
			if !errors.Is(err, source.ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
