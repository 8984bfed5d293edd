// Package harness groups what tests, runs locally and measures the
// product, apart from what ships: the in-process AWS emulators (localaws),
// request counting and crash injection (awstrace), the test pipeline
// (pipelinetest), the fakes of a downstream API (downstream) and of the
// Stripe API (stripefake), the local stack (devstack) and its demo (demo),
// model-based chaos (chaos), load (loadgen), write units and cost
// (capacity) and the benchmark plots (plot). No Lambda function and not
// webhookctl link any of them (functions/layout_test.go).
package harness
