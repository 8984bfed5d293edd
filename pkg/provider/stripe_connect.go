package provider

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Stripe Connect.
//
// A Connect platform's endpoint (a webhook endpoint created with
// connect=true, or an event destination whose events come from connected
// accounts) receives the events of its connected accounts as well as its
// own, signed with the same secret. Stripe names the account an event
// belongs to: a snapshot event carries a top-level "account" (the
// connected account that originated it) and, from API version
// 2025-04-30.basil, "context" too; a thin event carries "context", the
// authentication context needed to fetch the event or its related object,
// which is the value a Stripe-Context header takes: an account id, or a
// path of them joined by "/" (a platform's connected account, then that
// account's own related account). The platform's own events name none.
//
// A verified signature says only that Stripe sent the event, not that the
// source expects events of that account: a connected account (for a
// Standard account, a business the platform does not control) can create
// the subscriptions, invoices and payment intents whose events would
// otherwise drive the source's projections and intents. So a stripe source
// accepts the events of connected accounts only when its option
// connect_accounts says so:
//
//	absent                   none: an event naming an account is quarantined
//	"acct_1Ab…,acct_2Cd…"    those accounts only (every account an event names must be listed)
//	"*"                      any connected account
//
// The intake applies it (both delivery paths); see ConnectPolicy.

// ConnectAccountsOption is the stripe source option naming the connected
// accounts whose events the source accepts.
const ConnectAccountsOption = "connect_accounts"

// connectAccountRE is the shape of a Stripe account id in the option.
var connectAccountRE = regexp.MustCompile(`^acct_[A-Za-z0-9]+$`)

// ConnectPolicy is which connected accounts' events a stripe source
// accepts. The zero value accepts none.
type ConnectPolicy struct {
	any      bool
	accounts []string // sorted
}

// ParseConnectPolicy reads a source's connect_accounts option. Absent
// means none; otherwise "*" (any account) or account ids separated by
// commas (spaces around them are ignored). Errors wrap ErrOptions and name
// the option.
func ParseConnectPolicy(opts map[string]string) (ConnectPolicy, error) {
	v, ok := opts[ConnectAccountsOption]
	if !ok {
		return ConnectPolicy{}, nil
	}
	if strings.TrimSpace(v) == "*" {
		return ConnectPolicy{any: true}, nil
	}
	var p ConnectPolicy
	for i, part := range strings.Split(v, ",") {
		id := strings.TrimSpace(part)
		switch {
		case id == "" && strings.TrimSpace(v) == "":
			return ConnectPolicy{}, fmt.Errorf(`%w: stripe option %q is empty: list account ids ("acct_…,acct_…") or "*" for any connected account; leave it out to accept none`,
				ErrOptions, ConnectAccountsOption)
		case id == "*":
			return ConnectPolicy{}, fmt.Errorf(`%w: stripe option %q: "*" (any connected account) cannot be listed with account ids`, ErrOptions, ConnectAccountsOption)
		case !connectAccountRE.MatchString(id):
			return ConnectPolicy{}, fmt.Errorf("%w: stripe option %q: entry %d %s is not a Stripe account id (want %s, or \"*\" alone)",
				ErrOptions, ConnectAccountsOption, i+1, strconv.QuoteToASCII(id), connectAccountRE)
		}
		p.accounts = append(p.accounts, id)
	}
	slices.Sort(p.accounts)
	p.accounts = slices.Compact(p.accounts)
	return p, nil
}

// Refused returns the first of accounts the policy does not accept, and
// true; false when it accepts them all (always for none: the platform's
// own event).
func (p ConnectPolicy) Refused(accounts []string) (string, bool) {
	for _, a := range accounts {
		if !p.any {
			if _, ok := slices.BinarySearch(p.accounts, a); !ok {
				return a, true
			}
		}
	}
	return "", false
}

// String says what the policy accepts, for a quarantine reason.
func (p ConnectPolicy) String() string {
	switch {
	case p.any:
		return "any connected account"
	case len(p.accounts) == 0:
		return "no connected account"
	case len(p.accounts) <= 3:
		return "connected accounts " + strings.Join(p.accounts, ", ") + " only"
	}
	return fmt.Sprintf("%d listed connected accounts only", len(p.accounts))
}

// Reason is the quarantine message of an event of acct, an account the
// policy refused: the account, and what the source accepts.
func (p ConnectPolicy) Reason(acct string) string {
	if !connectAccountRE.MatchString(acct) {
		acct = strconv.QuoteToASCII(acct)
	}
	return fmt.Sprintf("event of connected account %s; the source accepts %s (option %s)", acct, p, ConnectAccountsOption)
}

// stripeConnectAccounts lists the accounts a Stripe event names: its
// account, then each account of its context path, without repeats, in
// that order. Empty for the platform's own event. A context path with an
// empty part keeps it as an account "", which no list accepts.
func stripeConnectAccounts(account, stripeCtx string) []string {
	var out []string
	if account != "" {
		out = append(out, account)
	}
	if stripeCtx != "" {
		for _, a := range strings.Split(stripeCtx, "/") {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// newStripe builds the Stripe verifier; its only own option is
// connect_accounts, which the intake reads (ParseConnectPolicy).
func newStripe(opts map[string]string) (Verifier, error) {
	for k := range opts {
		if k != ConnectAccountsOption && !sharedOptions[k] {
			return nil, fmt.Errorf("%w: stripe takes no option %q (it takes %q and %q)", ErrOptions, k, ConnectAccountsOption, "account_metadata_key")
		}
	}
	if _, err := ParseConnectPolicy(opts); err != nil {
		return nil, err
	}
	return Stripe{}, nil
}
