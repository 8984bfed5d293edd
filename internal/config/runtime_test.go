package config_test

import (
	"context"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/config"
)

// Start builds the shared cold-start wiring without calling AWS: the owner
// falls back to the function's name outside Lambda, env: secrets are only
// readable when the configuration allows them.
func TestStartBuildsTheRuntime(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_LAMBDA_LOG_STREAM_NAME", "")
	c, err := config.LoadCommon(with(nil))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := c.Start(context.Background(), "processor", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rt.Owner, "processor/") || len(rt.Owner) != len("processor/")+8 || rt.Ledger == nil || rt.Log == nil || rt.Metrics == nil {
		t.Fatalf("runtime %+v", rt)
	}
	if rt.Secrets.Getenv != nil || rt.AWS.Region != "eu-west-1" {
		t.Fatalf("env secrets readable without ALLOW_ENV_SECRETS, or region %q", rt.AWS.Region)
	}
	t.Setenv("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/30/[$LATEST]abc")
	local, err := config.LoadCommon(with(map[string]string{"ALLOW_ENV_SECRETS": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	rt, err = local.Start(context.Background(), "intake", "intake")
	if err != nil || rt.Secrets.Getenv == nil || !strings.HasPrefix(rt.Owner, "intake/abc.") || len(rt.Owner) != len("intake/abc.")+6 {
		t.Fatalf("local runtime %+v %v", rt, err)
	}
}

// The owner is short (it is paid for in every processed event item) and
// still names the log stream's environment.
func TestOwnerNameIsShortAndNamesTheStream(t *testing.T) {
	for _, c := range []struct{ function, stream, want string }{
		{"processor", "2026/12/02/[$LATEST]0123456789abcdef0123456789abcdef", "processor/89abcdef.a8f241"},
		{"dispatcher", "2026/12/02/[17]00000000000000000000000000c0ffee", "dispatcher/00c0ffee.a8f241"},
		{"processor", "$LATEST", "processor/LATEST.a8f241"},
		{"processor", "2026/12/02/[$LATEST]", "processor/a8f2413a"},
		{"processor", "", "processor/a8f2413a"},
	} {
		if got := config.OwnerName(c.function, c.stream, "a8f2413a9b"); got != c.want {
			t.Errorf("OwnerName(%q, %q) = %q, want %q", c.function, c.stream, got, c.want)
		}
	}
}
