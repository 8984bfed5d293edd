package capacity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// WireMeter bills DynamoDB write units on the wire: an http.Handler
// middleware in front of a DynamoDB endpoint (devstack.Config.DynamoWrap)
// that sees every function's requests as DynamoDB would, whatever process
// made them, decodes the writes from their JSON, and bills each one with
// Meter's rules (the items read before and after it). Writes are
// serialized through it, so the reads around one write see only that
// write; reads pass through untouched.
//
// It is the meter of the running local stack (the real bootstraps under
// aws-lambda-rie, named as in AWS): the in-process rigs' figures must be
// what it measures there.
type WireMeter struct {
	// Meter bills; its Reader must reach the same emulator (reads pass
	// through the wrap without waiting).
	Meter *Meter

	mu  sync.Mutex
	log []WireWrite
}

// WireWrite is one billed write request.
type WireWrite struct {
	// Function is the caller's "app/<id>" from its User-Agent (the local
	// stack sets AWS_SDK_UA_APP_ID to the function's name), "" if none.
	Function string
	Op       string   // PutItem, UpdateItem, DeleteItem, TransactWriteItems
	Keys     []string // each written item's partition key
	OpTotals
}

// Units is the write's table and index units.
func (w WireWrite) Units() int { return w.TableUnits + w.IndexUnits }

// SetMeter starts billing with m (writes before it pass unbilled).
func (w *WireMeter) SetMeter(m *Meter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Meter = m
}

// Writes returns the writes billed so far and forgets them.
func (w *WireMeter) Writes() []WireWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.log
	w.log = nil
	return out
}

// Wrap returns next with the meter in front of it.
func (w *WireMeter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		if !ok || !wireWriteOps[op] {
			next.ServeHTTP(rw, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, "wire meter: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.mu.Lock()
		defer w.mu.Unlock()
		ws, table, err := wireWrites(op, body)
		if w.Meter == nil || err != nil || table != w.Meter.Table {
			// Not ours to bill (no meter yet, another table, or a body
			// DynamoDB would refuse): the emulator answers it as it would.
			next.ServeHTTP(rw, r)
			return
		}
		rec := httptest.NewRecorder()
		o := w.Meter.around(r.Context(), op, ws, func() outcome {
			next.ServeHTTP(rec, r)
			return wireOutcome(rec.Code, rec.Body.Bytes())
		})
		for k, v := range rec.Header() {
			rw.Header()[k] = v
		}
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(rec.Body.Bytes())
		keys := make([]string, 0, len(ws))
		for _, x := range ws {
			if pk, ok := x.key["pk"].(*types.AttributeValueMemberS); ok {
				keys = append(keys, pk.Value)
			}
		}
		w.log = append(w.log, WireWrite{Function: uaApp(r.Header.Get("User-Agent")), Op: op, Keys: keys, OpTotals: o})
	})
}

var wireWriteOps = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true}

// uaApp is the "app/<id>" part of an AWS SDK User-Agent.
func uaApp(ua string) string {
	for _, f := range strings.Fields(ua) {
		if id, ok := strings.CutPrefix(f, "app/"); ok {
			return id
		}
	}
	return ""
}

// wireOutcome reads a DynamoDB JSON answer: 200, or an error whose
// __type names the exception.
func wireOutcome(code int, body []byte) outcome {
	if code == http.StatusOK {
		return done
	}
	var e struct {
		Type string `json:"__type"`
	}
	_ = json.Unmarshal(body, &e)
	switch {
	case strings.HasSuffix(e.Type, "ConditionalCheckFailedException"):
		return refused
	case strings.HasSuffix(e.Type, "TransactionCanceledException"):
		return cancelled
	}
	return failed
}

type wireItem map[string]json.RawMessage

type wireKeyed struct {
	TableName                string
	Key, Item                wireItem
	UpdateExpression         *string
	ExpressionAttributeNames map[string]string
}

