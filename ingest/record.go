package ingest

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
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

// DecodeRecord decodes a push record. Payload slices alias b. Errors wrap
// ErrBadRecord.
func DecodeRecord(b []byte) (*Record, error) {
	rd := binenc.NewReader(b)
	if k := rd.Byte(); rd.Err() == nil && k != recordKindPush {
		return nil, fmt.Errorf("%w: kind %d", ErrBadRecord, k)
	}
	r := &Record{AcceptedAt: rd.Varint()}
	n := rd.Uvarint()
	if rd.Err() != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadRecord, rd.Err())
	}
	// Every item takes at least 21 bytes; refuse counts the input cannot hold.
	if n > uint64(rd.Len()/21+1) {
		return nil, fmt.Errorf("%w: count %d too large", ErrBadRecord, n)
	}
	r.Items = make([]Item, n)
	for i := range r.Items {
		it := &r.Items[i]
		flags := rd.Byte()
		copy(it.MessageID[:], rd.Fixed(16))
		it.Queue = rd.String()
		it.Partition = rd.String()
		it.TransactionID = rd.String()
		if flags&1 != 0 {
			s := rd.String()
			it.ProducerSub = &s
		}
		it.Payload = rd.Bytes()
		if rd.Err() != nil {
			return nil, fmt.Errorf("%w: item %d: %v", ErrBadRecord, i, rd.Err())
		}
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadRecord, rd.Len())
	}
	return r, nil
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
