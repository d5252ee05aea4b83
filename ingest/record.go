package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
	"github.com/queenmq/queen-go/pg"
)

const recordKindPush = 1

// ErrBadRecord is returned by DecodeRecord for a payload that is not a push
// record this build can read (unknown kind, truncated, trailing bytes).
var ErrBadRecord = errors.New("ingest: bad push record")

// Item is one validated push item as it travels through the WAL.
type Item struct {
	Queue         string
	Partition     string
	TransactionID string
	MessageID     uuid.UUID
	// ProducerSub is the validated JWT sub of the pusher; nil without auth.
	ProducerSub *string
	// Payload is the item's JSON value, byte-for-byte as sent.
	Payload []byte
	// TraceID is set only for items of POST /api/v1/transaction, which go
	// to PostgreSQL directly; the push record has no field for it (a plain
	// push never reads traceId) and EncodeRecord does not write it.
	TraceID *uuid.UUID
}

// NewItems mints the items of one push or transaction from its parsed
// items: a UUIDv7 message id each, the transactionId (the minted id's text
// when the body gave none, as the push route's contract says) and
// producerSub (the validated JWT sub, or nil). It is the one place a push
// item is built. Payloads keep aliasing the parsed body. The error is
// uuid's (no randomness).
func NewItems(parsed []ParsedItem, producerSub *string) ([]Item, error) {
	items := make([]Item, len(parsed))
	for i := range parsed {
		p := &parsed[i]
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		txid := p.TransactionID
		if txid == "" {
			txid = id.String()
		}
		items[i] = Item{Queue: p.Queue, Partition: p.Partition, TransactionID: txid, MessageID: id,
			ProducerSub: producerSub, Payload: p.Payload, TraceID: p.TraceID}
	}
	return items, nil
}

// AppendProjectItems appends the items of r as pg.Store stores them (the
// projector's batches and the transaction route both go through here):
// the acceptance time is each message's createdAt and the start of its
// dedup window. Strings and payloads alias r's.
func (r *Record) AppendProjectItems(dst []pg.ProjectItem) []pg.ProjectItem {
	for i := range r.Items {
		it := &r.Items[i]
		dst = append(dst, pg.ProjectItem{Queue: it.Queue, Partition: it.Partition, AcceptedAtMicros: r.AcceptedAt,
			Message: pg.Message{ID: it.MessageID, TransactionID: it.TransactionID, CreatedAtMicros: r.AcceptedAt,
				ProducerSub: it.ProducerSub, TraceID: it.TraceID, Payload: it.Payload}})
	}
	return dst
}

// EncodedLen is the length of r's push record, what EncodeRecord appends.
func (r *Record) EncodedLen() int {
	n := 1 + varintLen(r.AcceptedAt) + uvarintLen(uint64(len(r.Items)))
	for i := range r.Items {
		it := &r.Items[i]
		n += 1 + 16 + strLen(len(it.Queue)) + strLen(len(it.Partition)) + strLen(len(it.TransactionID)) + strLen(len(it.Payload))
		if it.ProducerSub != nil {
			n += strLen(len(*it.ProducerSub))
		}
	}
	return n
}

func strLen(n int) int { return uvarintLen(uint64(n)) + n }

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

func varintLen(x int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], x)
}

// Record is one push: the items of one request and their acceptance time.
type Record struct {
	// AcceptedAt is the broker's acceptance time in Unix microseconds.
	AcceptedAt int64
	Items      []Item
}

// EncodeRecord appends the binary push record for r to dst.
func EncodeRecord(dst []byte, r *Record) []byte {
	dst = append(dst, recordKindPush)
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	dst = binenc.AppendUvarint(dst, uint64(len(r.Items)))
	for i := range r.Items {
		it := &r.Items[i]
		var flags byte
		if it.ProducerSub != nil {
			flags |= 1
		}
		dst = append(dst, flags)
		dst = append(dst, it.MessageID[:]...)
		dst = binenc.AppendString(dst, it.Queue)
		dst = binenc.AppendString(dst, it.Partition)
		dst = binenc.AppendString(dst, it.TransactionID)
		if it.ProducerSub != nil {
			dst = binenc.AppendString(dst, *it.ProducerSub)
		}
		dst = binenc.AppendBytes(dst, it.Payload)
	}
	return dst
}

