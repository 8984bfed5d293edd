package devstack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
)

// portConfig is a stack whose emulators take free ports, so only the
// functions' ports can clash; its build directory is empty, so a check
// that came too late would fail on a missing bootstrap instead.
func portConfig(t *testing.T) devstack.Config {
	return devstack.Config{
		Root: "../../..", BuildDir: t.TempDir(),
		DynamoAddr: "127.0.0.1:0", SQSAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DownstreamAddr: "127.0.0.1:0", StripeAddr: "127.0.0.1:0", S3Addr: "127.0.0.1:0",
	}
}

// TestFunctionPortsAreCheckedBeforeTheStackStarts starts stacks whose
// function instances' ports (DEV_RIE_BASE_PORT, and their runtime API's,
// DEV_RIE_API_BASE_PORT) run past 65535 or meet another component's port:
// each is refused at once with an error naming the variables and the
// port, before anything listens or a runtime starts.
func TestFunctionPortsAreCheckedBeforeTheStackStarts(t *testing.T) {
	cases := []struct {
		name string
		set  func(*devstack.Config)
		want []string
	}{
		{"runtime API past 65535", func(c *devstack.Config) { c.RIEPort = 64900 }, []string{"DEV_RIE_API_BASE_PORT", "65535"}},
		{"functions past 65535", func(c *devstack.Config) { c.RIEPort = 65530 }, []string{"DEV_RIE_BASE_PORT", "65535"}},
		{"runtime API on the HTTP API's port", func(c *devstack.Config) { c.RIEPort, c.HTTPAddr = 14000, "127.0.0.1:15001" },
			[]string{"DEV_RIE_API_BASE_PORT", "DEV_HTTP_ADDR", "15001"}},
		{"functions on the DynamoDB API's port", func(c *devstack.Config) { c.RIEPort, c.DynamoAddr = 14000, "127.0.0.1:14002" },
			[]string{"DEV_RIE_BASE_PORT", "DEV_DYNAMODB_ADDR", "14002"}},
		{"the two ranges overlap", func(c *devstack.Config) { c.RIEPort, c.RIEAPIPort = 14000, 14003 },
			[]string{"DEV_RIE_BASE_PORT", "DEV_RIE_API_BASE_PORT", "overlap"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := portConfig(t)
			c.set(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			logs := devstack.NewLogs(&strings.Builder{})
			s, err := devstack.Start(ctx, cfg, logs)
			if err == nil {
				s.Close()
				t.Fatal("the stack started")
			}
			if !errors.Is(err, devstack.ErrConfig) {
				t.Fatalf("not a configuration error: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not name %s: %v", w, err)
				}
			}
		})
	}
}

// TestRuntimeAPIPortsMove sets the runtime APIs' first port apart from the
// instances' own: DEV_RIE_API_BASE_PORT is read, refused past 65535, and a
// stack with ports that fit gets past the check (to its missing
// bootstraps).
func TestRuntimeAPIPortsMove(t *testing.T) {
	env := map[string]string{"DEV_RIE_BASE_PORT": "14600", "DEV_RIE_API_BASE_PORT": "14700"}
	cfg, err := devstack.FromEnv(func(k string) string { return env[k] })
	if err != nil || cfg.RIEPort != 14600 || cfg.RIEAPIPort != 14700 {
		t.Fatalf("FromEnv: base %d, runtime API %d: %v", cfg.RIEPort, cfg.RIEAPIPort, err)
	}
	for _, bad := range []string{"70000", "0", "x"} {
		if _, err := devstack.FromEnv(func(k string) string { return map[string]string{"DEV_RIE_API_BASE_PORT": bad}[k] }); !errors.Is(err, devstack.ErrConfig) ||
			!strings.Contains(err.Error(), "DEV_RIE_API_BASE_PORT") {
			t.Errorf("DEV_RIE_API_BASE_PORT=%s: %v", bad, err)
		}
	}
	c := portConfig(t)
	c.RIEPort, c.RIEAPIPort = 14600, 14700
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := devstack.Start(ctx, c, devstack.NewLogs(&strings.Builder{}))
	if err == nil {
		s.Close()
		t.Fatal("started without bootstraps")
	}
	if errors.Is(err, devstack.ErrConfig) || !strings.Contains(err.Error(), "bootstrap missing") {
		t.Fatalf("ports that fit were refused: %v", err)
	}
}
