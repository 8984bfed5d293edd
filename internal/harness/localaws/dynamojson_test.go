package localaws_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// Every attribute type survives DynamoDB JSON and back; sets come out
// sorted, and the text is DynamoDB's own form.
func TestItemJSONRoundTrip(t *testing.T) {
	item := map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "a\tb"},
		"n":    &types.AttributeValueMemberN{Value: "1152921504606846976"},
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 0xff}},
		"bool": &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"b", "a"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"2", "1"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{2}, {1}}},
		"m":    &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": &types.AttributeValueMemberN{Value: "7"}}},
		"l":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "y"}, &types.AttributeValueMemberNULL{Value: true}}},
	}
	j, err := localaws.ItemJSON(item)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(j)
	want := `{"b":{"B":"AAH/"},"bool":{"BOOL":true},"bs":{"BS":["AQ==","Ag=="]},"l":{"L":[{"S":"y"},{"NULL":true}]},"m":{"M":{"x":{"N":"7"}}},` +
		`"n":{"N":"1152921504606846976"},"ns":{"NS":["1","2"]},"null":{"NULL":true},"s":{"S":"a\tb"},"ss":{"SS":["a","b"]}}`
	if string(raw) != want {
		t.Fatalf("%s\nwant\n%s", raw, want)
	}
	back, err := localaws.ParseItemJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := localaws.ItemJSON(back)
	if !reflect.DeepEqual(again, j) {
		t.Fatalf("round trip: %v, want %v", again, j)
	}
	for _, bad := range []string{`{"a":{}}`, `{"a":{"S":"x","N":"1"}}`, `{"a":{"X":"1"}}`, `{"a":{"B":"!"}}`} {
		if _, err := localaws.ParseItemJSON(json.RawMessage(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}
