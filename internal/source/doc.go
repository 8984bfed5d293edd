// Package source provides the webhook source configuration: which sources
// exist, which provider scheme each speaks, where its secrets live and its
// options. It is validated once at cold start, with an error that says what
// is wrong and where.
//
// # Format
//
// One JSON document, given to the functions in the SOURCES environment
// variable (or a file named by SOURCES_FILE):
//
//	{
//	  "sources": [
//	    {
//	      "name": "stripe",                       // [a-z0-9-], the {source} in POST /webhooks/{source}
//	      "kind": "stripe",                       // provider scheme, see provider.Kinds()
//	      "secrets": ["arn:aws:secretsmanager:eu-west-1:123456789012:secret:stripe-whsec-AbCdEf"],
//	      "tolerance_seconds": 300,               // signed timestamp tolerance (default 300)
//	      "max_body_bytes": 1048576,              // larger bodies get 413 (default and maximum 1 MiB)
//	      "options": {"account_metadata_key": "account_id"}
//	    }
//	  ]
//	}
//
// A source may also (or only) receive its provider's events from an Amazon
// EventBridge partner event source: "delivery" is "https" (the default),
// "eventbridge" or "https+eventbridge", and "event_source" names the partner
// event source ("aws.partner/stripe.com/ed_…", "aws.partner/shopify.com/…";
// stripe and shopify only). Secrets are required only when delivery
// includes https. Both paths use the source's name, so one fact delivered
// through both is one ledger row.
//
// A stripe source that belongs to a Connect platform receives its connected
// accounts' events too (they name the account in "account" or "context").
// It accepts them only for the accounts its option connect_accounts lists:
//
//	"options": {"connect_accounts": "acct_1Ab…,acct_2Cd…"}   those accounts (every account an event names)
//	"options": {"connect_accounts": "*"}                     any connected account
//
// Without the option an event that names an account is kept QUARANTINED
// (connect_account_not_allowed, with a message naming the account) and
// does no business work; the platform's own events are unaffected. See
// provider.ConnectPolicy.
//
// A secret reference is a Secrets Manager ARN or name ("sm:<name>" or a bare
// ARN), or "env:<VAR>" to read an environment variable (local stack and
// tests only). A secret's value is either the secret itself or a JSON array
// of secrets, so a rotation can keep old and new active in one place; several
// references are all active at once. Values are cached for five minutes and
// never logged.
package source
