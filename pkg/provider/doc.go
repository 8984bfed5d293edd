// Package provider provides webhook signature verification and identity
// extraction per provider scheme. Verification always runs on
// the raw request bytes, before any parsing, compares in constant time, and
// accepts any of several active secrets so rotations overlap.
//
// A Verifier returns the identities of the events a verified delivery carries
// (one for most providers, several for Quiltt). A delivery that verifies but
// carries no usable identity is still returned, with Unidentified set, so
// intake can keep it quarantined under a content hash: nothing signed is
// thrown away.
//
// Schemes, by kind:
//
//	stripe             stripe-go's webhook package checks the signature; the tolerance
//	                   is checked here against an injected clock (stripe-go reads the
//	                   wall clock and accepts any future timestamp)
//	standard-webhooks  the Standard Webhooks reference library checks the signature
//	                   (webhook-* and svix-* headers); tolerance checked here
//	shopify, github,   hand-written: each is one HMAC over the body (plus a timestamp
//	quiltt             for Quiltt) and no maintained Go library covers them; a
//	                   dependency would cost more than the few lines it saves
//	hmac               hand-written by definition: a configurable scheme for senders
//	                   we do not know yet
//	sns                hand-written: no maintained Go library verifies SNS messages
//	                   (certificate URL checks, canonical strings, both signature
//	                   versions, subscription confirmation)
//
// Whether the signature covers the event id decides what a captured
// delivery re-sent under another id becomes (Identity.UnsignedID):
//
//	id signed          stripe (evt_ id in the body), standard-webhooks
//	                   (webhook-id in "id.timestamp.body"), quiltt (events[].id
//	                   in the body), sns (MessageId in the signed string),
//	                   hmac with id_path, hmac with id_header and {id} in
//	                   signed_payload: the re-sent body under another id does
//	                   not verify
//	id unsigned        github (X-GitHub-Delivery), shopify over HTTPS
//	                   (X-Shopify-Event-Id), hmac with id_header and no {id},
//	                   with or without timestamp_header: it verifies, and the
//	                   intake keeps it as a suspected replay
//
// Events that arrive through an Amazon EventBridge partner event source
// carry no signature: the partner bus is the trust. Their identity comes
// from the same code as the HTTPS path's, so one fact delivered both ways
// is one ledger row: StripeIdentity (the event's detail is the Stripe
// event) and ShopifyEventBridgeIdentity (the detail wraps the webhook body
// and its headers).
//
// A Stripe event of a Connect platform's connected account names the
// account (Identity.ConnectAccounts); the source's connect_accounts option
// says which accounts it accepts (ConnectPolicy, in stripe_connect.go).
//
// New builds a verifier from a source's options and validates them once, at
// cold start.
//
// # A kind of your own
//
// A team whose sender uses a scheme we do not ship implements Verifier and
// registers a Constructor for its kind through app.Rules.Providers (which
// calls Register before the configuration is read), so sources of that
// kind are valid in SOURCES:
//
//	rules := app.Rules{
//		Registry:  reg,
//		Providers: map[string]provider.Constructor{"acme": newAcmeVerifier},
//	}
//
// A Verifier must verify the raw bytes before it reads them, refuse an
// empty secret, compare in constant time, and return ErrNotSigned,
// ErrBadSignature or ErrStale for a delivery that must touch nothing (the
// intake answers 401). Set Identity.UnsignedID when the signature does not
// cover the event id.
package provider