// wireWrites decodes a write request's body into the meter's writes and
// the table they go to.
func wireWrites(op string, body []byte) ([]write, string, error) {
	switch op {
	case "TransactWriteItems":
		var in struct {
			TransactItems []struct{ Put, Update, Delete, ConditionCheck *wireKeyed }
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, "", err
		}
		sdk := &dynamodb.TransactWriteItemsInput{}
		table := ""
		for _, it := range in.TransactItems {
			var t types.TransactWriteItem
			var err error
			switch {
			case it.Put != nil:
				table = it.Put.TableName
				t.Put = &types.Put{}
				t.Put.Item, err = it.Put.Item.decode()
			case it.Update != nil:
				table = it.Update.TableName
				t.Update = &types.Update{UpdateExpression: it.Update.UpdateExpression, ExpressionAttributeNames: it.Update.ExpressionAttributeNames}
				t.Update.Key, err = it.Update.Key.decode()
			case it.Delete != nil:
				table = it.Delete.TableName
				t.Delete = &types.Delete{}
				t.Delete.Key, err = it.Delete.Key.decode()
			default:
				continue // a condition check writes nothing
			}
			if err != nil {
				return nil, "", err
			}
			sdk.TransactItems = append(sdk.TransactItems, t)
		}
		return writesOf(sdk), table, nil
	}
	var in wireKeyed
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "", err
	}
	var params any
	switch op {
	case "PutItem":
		item, err := in.Item.decode()
		if err != nil {
			return nil, "", err
		}
		params = &dynamodb.PutItemInput{Item: item}
	case "UpdateItem":
		key, err := in.Key.decode()
		if err != nil {
			return nil, "", err
		}
		params = &dynamodb.UpdateItemInput{Key: key, UpdateExpression: in.UpdateExpression, ExpressionAttributeNames: in.ExpressionAttributeNames}
	case "DeleteItem":
		key, err := in.Key.decode()
		if err != nil {
			return nil, "", err
		}
		params = &dynamodb.DeleteItemInput{Key: key}
	}
	return writesOf(params), in.TableName, nil
}

func (it wireItem) decode() (map[string]types.AttributeValue, error) {
	out := make(map[string]types.AttributeValue, len(it))
	for k, raw := range it {
		v, err := wireValue(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// wireValue decodes one attribute value of DynamoDB's JSON protocol
// ({"S":"…"}, {"N":"…"}, {"B":"<base64>"}, {"M":{…}}, {"L":[…]}, …).
func wireValue(raw json.RawMessage) (types.AttributeValue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("attribute value with %d types", len(m))
	}
	for typ, v := range m {
		switch typ {
		case "S":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberS{Value: s}, err
		case "N":
			var s string
			err := json.Unmarshal(v, &s)
			return &types.AttributeValueMemberN{Value: s}, err
		case "B":
			var b []byte
			err := json.Unmarshal(v, &b)
			return &types.AttributeValueMemberB{Value: b}, err
		case "BOOL":
			var b bool
			err := json.Unmarshal(v, &b)
			return &types.AttributeValueMemberBOOL{Value: b}, err
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "SS", "NS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return nil, err
			}
			if typ == "SS" {
				return &types.AttributeValueMemberSS{Value: ss}, nil
			}
			return &types.AttributeValueMemberNS{Value: ss}, nil
		case "BS":
			var bs [][]byte
			err := json.Unmarshal(v, &bs)
			return &types.AttributeValueMemberBS{Value: bs}, err
		case "L":
			var raws []json.RawMessage
			if err := json.Unmarshal(v, &raws); err != nil {
				return nil, err
			}
			l := make([]types.AttributeValue, 0, len(raws))
			for _, r := range raws {
				e, err := wireValue(r)
				if err != nil {
					return nil, err
				}
				l = append(l, e)
			}
			return &types.AttributeValueMemberL{Value: l}, nil
		case "M":
			var it wireItem
			if err := json.Unmarshal(v, &it); err != nil {
				return nil, err
			}
			mm, err := it.decode()
			return &types.AttributeValueMemberM{Value: mm}, err
		}
		return nil, fmt.Errorf("unknown attribute type %q", typ)
	}
	return nil, nil
}

// Sum adds writes up per function ("" for callers without an app id),
// with their detail by operation.
func Sum(ws []WireWrite) map[string]Totals {
	out := map[string]Totals{}
	for _, w := range ws {
		t := out[w.Function]
		t.add(w.Op, w.OpTotals)
		out[w.Function] = t
	}
	return out
}

// functionsOf lists the functions in sums, sorted.
func functionsOf(sums map[string]Totals) []string {
	fs := make([]string, 0, len(sums))
	for f := range sums {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	return fs
}
