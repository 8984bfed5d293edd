package provider_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// StripeIdentity names the connected account a Stripe event belongs to:
// a snapshot event's account (and its context, which Stripe adds from API
// version 2025-04-30.basil), a thin event's context, each account of a
// context path. The platform's own events name none.
func TestStripeIdentityNamesTheConnectedAccount(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       []string
		attrs      map[string]string
	}{
		{"own snapshot event", `{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`, nil, map[string]string{"format": "snapshot"}},
		{"own event, null account and context", `{"id":"evt_1","object":"event","type":"customer.created","account":null,"context":null,"data":{"object":{"id":"cus_1"}}}`, nil, map[string]string{"format": "snapshot"}},
		{"connect snapshot event", `{"id":"evt_1","object":"event","type":"customer.created","account":"acct_1A","data":{"object":{"id":"cus_1"}}}`,
			[]string{"acct_1A"}, map[string]string{"format": "snapshot", "connect_account": "acct_1A"}},
		{"connect snapshot event with its context", `{"id":"evt_1","object":"event","type":"customer.created","account":"acct_1A","context":"acct_1A","data":{"object":{"id":"cus_1"}}}`,
			[]string{"acct_1A"}, map[string]string{"format": "snapshot", "connect_account": "acct_1A", "context": "acct_1A"}},
		{"snapshot event with a context only", `{"id":"evt_1","object":"event","type":"customer.created","context":"acct_1B","data":{"object":{"id":"cus_1"}}}`,
			[]string{"acct_1B"}, map[string]string{"format": "snapshot", "context": "acct_1B"}},
		{"own thin event", `{"id":"evt_2","object":"v2.core.event","type":"v1.customer.subscription.updated","context":null,"related_object":{"id":"sub_1","type":"subscription"}}`,
			nil, map[string]string{"format": "thin", "thin_event_id": "evt_2", "related_object_type": "subscription"}},
		{"connect thin event", `{"id":"evt_2","object":"v2.core.event","type":"v1.customer.subscription.updated","context":"acct_1A","related_object":{"id":"sub_1","type":"subscription"}}`,
			[]string{"acct_1A"}, map[string]string{"format": "thin", "thin_event_id": "evt_2", "related_object_type": "subscription", "context": "acct_1A"}},
		{"a context path with an empty part", `{"id":"evt_2","object":"v2.core.event","type":"v1.customer.subscription.updated","context":"/","related_object":{"id":"sub_1","type":"subscription"}}`,
			[]string{""}, map[string]string{"format": "thin", "thin_event_id": "evt_2", "related_object_type": "subscription", "context": "/"}},
		{"thin event of an account's own account", `{"id":"evt_2","object":"v2.core.event","type":"v1.customer.subscription.updated","context":"acct_1A/acct_1R","related_object":{"id":"sub_1","type":"subscription"}}`,
			[]string{"acct_1A", "acct_1R"}, map[string]string{"format": "thin", "thin_event_id": "evt_2", "related_object_type": "subscription", "context": "acct_1A/acct_1R"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := provider.StripeIdentity([]byte(c.body))
			if v.Unidentified != "" || len(v.Events) != 1 {
				t.Fatalf("%+v", v)
			}
			id := v.Events[0]
			if !slices.Equal(id.ConnectAccounts, c.want) {
				t.Errorf("ConnectAccounts %q, want %q", id.ConnectAccounts, c.want)
			}
			for k, want := range c.attrs {
				if id.Attributes[k] != want {
					t.Errorf("attribute %s = %q, want %q (%v)", k, id.Attributes[k], want, id.Attributes)
				}
			}
			if len(id.Attributes) != len(c.attrs) {
				t.Errorf("attributes %v, want %v", id.Attributes, c.attrs)
			}
		})
	}
}

// connect_accounts: absent accepts no connected account, a list accepts
// those (every account an event names must be listed), "*" any; the
// platform's own event (no account) is always accepted.
func TestConnectPolicy(t *testing.T) {
	parse := func(v *string) provider.ConnectPolicy {
		t.Helper()
		opts := map[string]string{}
		if v != nil {
			opts[provider.ConnectAccountsOption] = *v
		}
		p, err := provider.ParseConnectPolicy(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := provider.New("stripe", opts); err != nil {
			t.Fatalf("the stripe verifier refuses %v: %v", opts, err)
		}
		return p
	}
	str := func(s string) *string { return &s }
	none, listed, anyAccount := parse(nil), parse(str("acct_1A, acct_1B,acct_1A")), parse(str("*"))
	for _, c := range []struct {
		p        provider.ConnectPolicy
		accounts []string
		refused  string // "-" for none
	}{
		{none, nil, "-"},
		{none, []string{"acct_1A"}, "acct_1A"},
		{listed, nil, "-"},
		{listed, []string{"acct_1A"}, "-"},
		{listed, []string{"acct_1B", "acct_1A"}, "-"},
		{listed, []string{"acct_1C"}, "acct_1C"},
		{listed, []string{"acct_1A", "acct_1C"}, "acct_1C"},
		{listed, []string{"acct_1a"}, "acct_1a"},
		{listed, []string{"acct_1A", ""}, ""}, // a context path with an empty part
		{anyAccount, nil, "-"},
		{anyAccount, []string{"acct_1C", "anything"}, "-"},
	} {
		got, refused := c.p.Refused(c.accounts)
		if !refused {
			got = "-"
		}
		if got != c.refused {
			t.Errorf("%s: Refused(%q) = %q, want %q", c.p, c.accounts, got, c.refused)
		}
	}
	if s := listed.String(); s != "connected accounts acct_1A, acct_1B only" {
		t.Errorf("listed says %q", s)
	}
	if r := none.Reason("acct_1C"); !strings.Contains(r, "acct_1C") || !strings.Contains(r, "no connected account") || !strings.Contains(r, "connect_accounts") {
		t.Errorf("reason %q", r)
	}
	if r := none.Reason("acct\n1"); strings.Contains(r, "\n") {
		t.Errorf("reason %q carries a control character", r)
	}

	for _, bad := range []string{"", " ", "acct_", "acct_1A,", "acct_1A;acct_1B", "acct_1A acct_1B", "ACCT_1A", "acct_1A,*", "**"} {
		opts := map[string]string{provider.ConnectAccountsOption: bad}
		if _, err := provider.ParseConnectPolicy(opts); !errors.Is(err, provider.ErrOptions) || !strings.Contains(err.Error(), provider.ConnectAccountsOption) {
			t.Errorf("connect_accounts %q: %v", bad, err)
		}
		if _, err := provider.New("stripe", opts); !errors.Is(err, provider.ErrOptions) {
			t.Errorf("the stripe verifier accepts connect_accounts %q: %v", bad, err)
		}
	}
	if _, err := provider.New("stripe", map[string]string{"connect": "*"}); !errors.Is(err, provider.ErrOptions) {
		t.Errorf("an unknown stripe option: %v", err)
	}
}
