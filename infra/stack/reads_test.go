package stack_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/stack"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/state"
)

// ddbReads are the DynamoDB actions that read items (TransactGetItems is
// authorized as GetItem per item).
var ddbReads = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"}

// onIndex marks, in ledgerReads, a pattern granted on an index of the
// table rather than on its items.
const onIndex = "index:"

// ledgerReads lists, per DynamoDB read action a role holds, the partition
// key patterns (dynamodb:LeadingKeys) it may read: "*" where a statement
// has no condition (every item), onIndex+<index> for a statement on an
// index (whose partition key is not the table's).
func (s *synthed) ledgerReads(t testing.TB, roleID string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pol := range s.ofType("AWS::IAM::Policy") {
		attached := false
		for _, r := range props(pol)["Roles"].([]any) {
			attached = attached || ref(r) == roleID
		}
		if !attached {
			continue
		}
		for _, st := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmt := st.(map[string]any)
			var actions []string
			switch a := stmt["Action"].(type) {
			case string:
				actions = []string{a}
			case []any:
				for _, x := range a {
					actions = append(actions, x.(string))
				}
			}
			if slices.Contains(actions, "dynamodb:*") {
				t.Errorf("role %s holds dynamodb:*", roleID)
			}
			reads := slices.DeleteFunc(slices.Clone(actions), func(a string) bool { return !slices.Contains(ddbReads, a) })
			if len(reads) == 0 {
				continue
			}
			var resources []any
			switch r := stmt["Resource"].(type) {
			case []any:
				resources = r
			default:
				resources = []any{r}
			}
			cond, _ := stmt["Condition"].(map[string]any)
			var patterns []string
			if len(cond) > 0 {
				like, _ := cond["ForAllValues:StringLike"].(map[string]any)
				null, _ := cond["Null"].(map[string]any)
				switch p := like["dynamodb:LeadingKeys"].(type) {
				case string:
					patterns = []string{p}
				case []any:
					for _, x := range p {
						patterns = append(patterns, x.(string))
					}
				}
				if len(patterns) == 0 || null["dynamodb:LeadingKeys"] != "false" || len(cond) != 2 {
					t.Errorf("role %s: %v conditioned otherwise than on dynamodb:LeadingKeys: %v", roleID, reads, cond)
					continue
				}
			}
			for _, r := range resources {
				res := render(r, func(id string) string { return "{" + id + "}" })
				for _, a := range reads {
					switch _, index, ok := strings.Cut(res, "/index/"); {
					case ok:
						out[a] = append(out[a], onIndex+index)
					case len(patterns) == 0:
						out[a] = append(out[a], "*")
					default:
						out[a] = append(out[a], patterns...)
					}
				}
			}
		}
	}
	for a := range out {
		out[a] = sorted(out[a])
	}
	return out
}

// mayRead says whether reads (from ledgerReads) let action read an item
// of the table whose partition key is pk.
func mayRead(reads map[string][]string, action, pk string) bool {
	return slices.ContainsFunc(reads[action], func(p string) bool { return !strings.HasPrefix(p, onIndex) && iamLike(p, pk) })
}

// recordingDB answers pkg/state's reads from canned items and records the
// partition key of every item asked for.
type recordingDB struct {
	items map[string]map[string]types.AttributeValue // by partition key
	read  []string
}

func (r *recordingDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk := in.Key["pk"].(*types.AttributeValueMemberS).Value
	r.read = append(r.read, pk)
	return &dynamodb.GetItemOutput{Item: r.items[pk]}, nil
}

// TransactGetItems records each item it reads: IAM authorizes it as a
// GetItem of each.
func (r *recordingDB) TransactGetItems(_ context.Context, in *dynamodb.TransactGetItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	out := &dynamodb.TransactGetItemsOutput{}
	for _, it := range in.TransactItems {
		pk := it.Get.Key["pk"].(*types.AttributeValueMemberS).Value
		r.read = append(r.read, pk)
		out.Responses = append(out.Responses, types.ItemResponse{Item: r.items[pk]})
	}
	return out, nil
}

var (
	_ state.DynamoDB       = (*recordingDB)(nil)
	_ state.TransactGetter = (*recordingDB)(nil)
)

