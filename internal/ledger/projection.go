package ledger

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// Projection is the stored state of one subject.
type Projection struct {
	Name        string         `dynamodbav:"name"`
	Subject     string         `dynamodbav:"subject"`
	Version     int64          `dynamodbav:"version"`
	Fingerprint string         `dynamodbav:"fingerprint"`
	Terminal    bool           `dynamodbav:"terminal"`
	State       map[string]any `dynamodbav:"state"`
	UpdatedAt   int64          `dynamodbav:"updated_at"`
	LastEvent   string         `dynamodbav:"last_event"`
	// Latest names, per kind family of its latest intents ("entitlement"
	// for entitlement.grant/revoke), the newest intent that carries the
	// current state: what the downstream should end at. The reconciler's
	// drift check compares the downstream's version with it.
	Latest map[string]LatestIntent `dynamodbav:"-"`
	// Watch lists the while_current intents whose reason a later revision
	// could remove; the commit of every revision checks them (see Commit).
	Watch []WatchEntry `dynamodbav:"watch,omitempty"`
	// Others are the intents the revision that wrote the state created
	// which neither Latest nor Watch names (once intents, compensations,
	// while_current intents without a condition): with them, the item
	// names every intent of its revision, so a reader of the state needs
	// no event item (whose partition also holds the raw payload).
	Others Operations `dynamodbav:"ops,omitempty"`
}

// LatestIntent is the newest latest-policy intent of one kind family.
type LatestIntent struct {
	OperationID string `dynamodbav:"op"`
	Kind        string `dynamodbav:"kind"`
	Subject     string `dynamodbav:"subject"`
	Version     int64  `dynamodbav:"version"`
}

// WatchEntry is one while_current intent a projection subject watches.
type WatchEntry struct {
	OperationID  string            `dynamodbav:"op"`
	Kind         string            `dynamodbav:"kind"`
	Version      int64             `dynamodbav:"version"`
	Condition    map[string]string `dynamodbav:"cond"`
	Compensation string            `dynamodbav:"comp,omitempty"`
}

// ScopeOf is the scope that owns a projection, read from its ledger name
// "<scope>/<name>" (the form the processor writes, projection.ScopedName):
// the part before the first "/", or "" for a name without one (an
// unscoped source's projection).
// Scopes never contain "/", so the first one ends the scope.
func ScopeOf(name string) string {
	scope, _ := projection.SplitScoped(name)
	return scope
}

// Attribute names of a projection's watch list and latest intents.
const (
	attrWatch      = "watch"
	attrWatchN     = "watch_n" // the list's length; absent (or 0) means none
	attrLatestPref = "latest:" // one attribute per kind family
	attrOthers     = "ops"     // the revision's intents the others do not name
)

// decodeProjection reads a projection item, with its watch list and
// latest intents.
func decodeProjection(av map[string]types.AttributeValue) (Projection, error) {
	var p Projection
	if err := unmarshalExact(av, &p); err != nil {
		return p, fmt.Errorf("decode projection: %w", err)
	}
	if p.State != nil {
		p.State = exactNumbers(p.State).(map[string]any)
	}
	var n int
	if v, ok := av[attrWatchN]; ok {
		if err := attributevalue.Unmarshal(v, &n); err != nil {
			return p, fmt.Errorf("decode projection watch: %w", err)
		}
	}
	if n == 0 {
		p.Watch = nil
	}
	for k, v := range av {
		fam, ok := strings.CutPrefix(k, attrLatestPref)
		if !ok {
			continue
		}
		var li LatestIntent
		if err := attributevalue.Unmarshal(v, &li); err != nil {
			return p, fmt.Errorf("decode projection latest %s: %w", fam, err)
		}
		if p.Latest == nil {
			p.Latest = map[string]LatestIntent{}
		}
		p.Latest[fam] = li
	}
	return p, nil
}
