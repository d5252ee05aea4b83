package ingest

import (
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
)

// Record kinds (the first byte of a push record, see doc.go).
const (
	// recordKindPush is the first layout: every item spells out its
	// partition and transaction id. Still read; no longer written.
	recordKindPush = 1
	// recordKindPushCompact is written since: flags say when the partition
	// is DefaultPartition and when the transaction id is the message id's
	// text (the id the broker minted), which are then left out, so that a
	// record is never much larger than the push body it came from.
	recordKindPushCompact = 2
)

// Item flags.
const (
	flagProducerSub   = 1 << 0 // producer_sub follows
	flagDefaultPart   = 1 << 1 // kind 2: partition is DefaultPartition, not written
	flagMintedTxID    = 1 << 2 // kind 2: transaction_id is message_id's text, not written
	knownCompactFlags = flagProducerSub | flagDefaultPart | flagMintedTxID
)

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

// EncodeRecord appends the binary push record for r to dst (kind 2, see
// doc.go).
func EncodeRecord(dst []byte, r *Record) []byte {
	dst = append(dst, recordKindPushCompact)
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	dst = binenc.AppendUvarint(dst, uint64(len(r.Items)))
	var idText [36]byte
	for i := range r.Items {
		it := &r.Items[i]
		var flags byte
		if it.ProducerSub != nil {
			flags |= flagProducerSub
		}
		if it.Partition == DefaultPartition {
			flags |= flagDefaultPart
		}
		if len(it.TransactionID) == len(idText) {
			encodeUUID(idText[:], it.MessageID)
			if string(idText[:]) == it.TransactionID {
				flags |= flagMintedTxID
			}
		}
		dst = append(dst, flags)
		dst = append(dst, it.MessageID[:]...)
		dst = binenc.AppendString(dst, it.Queue)
		if flags&flagDefaultPart == 0 {
			dst = binenc.AppendString(dst, it.Partition)
		}
		if flags&flagMintedTxID == 0 {
			dst = binenc.AppendString(dst, it.TransactionID)
		}
		if it.ProducerSub != nil {
			dst = binenc.AppendString(dst, *it.ProducerSub)
		}
		dst = binenc.AppendBytes(dst, it.Payload)
	}
	return dst
}

// encodeUUID writes id's canonical text (what uuid.UUID.String returns)
// into dst[:36] without allocating.
func encodeUUID(dst []byte, id uuid.UUID) {
	const hex = "0123456789abcdef"
	j := 0
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hex[b>>4], hex[b&0xf]
		j += 2
	}
}

// DecodeRecord decodes a push record (kind 1 or 2). Payload slices alias b.
// Errors wrap ErrBadRecord.
func DecodeRecord(b []byte) (*Record, error) {
	rr, err := NewRecordReader(b)
	if err != nil {
		return nil, err
	}
	r := &Record{AcceptedAt: rr.AcceptedAt, Items: make([]Item, rr.Len())}
	for i := range r.Items {
		if err := rr.Next(&r.Items[i]); err != nil {
			return nil, err
		}
	}
	if err := rr.Next(&Item{}); err != io.EOF {
		return nil, err
	}
	return r, nil
}

// RecordReader decodes the items of a push record one at a time, so that a
// record of millions of items is never decoded all at once: the projector
// reads a bounded piece, projects it, and reads on. An item's queue and
// partition share the previous item's strings when they are equal.
type RecordReader struct {
	rd   *binenc.Reader
	kind byte
	// AcceptedAt is the record's acceptance time, Unix microseconds.
	AcceptedAt int64
	n, read    int
	queue      string
	partition  string
}

// NewRecordReader reads the header of push record b (kind 1 or 2). Errors
// wrap ErrBadRecord.
func NewRecordReader(b []byte) (*RecordReader, error) {
	rd := binenc.NewReader(b)
	k := rd.Byte()
	if rd.Err() == nil && k != recordKindPush && k != recordKindPushCompact {
		return nil, fmt.Errorf("%w: kind %d", ErrBadRecord, k)
	}
	r := &RecordReader{rd: rd, kind: k, AcceptedAt: rd.Varint()}
	n := rd.Uvarint()
	if rd.Err() != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadRecord, rd.Err())
	}
	// Every item takes at least 21 bytes (kind 1) or 19 (kind 2); refuse
	// counts the input cannot hold.
	least := 21
	if k == recordKindPushCompact {
		least = 19
	}
	if n > uint64(rd.Len()/least+1) {
		return nil, fmt.Errorf("%w: count %d too large", ErrBadRecord, n)
	}
	r.n = int(n)
	return r, nil
}

// Len is the number of items in the record.
func (r *RecordReader) Len() int { return r.n }

// Done is the number of items read (or skipped) so far.
func (r *RecordReader) Done() int { return r.read }

// Next decodes the next item into it (Payload aliases the record). After
// the last item it returns io.EOF, or an ErrBadRecord error when bytes
// follow it.
func (r *RecordReader) Next(it *Item) error { return r.next(it, true) }

// Skip passes over the next n items without decoding their strings (a
// projector resuming inside a record). Errors as for Next.
func (r *RecordReader) Skip(n int) error {
	var it Item
	for i := 0; i < n; i++ {
		if err := r.next(&it, false); err != nil {
			if err == io.EOF {
				return fmt.Errorf("%w: skip %d items of %d", ErrBadRecord, n, r.n)
			}
			return err
		}
	}
	return nil
}

func (r *RecordReader) next(it *Item, keep bool) error {
	rd := r.rd
	if r.read == r.n {
		if rd.Len() != 0 {
			return fmt.Errorf("%w: %d trailing bytes", ErrBadRecord, rd.Len())
		}
		return io.EOF
	}
	i := r.read
	flags := rd.Byte()
	if r.kind == recordKindPush {
		flags &= flagProducerSub // kind 1 knows only bit0
	} else if flags&^knownCompactFlags != 0 {
		return fmt.Errorf("%w: item %d: unknown flags %#x", ErrBadRecord, i, flags)
	}
	copy(it.MessageID[:], rd.Fixed(16))
	it.Queue = r.name(rd.Bytes(), &r.queue)
	if flags&flagDefaultPart != 0 {
		it.Partition = DefaultPartition
	} else {
		it.Partition = r.name(rd.Bytes(), &r.partition)
	}
	switch {
	case flags&flagMintedTxID != 0:
		it.TransactionID = ""
		if keep {
			it.TransactionID = it.MessageID.String()
		}
	case keep:
		it.TransactionID = rd.String()
	default:
		rd.Bytes()
	}
	it.ProducerSub = nil
	if flags&flagProducerSub != 0 {
		if keep {
			s := rd.String()
			it.ProducerSub = &s
		} else {
			rd.Bytes()
		}
	}
	it.Payload = rd.Bytes()
	if rd.Err() != nil {
		return fmt.Errorf("%w: item %d: %v", ErrBadRecord, i, rd.Err())
	}
	r.read++
	return nil
}

// name returns b as a string, reusing *last when it is equal.
func (r *RecordReader) name(b []byte, last *string) string {
	if string(b) != *last {
		*last = string(b)
	}
	return *last
}
