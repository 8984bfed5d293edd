package source

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Delivery paths a source may use (Source.Delivery).
const (
	// DeliveryHTTPS: the provider POSTs signed webhooks to
	// /webhooks/{source} (the default).
	DeliveryHTTPS = "https"
	// DeliveryEventBridge: the provider puts events on an Amazon
	// EventBridge partner event bus; the bridge function reads them.
	DeliveryEventBridge = "eventbridge"
	// DeliveryBoth: either path; one fact delivered through both is one
	// ledger row, because both paths use the source's name.
	DeliveryBoth = "https+eventbridge"
)

// PartnerPrefix is the partner event source prefix of each provider kind
// that can deliver through Amazon EventBridge: Stripe event destinations
// ("aws.partner/stripe.com/ed_…") and Shopify apps
// ("aws.partner/shopify.com/<app id>/<source name>").
var PartnerPrefix = map[string]string{
	"stripe":  "aws.partner/stripe.com/",
	"shopify": "aws.partner/shopify.com/",
}

// eventSourceRE is EventBridge's own rule for a partner event source name
// (CreatePartnerEventSource: aws.partner/<partner>/<name>, at most 256
// characters).
var eventSourceRE = regexp.MustCompile(`^aws\.partner(/[\.\-_A-Za-z0-9]+){2,}$`)

// HTTPS reports whether the source accepts signed webhooks on
// POST /webhooks/{source}.
func (s Source) HTTPS() bool {
	return s.Delivery == "" || s.Delivery == DeliveryHTTPS || s.Delivery == DeliveryBoth
}

// EventBridge reports whether the source receives events from its
// EventBridge partner event source (EventSource).
func (s Source) EventBridge() bool {
	return s.Delivery == DeliveryEventBridge || s.Delivery == DeliveryBoth
}

// checkDelivery validates delivery and event_source. The event source must
// belong to the source's own provider (a Stripe source never reads
// Shopify's partner bus), so a source can only write what it owns (I8).
func checkDelivery(s Source) error {
	switch s.Delivery {
	case "", DeliveryHTTPS:
		if s.EventSource != "" {
			return fmt.Errorf("event_source %q is set but delivery %q does not include eventbridge (use %q or %q)",
				s.EventSource, s.delivery(), DeliveryEventBridge, DeliveryBoth)
		}
		return nil
	case DeliveryEventBridge, DeliveryBoth:
	default:
		return fmt.Errorf("delivery %q is not %q, %q or %q", s.Delivery, DeliveryHTTPS, DeliveryEventBridge, DeliveryBoth)
	}
	prefix, ok := PartnerPrefix[s.Kind]
	if !ok {
		return fmt.Errorf("delivery %q: kind %s cannot deliver through Amazon EventBridge (only stripe and shopify)", s.Delivery, s.Kind)
	}
	switch {
	case s.EventSource == "":
		return fmt.Errorf("delivery %q needs event_source, the partner event source name (%s…)", s.Delivery, prefix)
	case !strings.HasPrefix(s.EventSource, "aws.partner/"):
		return fmt.Errorf("event_source %q must start with aws.partner/ (a partner event source name, not an ARN or a bus of your own)", s.EventSource)
	case !strings.HasPrefix(s.EventSource, prefix):
		return fmt.Errorf("event_source %q is not a %s partner event source (want %s…)", s.EventSource, s.Kind, prefix)
	case len(s.EventSource) > 256 || !eventSourceRE.MatchString(s.EventSource):
		return errors.New("event_source must be aws.partner/<partner>/<name> of letters, digits, '.', '-', '_' and '/' (at most 256 characters)")
	}
	return nil
}

func (s Source) delivery() string {
	if s.Delivery == "" {
		return DeliveryHTTPS
	}
	return s.Delivery
}

// ByEventSource finds the source whose delivery includes eventbridge and
// whose event_source is exactly name.
func (s *Set) ByEventSource(name string) (Source, bool) {
	src, ok := s.byEventSource[name]
	return src, ok
}

// EventBridgeSources lists the sources with eventbridge delivery, by name.
func (s *Set) EventBridgeSources() []Source {
	var out []Source
	for _, n := range s.Names() {
		if src := s.byName[n]; src.EventBridge() {
			out = append(out, src)
		}
	}
	return out
}
