package ledger

import (
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DeliveryRecord is one delivery the ledger remembers: when it arrived,
// and its delivery id when the provider sends one.
type DeliveryRecord struct {
	At time.Time `json:"at"`
	ID string    `json:"delivery_id,omitempty"`
}

// DeliveryHistorySlots bounds the deliveries an event remembers beyond
// the first and the last (Event.RecentDeliveries).
const DeliveryHistorySlots = 4

// historyAttr names delivery history slot i ("dh0" …): short, because
// every later write of the item pays for its bytes.
func historyAttr(i int) string { return "dh" + strconv.Itoa(i) }

// historySlot is the slot a delivery goes to: by its delivery id, or by
// its arrival time when it has none.
func historySlot(deliveryID string, at time.Time) int {
	key := deliveryID
	if key == "" {
		key = strconv.FormatInt(ms(at), 10)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % DeliveryHistorySlots)
}

// deliveryRecord encodes one slot: "<epoch ms>" or "<epoch ms> <delivery id>".
func deliveryRecord(deliveryID string, at time.Time) string {
	s := strconv.FormatInt(ms(at), 10)
	if deliveryID != "" {
		s += " " + deliveryID
	}
	return s
}

func parseDeliveryRecord(s string) (DeliveryRecord, bool) {
	at, id, _ := strings.Cut(s, " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return DeliveryRecord{}, false
	}
	return DeliveryRecord{At: fromMS(n), ID: id}, true
}

// sortDeliveries orders records newest first.
func sortDeliveries(rs []DeliveryRecord) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At.After(rs[j].At) })
}

// storedDeliveries reads the delivery history of an event item, newest
// first, leaving out slot skip (-1: none); nil when it has none.
func storedDeliveries(item map[string]types.AttributeValue, skip int) []DeliveryRecord {
	var out []DeliveryRecord
	for i := range DeliveryHistorySlots {
		if i == skip {
			continue
		}
		if v, ok := item[historyAttr(i)].(*types.AttributeValueMemberS); ok {
			if rec, ok := parseDeliveryRecord(v.Value); ok {
				out = append(out, rec)
			}
		}
	}
	sortDeliveries(out)
	return out
}

// withDelivery is the delivery history of the old item with slot set to r,
// newest first.
func withDelivery(old map[string]types.AttributeValue, slot int, r DeliveryRecord) []DeliveryRecord {
	out := append([]DeliveryRecord{r}, storedDeliveries(old, slot)...)
	sortDeliveries(out)
	return out
}
