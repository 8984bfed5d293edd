//lint:file-ignore SA1019 a global endpoint resolver set in code is one of the overrides this file proves ignored

package operator_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/operator"
)

// hostRecorder is an HTTP client that records the host of every request
// and lets none leave the machine: a request to one of the pass hosts
// (servers the test runs) goes through, a request to route's key goes to
// its value instead (a test server standing in for an AWS endpoint), and
// any other is answered 403 here.
type hostRecorder struct {
	mu    sync.Mutex
	hosts []string
	pass  map[string]bool
	route map[string]*url.URL
}

func (h *hostRecorder) Do(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.hosts = append(h.hosts, r.URL.Host)
	h.mu.Unlock()
	if to := h.route[r.URL.Host]; to != nil {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = to.Scheme, to.Host, ""
		return http.DefaultTransport.RoundTrip(r)
	}
	if h.pass[r.URL.Host] {
		return http.DefaultTransport.RoundTrip(r)
	}
	return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("the test's HTTP client sends nothing to " + r.URL.Host)), Request: r}, nil
}

func (h *hostRecorder) asked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

// awsEnv points the AWS configuration chain at nothing but the test's:
// fake static credentials, no profile files (unless the case writes
// one), no instance metadata, no endpoint variables, no CA bundle (the
// SDK cannot add one to a client it did not build).
func awsEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	base := map[string]string{
		"AWS_ACCESS_KEY_ID": localaws.FakeAccessKey, "AWS_SECRET_ACCESS_KEY": localaws.FakeSecretKey, "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "",
		"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_STS": "", "AWS_ENDPOINT_URL_DYNAMODB": "", "AWS_ENDPOINT_URL_SQS": "", "AWS_ENDPOINT_URL_S3": "",
		"AWS_USE_FIPS_ENDPOINT": "", "AWS_USE_DUALSTACK_ENDPOINT": "", "AWS_CA_BUNDLE": "",
	}
	for k, v := range vars {
		base[k] = v
	}
	for k, v := range base {
		t.Setenv(k, v)
	}
	for k, v := range base {
		if v == "" {
			// An empty AWS_ENDPOINT_URL is not an unset one to the SDK,
			// which looks some of them up by presence.
			os.Unsetenv(k)
		}
	}
}

// The audit's identity is STS's answer for the credentials that sign the
// writes, so webhookctl asks the STS of the configured region and no
// other: every way the AWS configuration can name an endpoint for STS (the
// STS variable, the generic one, a profile's endpoint_url, a profile's
// services section) is ignored for that question. A server standing in
// for the override would answer with any ARN its owner likes; it is never
// asked, and the only host asked is sts.<region>.amazonaws.com (answered
// here by the test's HTTP client: no request leaves the machine).
func TestTheAuditIdentityIgnoresAnEndpointOverride(t *testing.T) {
	forgedURL, forgedCalls := fakeSTSServer(t, "arn:aws:iam::123456789012:user/someone-else")
	forged, err := url.Parse(forgedURL)
	if err != nil {
		t.Fatal(err)
	}
	profile := func(body string) string {
		p := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	resolver := aws.EndpointResolverWithOptionsFunc(func(service, region string, _ ...any) (aws.Endpoint, error) {
		return aws.Endpoint{URL: forgedURL}, nil
	})
	for _, c := range []struct {
		name string
		env  map[string]string
		opts []func(*awsconfig.LoadOptions) error // set in code, not by the operator: for completeness
	}{
		{"AWS_ENDPOINT_URL_STS", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_STS": forgedURL}, nil},
		{"AWS_ENDPOINT_URL", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": forgedURL}, nil},
		{"both variables", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": forgedURL, "AWS_ENDPOINT_URL_STS": forgedURL}, nil},
		{"a profile's endpoint_url", map[string]string{"AWS_CONFIG_FILE": profile("[default]\nregion = eu-west-1\nendpoint_url = " + forgedURL + "\n")}, nil},
		{"a profile's services section", map[string]string{"AWS_CONFIG_FILE": profile(
			"[default]\nregion = eu-west-1\nservices = forged\n\n[services forged]\nsts =\n  endpoint_url = " + forgedURL + "\n")}, nil},
		{"a base endpoint in code", map[string]string{"AWS_REGION": "eu-west-1"}, []func(*awsconfig.LoadOptions) error{awsconfig.WithBaseEndpoint(forgedURL)}},
		{"a resolver in code", map[string]string{"AWS_REGION": "eu-west-1"}, []func(*awsconfig.LoadOptions) error{awsconfig.WithEndpointResolverWithOptions(resolver)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			awsEnv(t, c.env)
			before := len(forgedCalls())
			rec := &hostRecorder{pass: map[string]bool{forged.Host: true}}
			var out, errOut bytes.Buffer
			env := operator.Env{Getenv: os.Getenv, Hostname: func() (string, error) { return "ops-box", nil }, Stdout: &out, Stderr: &errOut,
				Connect: operator.ConnectWith(append(c.opts, awsconfig.WithHTTPClient(rec))...)}
			// WHEN an operator writes (a hold: it asks STS first)
			code := operator.Run(context.Background(), []string{"--table", "ledger", "--actor", "alice", "quarantine", "stripe", "evt_1", "--reason", "x"}, env)
			// THEN the forged server was never asked, the region's STS was,
			// and since it could not answer here, nothing was written
			if n := len(forgedCalls()) - before; n != 0 {
				t.Fatalf("the override was asked who the caller is %d times (exit %d, %s)", n, code, errOut.String())
			}
			asked := rec.asked()
			if len(asked) == 0 {
				t.Fatalf("no request (exit %d, %s)", code, errOut.String())
			}
			for _, h := range asked {
				if h != "sts.eu-west-1.amazonaws.com" {
					t.Fatalf("asked %v, want only sts.eu-west-1.amazonaws.com", asked)
				}
			}
			if code != 1 || !strings.HasPrefix(errOut.String(), "webhookctl: unverified caller: sts:GetCallerIdentity: ") {
				t.Fatalf("exit %d, stderr %q", code, errOut.String())
			}
		})
	}
}

// The region names the STS host too (sts.<region>.amazonaws.com): one
// that is not a region's name is refused before anything is asked.
func TestARegionThatNamesAnotherHostIsRefused(t *testing.T) {
	for _, region := range []string{"attacker.example", "s3", "eu-west-1.example"} {
		awsEnv(t, map[string]string{"AWS_REGION": region})
		rec := &hostRecorder{}
		var out, errOut bytes.Buffer
		env := operator.Env{Getenv: os.Getenv, Hostname: func() (string, error) { return "ops-box", nil }, Stdout: &out, Stderr: &errOut,
			Connect: operator.ConnectWith(awsconfig.WithHTTPClient(rec))}
		code := operator.Run(context.Background(), []string{"--table", "ledger", "quarantine", "stripe", "evt_1", "--reason", "x"}, env)
		if code != 2 || errOut.String() != "webhookctl: configuration: AWS region \""+region+"\" is not a region name like eu-west-1\n" || len(rec.asked()) != 0 {
			t.Fatalf("region %q: exit %d, stderr %q, asked %v", region, code, errOut.String(), rec.asked())
		}
	}
}
