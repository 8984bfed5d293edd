// Package provider provides webhook signature verification and identity
// extraction per provider scheme (DESIGN.md §8). Verification always runs on
// the raw request bytes, before any parsing, compares in constant time, and
// accepts any of several active secrets so rotations overlap.
//
// A Verifier returns the identities of the events a verified delivery carries
// (one for most providers, several for Quiltt). A delivery that verifies but
// carries no usable identity is still returned, with Unidentified set, so
// intake can keep it quarantined under a content hash: nothing signed is
// thrown away.
//
// Stripe verification uses stripe-go's webhook package for the signature
// itself; the timestamp tolerance is checked here against an injected clock
// (stripe-go reads the wall clock and accepts any future timestamp).
package provider
