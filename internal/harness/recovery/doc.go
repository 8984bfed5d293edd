// Package recovery provides the measurement behind BENCHMARKS.md's recovery
// section: how long the local stack takes, after a SIGKILL of a real
// function runtime under load, until every event accepted before the kill
// is PROCESSED and every effect is settled (SUCCEEDED, or rightly ended
// without a call), and whether anything was lost or doubled on the way.
//
// Run drives a running devstack.Stack with internal/harness/loadgen through a
// recording proxy (which tells when each event was first answered 2xx),
// kills processor, dispatcher and intake runtimes in rotation during the
// send phase (devstack.KillRuntime, KillRuntimeInvoked), lets loadgen
// drain and check, then reads the ledger once: each event's processed_at
// and each intent's finished_at are compared with the kill times. Nothing
// polls the stack while it recovers, so the measurement does not slow it.
//
// For each kill it reports two times. Strict: from the kill until every
// event accepted before it is PROCESSED (and every intent that existed or
// that those events created is settled). Own: the same over what the kill
// was the first to find in flight (accepted or created since the previous
// kill), so a kill that lands while an earlier one is still being
// recovered is not charged with the earlier one's wait.
package recovery
