package localaws

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemJSON encodes an item as DynamoDB JSON, the form DynamoDB's API and
// `aws dynamodb get-item` use ({"pk":{"S":"..."},"version":{"N":"12"}}):
// golden fixtures and documentation examples are written in it. Map keys
// come out sorted, so the same item always encodes to the same bytes.
func ItemJSON(item map[string]types.AttributeValue) (map[string]any, error) {
	out := make(map[string]any, len(item))
	for k, v := range item {
		j, err := valueJSON(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = j
	}
	return out, nil
}

func valueJSON(v types.AttributeValue) (map[string]any, error) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": x.Value}, nil
	case *types.AttributeValueMemberN:
		return map[string]any{"N": x.Value}, nil
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(x.Value)}, nil
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": x.Value}, nil
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": true}, nil
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": sorted(x.Value)}, nil
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": sorted(x.Value)}, nil
	case *types.AttributeValueMemberBS:
		bs := make([]string, len(x.Value))
		for i, b := range x.Value {
			bs[i] = base64.StdEncoding.EncodeToString(b)
		}
		return map[string]any{"BS": sorted(bs)}, nil
	case *types.AttributeValueMemberM:
		m, err := ItemJSON(x.Value)
		if err != nil {
			return nil, err
		}
		return map[string]any{"M": m}, nil
	case *types.AttributeValueMemberL:
		l := make([]any, len(x.Value))
		for i, e := range x.Value {
			j, err := valueJSON(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = j
		}
		return map[string]any{"L": l}, nil
	}
	return nil, fmt.Errorf("unsupported attribute value %T", v)
}

// sorted returns a sorted copy: a set has no order, and a fixture must
// not change with the order an emulator returned it in.
func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// ParseItemJSON decodes one item written by ItemJSON (or by DynamoDB).
func ParseItemJSON(raw json.RawMessage) (map[string]types.AttributeValue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		av, err := parseValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = av
	}
	return out, nil
}

func parseValue(raw json.RawMessage) (types.AttributeValue, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if len(v) != 1 {
		return nil, fmt.Errorf("want one type key, have %d", len(v))
	}
	for typ, body := range v {
		switch typ {
		case "S", "N":
			var s string
			if err := json.Unmarshal(body, &s); err != nil {
				return nil, err
			}
			if typ == "S" {
				return &types.AttributeValueMemberS{Value: s}, nil
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "B":
			var s string
			if err := json.Unmarshal(body, &s); err != nil {
				return nil, err
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberB{Value: b}, nil
		case "BOOL":
			var b bool
			if err := json.Unmarshal(body, &b); err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberBOOL{Value: b}, nil
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "SS", "NS", "BS":
			var ss []string
			if err := json.Unmarshal(body, &ss); err != nil {
				return nil, err
			}
			switch typ {
			case "SS":
				return &types.AttributeValueMemberSS{Value: ss}, nil
			case "NS":
				return &types.AttributeValueMemberNS{Value: ss}, nil
			}
			bs := make([][]byte, len(ss))
			for i, s := range ss {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, err
				}
				bs[i] = b
			}
			return &types.AttributeValueMemberBS{Value: bs}, nil
		case "M":
			m, err := ParseItemJSON(body)
			if err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberM{Value: m}, nil
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(body, &l); err != nil {
				return nil, err
			}
			out := make([]types.AttributeValue, len(l))
			for i, e := range l {
				av, err := parseValue(e)
				if err != nil {
					return nil, fmt.Errorf("[%d]: %w", i, err)
				}
				out[i] = av
			}
			return &types.AttributeValueMemberL{Value: out}, nil
		}
		return nil, fmt.Errorf("unknown type %q", typ)
	}
	return nil, nil // unreachable: v has one key
}
