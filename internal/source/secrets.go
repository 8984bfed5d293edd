package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// ErrSecrets: a secret could not be resolved (retryable: answer 5xx).
var ErrSecrets = errors.New("source secrets unavailable")

// SecretsManager is the part of the Secrets Manager client used here.
type SecretsManager interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ SecretsManager = (*secretsmanager.Client)(nil)

// Secrets resolves and caches secret references. Safe for concurrent use.
type Secrets struct {
	SM     SecretsManager      // may be nil when only env: references are used
	Getenv func(string) string // defaults to none
	TTL    time.Duration       // default 5 minutes
	Now    func() time.Time    // default time.Now

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	values []string
	at     time.Time
}

// For returns every active secret of a source. fresh forces a reload of
// values older than a few seconds (used once after a signature failure, so a
// rotation is picked up at once rather than after the TTL).
func (s *Secrets) For(ctx context.Context, src Source, fresh bool) ([]string, error) {
	var out []string
	for _, ref := range src.Secrets {
		vals, err := s.resolve(ctx, ref, fresh)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", src.Name, err)
		}
		out = append(out, vals...)
	}
	if len(out) == 0 && len(src.Secrets) > 0 {
		return nil, fmt.Errorf("source %s: %w: every secret is empty", src.Name, ErrSecrets)
	}
	return out, nil
}

// Value returns the first value of one secret reference (cached like For).
func (s *Secrets) Value(ctx context.Context, ref string) (string, error) {
	vals, err := s.resolve(ctx, ref, false)
	if err != nil {
		return "", err
	}
	if len(vals) == 0 {
		return "", fmt.Errorf("%w: secret %s is empty", ErrSecrets, strings.TrimPrefix(ref, "sm:"))
	}
	return vals[0], nil
}

func (s *Secrets) resolve(ctx context.Context, ref string, fresh bool) ([]string, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	ttl := s.TTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	s.mu.Lock()
	c, ok := s.cache[ref]
	s.mu.Unlock()
	age := now().Sub(c.at)
	if ok && age < ttl && !(fresh && age > 5*time.Second) {
		return c.values, nil
	}
	raw, err := s.fetch(ctx, ref)
	if err != nil {
		return nil, err
	}
	vals := parseSecretValue(raw)
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string]cached{}
	}
	s.cache[ref] = cached{values: vals, at: now()}
	s.mu.Unlock()
	return vals, nil
}

func (s *Secrets) fetch(ctx context.Context, ref string) (string, error) {
	if name, ok := strings.CutPrefix(ref, "env:"); ok {
		if s.Getenv == nil {
			return "", fmt.Errorf("%w: environment references are not enabled", ErrSecrets)
		}
		v := s.Getenv(name)
		if v == "" {
			return "", fmt.Errorf("%w: environment variable %s is empty", ErrSecrets, name)
		}
		return v, nil
	}
	id := strings.TrimPrefix(ref, "sm:")
	if s.SM == nil {
		return "", fmt.Errorf("%w: no Secrets Manager client", ErrSecrets)
	}
	out, err := s.SM.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		// The error names the reference, never a value.
		return "", fmt.Errorf("%w: get %s: %v", ErrSecrets, id, err)
	}
	return aws.ToString(out.SecretString), nil
}

// parseSecretValue accepts a plain secret or a JSON array of secrets.
func parseSecretValue(raw string) []string {
	raw = strings.TrimSpace(raw)
	if strings.HasPrefix(raw, "[") {
		var list []string
		if json.Unmarshal([]byte(raw), &list) == nil {
			out := list[:0]
			for _, v := range list {
				if v = strings.TrimSpace(v); v != "" {
					out = append(out, v)
				}
			}
			return out
		}
	}
	if raw == "" {
		return nil
	}
	return []string{raw}
}
