package ledger

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// update is the expressions of one write to one item: its SET, REMOVE and
// ADD clauses, its condition, and the attribute names and values they
// refer to. Every write builds its own, so a placeholder (":now",
// "#status") means one thing within one request and nothing outside it.
//
// Clauses are DynamoDB's expression text, written as they are sent
// ("#status = if_not_exists(#status, :status)"); Name and Value define the
// placeholders they use. Conditions are joined with AND, so one that
// holds an OR comes in parentheses.
type update struct {
	set, remove, add []string
	conds            []string
	names            map[string]string
	vals             map[string]types.AttributeValue
	redefined        []string // placeholders given two different values (check reports them)
}

// Set adds SET clauses ("path = value").
func (u *update) Set(clauses ...string) *update { u.set = append(u.set, clauses...); return u }

// Remove adds attributes to REMOVE.
func (u *update) Remove(attrs ...string) *update { u.remove = append(u.remove, attrs...); return u }

// Add adds ADD clauses ("path value").
func (u *update) Add(clauses ...string) *update { u.add = append(u.add, clauses...); return u }

// If adds conditions; the write happens only when all of them hold.
func (u *update) If(conds ...string) *update { u.conds = append(u.conds, conds...); return u }

// Name defines the name placeholder ph ("#status") as attribute attr.
func (u *update) Name(ph, attr string) *update {
	if u.names == nil {
		u.names = map[string]string{}
	}
	u.names[ph] = attr
	return u
}

// Value defines the value placeholder ph (":now") as v.
func (u *update) Value(ph string, v types.AttributeValue) *update {
	if u.vals == nil {
		u.vals = map[string]types.AttributeValue{}
	}
	if old, ok := u.vals[ph]; ok && !reflect.DeepEqual(old, v) {
		u.redefined = append(u.redefined, ph)
	}
	u.vals[ph] = v
	return u
}

// Values defines several value placeholders.
func (u *update) Values(vals map[string]types.AttributeValue) *update {
	for _, ph := range sortedKeys(vals) {
		u.Value(ph, vals[ph])
	}
	return u
}

// expression is the update expression: "SET … REMOVE … ADD …".
func (u *update) expression() string {
	var parts []string
	for _, c := range []struct {
		verb    string
		clauses []string
	}{{"SET", u.set}, {"REMOVE", u.remove}, {"ADD", u.add}} {
		if len(c.clauses) > 0 {
			parts = append(parts, c.verb+" "+join(c.clauses))
		}
	}
	return strings.Join(parts, " ")
}

// condition is the condition expression, nil when there is none.
func (u *update) condition() *string {
	if len(u.conds) == 0 {
		return nil
	}
	return aws.String(strings.Join(u.conds, " AND "))
}

// attrNames and attrValues are nil when empty: DynamoDB refuses an empty
// map for either.
func (u *update) attrNames() map[string]string {
	if len(u.names) == 0 {
		return nil
	}
	return u.names
}

func (u *update) attrValues() map[string]types.AttributeValue {
	if len(u.vals) == 0 {
		return nil
	}
	return u.vals
}

// input is the write as an UpdateItem request of the item at key.
func (u *update) input(table string, key map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	t := u.txUpdate(table, key)
	return &dynamodb.UpdateItemInput{
		TableName: t.TableName, Key: t.Key, UpdateExpression: t.UpdateExpression, ConditionExpression: t.ConditionExpression,
		ExpressionAttributeNames: t.ExpressionAttributeNames, ExpressionAttributeValues: t.ExpressionAttributeValues,
	}
}

// txUpdate is the write as a transaction's Update of the item at key.
func (u *update) txUpdate(table string, key map[string]types.AttributeValue) *types.Update {
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       key,
		UpdateExpression:          aws.String(u.expression()),
		ConditionExpression:       u.condition(),
		ExpressionAttributeNames:  u.attrNames(),
		ExpressionAttributeValues: u.attrValues(),
	}
}

// txPut is a transaction's Put of item under u's condition (a Put has no
// update clauses).
func (u *update) txPut(table string, item map[string]types.AttributeValue) *types.Put {
	return &types.Put{
		TableName:                 aws.String(table),
		Item:                      item,
		ConditionExpression:       u.condition(),
		ExpressionAttributeNames:  u.attrNames(),
		ExpressionAttributeValues: u.attrValues(),
	}
}

var placeholder = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// check reports what DynamoDB would refuse in u's placeholders: one used
// in an expression but not defined, one defined but never used (DynamoDB
// refuses unused names and values too), or one defined twice with
// different values. The tests check every plan they build with it.
func (u *update) check() error {
	used := map[string]bool{}
	for _, text := range append(append(append(append([]string(nil), u.set...), u.remove...), u.add...), u.conds...) {
		for _, ph := range placeholder.FindAllString(text, -1) {
			used[ph] = true
		}
	}
	var problems []string
	for ph := range used {
		_, isName := u.names[ph]
		_, isValue := u.vals[ph]
		if !isName && !isValue {
			problems = append(problems, ph+" is not defined")
		}
	}
	for ph := range u.names {
		if !used[ph] {
			problems = append(problems, ph+" is defined but not used")
		}
	}
	for ph := range u.vals {
		if !used[ph] {
			problems = append(problems, ph+" is defined but not used")
		}
	}
	for _, ph := range u.redefined {
		problems = append(problems, ph+" is defined twice with different values")
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("expression placeholders: %s", strings.Join(problems, "; "))
}
