// Package capacity measures what DynamoDB bills for writes: write request
// units (on-demand) per request, computed from the items actually written
// by DynamoDB's documented rules, not estimated from payload sizes.
//
// Rules applied (DynamoDB Developer Guide, "Item sizes and formats" and
// "Read/write capacity mode", as of 2026-11):
//
//   - an item's size is the sum, over its attributes, of the attribute
//     name's UTF-8 length plus the value's size: strings and binary their
//     byte length, numbers (significant digits / 2) + 1 bytes (at most 21),
//     booleans and null 1 byte, lists and maps 3 bytes plus 1 byte per
//     element plus the elements' sizes, sets the sum of their elements;
//   - a standard write (PutItem, UpdateItem, DeleteItem) costs one unit per
//     1 KB, rounded up, of the larger of the item before and after the
//     write; an UpdateItem is billed on the whole item, not the change;
//   - a transactional write costs two units per 1 KB of each item;
//   - a global secondary index is written when an item gains, changes or
//     loses an index entry: one unit per 1 KB of the entry (its keys, the
//     table's keys and the projected attributes), two writes (delete and
//     put) when the index key changes, none when neither the entry's keys
//     nor its projected attributes change. Transactions do not double the
//     index writes;
//   - a standard write refused by its condition is billed too: one unit per
//     1 KB of the existing item, one when there is none ("Capacity units
//     consumed by conditional writes").
//
// A Meter is an SDK middleware: around each write it reads the affected
// items (strongly consistent, through its own unmetered client) before and
// after, and adds up the units. It counts refused writes as DynamoDB bills
// them (and in ConditionFailures); a cancelled transaction only in
// ConditionFailures, since what it bills is not documented. minidyn
// v0.8.2, which the measurements run on, ignores REMOVE actions; the meter
// applies them to the item images it bills (see Meter).
package capacity
