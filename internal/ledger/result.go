package ledger

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Result is what a processed event did (the stored result). Operators read
// all of it; a duplicate delivery of the event is told only its Outcome.
//
// In DynamoDB its fields are stored under their Go names ("Outcome",
// "Projection": the stored format), and empty ones are left out: every byte of
// the event item is paid again by each later write of it. Intents is not
// stored when Operations are (it is their number).
type Result struct {
	Outcome    Outcome `json:"outcome"`
	Projection string  `json:"projection,omitempty" dynamodbav:",omitempty"`
	Subject    string  `json:"subject,omitempty" dynamodbav:",omitempty"`
	Version    int64   `json:"version,omitempty" dynamodbav:",omitempty"`
	Intents    int     `json:"intents,omitempty" dynamodbav:",omitempty"`
	// Operations are the intents this event's commit wrote: their
	// operation ids (the downstream's idempotency keys) and kinds. An
	// intent another event had already written (the same business intent)
	// is not among them. Stored as one compact string attribute (see
	// Operations.MarshalDynamoDBAttributeValue).
	Operations Operations `json:"operations,omitempty" dynamodbav:"ops,omitempty"`
	// Deduplicated are the once intents this event's commit did not write
	// because another intent of the same kind held their operation id
	// (the declared deduplication; see Deduplication).
	Deduplicated Deduplications `json:"deduplicated,omitempty" dynamodbav:"dedup,omitempty"`
}

// Operation names one intent: what the downstream sees as its
// idempotency key, and the effect kind.
type Operation struct {
	ID   string `json:"operation_id"`
	Kind string `json:"kind"`
}

// Operations are a result's intents. In DynamoDB they are one string,
// "<operation id>\t<kind>" per intent joined by "\n" (neither may contain
// a control character; Commit checks): about 50 bytes for one intent, the
// least that keeps them readable in the console, where a list of maps
// would cost about 15 bytes more per intent.
type Operations []Operation

// MarshalDynamoDBAttributeValue encodes the operations as one string.
func (o Operations) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	if len(o) == 0 {
		return &types.AttributeValueMemberNULL{Value: true}, nil
	}
	parts := make([]string, len(o))
	for i, op := range o {
		parts[i] = op.ID + "\t" + op.Kind
	}
	return &types.AttributeValueMemberS{Value: strings.Join(parts, "\n")}, nil
}

// UnmarshalDynamoDBAttributeValue decodes what MarshalDynamoDBAttributeValue wrote.
func (o *Operations) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	s, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		*o = nil
		return nil
	}
	var out Operations
	for _, line := range strings.Split(s.Value, "\n") {
		if line == "" {
			continue
		}
		id, kind, _ := strings.Cut(line, "\t")
		out = append(out, Operation{ID: id, Kind: kind})
	}
	*o = out
	return nil
}