// teamGrantsStack is the default stack with one role of a team's service
// granted what the docs tell a team to grant for pkg/state:
// GrantReadState and GrantReadIntents.
func teamGrantsStack(t testing.TB) (*synthed, string) {
	t.Helper()
	variantsMu.Lock()
	defer variantsMu.Unlock()
	const name = "team grants"
	if s, ok := variants[name]; ok {
		return s, "TeamService"
	}
	ctx := cdkContext(t)
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	cfg, err := stack.FromContext(func(k string) any { return app.Node().TryGetContext(jsii.String(k)) })
	if err != nil {
		t.Fatalf("context: %v", err)
	}
	cfg.Assets = fakeAssets()
	st, err := stack.New(app, cfg, nil)
	if err != nil {
		t.Fatalf("stack: %v", err)
	}
	role := awsiam.NewRole(st.Stack, jsii.String("TeamService"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
	st.GrantReadState(role)
	st.GrantReadIntents(role)
	tpl := assertions.Template_FromStack(st.Stack, nil)
	var doc struct {
		Resources map[string]map[string]any `json:"Resources"`
	}
	b, _ := json.Marshal(tpl.ToJSON())
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s := &synthed{stack: st, template: tpl, res: doc.Resources}
	variants[name] = s
	for id := range s.ofType("AWS::IAM::Role") {
		if strings.HasPrefix(id, "TeamService") {
			return s, id
		}
	}
	t.Fatal("no TeamService role")
	return nil, ""
}

func TestTheStateReaderNeedsOnlyTheGrantsTeamsAreTold(t *testing.T) {
	// GIVEN a subject whose item names a latest intent, a watched
	// while_current intent and another intent of its revision, written by
	// an event that is still retained
	pj, err := attributevalue.MarshalMap(ledger.Projection{
		Name: "orders/order", Subject: "O-42", Version: 12, Fingerprint: "f", State: map[string]any{"status": "cancelled"},
		LastEvent: "orders/evt_1", Watch: []ledger.WatchEntry{{OperationID: "op-refund", Kind: "refund", Version: 12, Condition: map[string]string{"status": "cancelled"}}},
		Others: ledger.Operations{{ID: "op-notice", Kind: "notify_cancellation"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	latest, _ := attributevalue.Marshal(ledger.LatestIntent{OperationID: "op-sync", Kind: "order.sync", Subject: "O-42", Version: 12})
	pj["latest:order"] = latest // as the ledger writes them: one attribute per kind family
	pj["watch_n"] = &types.AttributeValueMemberN{Value: "1"}
	db := &recordingDB{items: map[string]map[string]types.AttributeValue{"PJ#orders/order#O-42": pj}}
	// WHEN a team's service reads it with every method of pkg/state
	r := state.New(db, "ledger")
	if _, err := r.Subject(context.Background(), "orders", "order", "O-42"); err != nil {
		t.Fatalf("Subject: %v", err)
	}
	if _, err := r.State(context.Background(), "orders", "order", "O-42"); err != nil {
		t.Fatalf("State: %v", err)
	}
	if _, err := r.Intent(context.Background(), "op-refund"); err == nil {
		t.Fatal("Intent of an absent item: no error")
	}
	if c, err := r.Components(context.Background(), "orders", "O-42", "order", "order_payment"); err != nil || len(c.Subjects) != 1 {
		t.Fatalf("Components: %+v %v", c, err)
	}
	if !slices.Contains(db.read, "PJ#orders/order_payment#O-42") {
		t.Errorf("Components did not read the second projection's item (read %v)", db.read)
	}
	readPrefixes := map[string]bool{}
	for _, pk := range db.read {
		p, _, _ := strings.Cut(pk, "#")
		readPrefixes[p+"#"] = true
	}
	// THEN it read each intent the subject's item names
	for _, op := range []string{"OP#op-sync", "OP#op-refund", "OP#op-notice"} {
		if !slices.Contains(db.read, op) {
			t.Errorf("the reader did not read %s (read %v)", op, db.read)
		}
	}
	// AND the grants the docs name (GrantReadState, GrantReadIntents)
	// allow each of its reads, and exactly the key prefixes it reads
	s, role := teamGrantsStack(t)
	grants := s.ledgerReads(t, role)
	for _, pk := range db.read {
		if !mayRead(grants, "dynamodb:GetItem", pk) {
			t.Errorf("pkg/state reads %s, which GrantReadState and GrantReadIntents do not allow (grants %v)", pk, grants)
		}
	}
	granted := map[string]bool{}
	for _, p := range grants["dynamodb:GetItem"] {
		granted[strings.TrimSuffix(p, "*")] = true
	}
	if g, r := keys(granted), keys(readPrefixes); !slices.Equal(g, r) {
		t.Errorf("the team's grants reach %v, pkg/state reads %v", g, r)
	}
	// AND no grant a team is told to use reaches an event, its payload
	// chunks (same partition key), a body marker or a cursor, by any read
	for _, a := range ddbReads {
		for _, pk := range []string{stripeEvent, stripeBody, cursor} {
			if mayRead(grants, a, pk) {
				t.Errorf("the team's grants allow %s on %s", a, pk)
			}
		}
		if slices.ContainsFunc(grants[a], func(p string) bool { return strings.HasPrefix(p, onIndex) }) {
			t.Errorf("the team's grants allow %s on an index: %v", a, grants[a])
		}
	}
}