// ItemCount reads the item count from the header of the push record b
// without decoding the items (0 when the header does not decode: the
// decode itself then reports the error). The projector sizes its batch
// with it.
func ItemCount(b []byte) int {
	rd := binenc.NewReader(b)
	if rd.Byte() != recordKindPush {
		return 0
	}
	rd.Varint()
	n := rd.Uvarint()
	if rd.Err() != nil || n > uint64(rd.Len()/21+1) {
		return 0
	}
	return int(n)
}

// DecodeRecord decodes a push record. Payload slices alias b. Errors wrap
// ErrBadRecord.
func DecodeRecord(b []byte) (*Record, error) {
	r := &Record{}
	if err := DecodeRecordInto(r, b); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeRecordInto decodes a push record into r, reusing the capacity of
// r.Items (the projector decodes every record of a batch into one
// Record). Payload slices alias b. The allocations are per record, not per
// item: a queue, partition or producerSub repeated across items is one
// string, and the transactionIds of all items are substrings of one.
// Errors wrap ErrBadRecord; r is then unspecified.
func DecodeRecordInto(r *Record, b []byte) error {
	rd := binenc.NewReader(b)
	if k := rd.Byte(); rd.Err() == nil && k != recordKindPush {
		return fmt.Errorf("%w: kind %d", ErrBadRecord, k)
	}
	r.AcceptedAt = rd.Varint()
	n := rd.Uvarint()
	if rd.Err() != nil {
		return fmt.Errorf("%w: header: %v", ErrBadRecord, rd.Err())
	}
	// Every item takes at least 21 bytes; refuse counts the input cannot hold.
	if n > uint64(rd.Len()/21+1) {
		return fmt.Errorf("%w: count %d too large", ErrBadRecord, n)
	}
	if uint64(cap(r.Items)) >= n {
		r.Items = r.Items[:n]
		clear(r.Items)
	} else {
		r.Items = make([]Item, n)
	}
	names := make([]string, 0, maxInterned) // queue/partition names seen
	var subs *string
	txids := make([]byte, 0, 40*n)
	txEnd := make([]int, n) // end of items[i]'s transactionId in txids
	for i := range r.Items {
		it := &r.Items[i]
		flags := rd.Byte()
		copy(it.MessageID[:], rd.Fixed(16))
		it.Queue, names = intern(names, rd.Bytes())
		it.Partition, names = intern(names, rd.Bytes())
		txids = append(txids, rd.Bytes()...)
		txEnd[i] = len(txids)
		if flags&1 != 0 {
			sub := rd.Bytes()
			if subs == nil || *subs != string(sub) {
				s := string(sub)
				subs = &s
			}
			it.ProducerSub = subs
		}
		it.Payload = rd.Bytes()
		if rd.Err() != nil {
			return fmt.Errorf("%w: item %d: %v", ErrBadRecord, i, rd.Err())
		}
	}
	if rd.Len() != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadRecord, rd.Len())
	}
	all, start := string(txids), 0
	for i := range r.Items {
		r.Items[i].TransactionID = all[start:txEnd[i]]
		start = txEnd[i]
	}
	return nil
}

// intern returns b as a string, reusing an equal one of names, and names
// with the new string added while it holds fewer than maxInterned: names
// repeated across items share one string.
func intern(names []string, b []byte) (string, []string) {
	for _, n := range names {
		if n == string(b) {
			return n, names
		}
	}
	s := string(b)
	if len(names) < maxInterned {
		names = append(names, s)
	}
	return s, names
}

// RecordHeader reads only the header of a push record: its acceptance time
// (Unix microseconds) and how many items it holds, without decoding the
// items. Errors wrap ErrBadRecord.
func RecordHeader(b []byte) (acceptedAt int64, items int, err error) {
	rd := binenc.NewReader(b)
	if k := rd.Byte(); rd.Err() == nil && k != recordKindPush {
		return 0, 0, fmt.Errorf("%w: kind %d", ErrBadRecord, k)
	}
	acceptedAt = rd.Varint()
	n := rd.Uvarint()
	if rd.Err() != nil {
		return 0, 0, fmt.Errorf("%w: header: %v", ErrBadRecord, rd.Err())
	}
	if n > uint64(rd.Len()/21+1) {
		return 0, 0, fmt.Errorf("%w: count %d too large", ErrBadRecord, n)
	}
	return acceptedAt, int(n), nil
}
