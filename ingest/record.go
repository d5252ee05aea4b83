package ingest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
	"github.com/queenmq/queen-go/pg"
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
	// TraceID is set only for items of POST /api/v1/transaction, which go
	// to PostgreSQL directly; the push record has no field for it (a plain
	// push never reads traceId) and EncodeRecord does not write it.
	TraceID *uuid.UUID
	// MintedTxID is true when TransactionID is MessageID's text because
	// the item was pushed without one (NewItems, or a kind 2 record's
	// flag): the record then leaves it out, and the projection knows the
	// key is a minted one without comparing the text. False does not say
	// the opposite (an Item built elsewhere): the text is then compared
	// (compactFlags, pg's minted). Whoever changes TransactionID clears it.
	MintedTxID bool
}

// NewItems mints the items of one push or transaction from its parsed
// items: a UUIDv7 message id each, the transactionId (the minted id's text
// when the body gave none, as the push route's contract says) and
// producerSub (the validated JWT sub, or nil). It is the one place a push
// item is built. Payloads keep aliasing the parsed body. The error is
// crypto/rand's (no randomness).
//
// The ids are laid out as uuid.NewV7 lays them out (RFC 9562: 48 bits of
// Unix milliseconds, version 7, 12 bits of sub-millisecond time that go up
// by one where ids would repeat, the variant, 62 random bits), from one
// clock reading and one crypto/rand read per push: mintV7 reserves the
// push's run of timestamps at once, so the ids of a push, and of all
// pushes of this process, strictly increase.
func NewItems(parsed []ParsedItem, producerSub *string) ([]Item, error) {
	return newItemsInto(nil, parsed, producerSub)
}

// newItemsInto is NewItems building the items in dst's memory when it is
// large enough (the push path's reused slice).
func newItemsInto(dst []Item, parsed []ParsedItem, producerSub *string) ([]Item, error) {
	items := dst[:0]
	if cap(items) < len(parsed) {
		items = make([]Item, len(parsed))
	}
	items = items[:len(parsed)]
	var stack [64 * 8]byte
	random := stack[:0]
	if len(parsed) > 64 {
		random = make([]byte, 8*len(parsed))
	}
	random = random[:8*len(parsed)]
	if _, err := rand.Read(random); err != nil {
		return nil, err
	}
	first := mintV7(len(parsed))
	// The text of the minted ids that stand for absent transactionIds is
	// written into one builder, whose String is sliced: one allocation per
	// push, not one per item.
	var text strings.Builder
	for i := range parsed {
		p := &parsed[i]
		id := v7ID(first+int64(i), random[8*i:8*i+8])
		if p.TransactionID == "" {
			if text.Cap() == 0 {
				text.Grow(36 * (len(parsed) - i))
			}
			var t [36]byte
			encodeUUID(t[:], id)
			text.Write(t[:])
		}
		items[i] = Item{Queue: p.Queue, Partition: p.Partition, TransactionID: p.TransactionID, MessageID: id,
			ProducerSub: producerSub, Payload: p.Payload, TraceID: p.TraceID, MintedTxID: p.TransactionID == ""}
	}
	if text.Len() > 0 {
		all := text.String()
		for i := range items {
			if items[i].TransactionID == "" {
				items[i].TransactionID, all = all[:36], all[36:]
			}
		}
	}
	return items, nil
}

// v7Clock is the last UUIDv7 timestamp mintV7 handed out: Unix
// milliseconds << 12 | the 12-bit sub-millisecond part.
var v7Clock struct {
	sync.Mutex
	last int64
}

// mintV7 reserves n consecutive UUIDv7 timestamps (milliseconds << 12 |
// 12 bits) and returns the first: now (the sub-millisecond part is the
// nanoseconds within the millisecond / 256, as uuid.NewV7 takes it), or
// one past the last one handed out when the clock has not passed it, so
// that every id minted by this process is greater than the one before.
func mintV7(n int) int64 {
	nano := time.Now().UnixNano()
	ms := nano / int64(time.Millisecond)
	now := ms<<12 | (nano-ms*int64(time.Millisecond))>>8
	v7Clock.Lock()
	if now <= v7Clock.last {
		now = v7Clock.last + 1
	}
	v7Clock.last = now + int64(n) - 1
	v7Clock.Unlock()
	return now
}

// v7ID is the UUIDv7 of timestamp t (mintV7's form) with random[:8] as
// its last 8 bytes (the top two bits become the variant).
func v7ID(t int64, random []byte) uuid.UUID {
	var id uuid.UUID
	ms := uint64(t >> 12)
	id[0], id[1], id[2], id[3], id[4], id[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = 0x70 | byte(t>>8)&0x0f
	id[7] = byte(t)
	copy(id[8:], random[:8])
	id[8] = id[8]&0x3f | 0x80
	return id
}

// AppendProjectItems appends the items of r as pg.Store stores them (the
// projector's batches and the transaction route both go through here, by
// way of Item.ProjectItem): the acceptance time is each message's
// createdAt and the start of its dedup window. Strings and payloads alias
// r's.
func (r *Record) AppendProjectItems(dst []pg.ProjectItem) []pg.ProjectItem {
	for i := range r.Items {
		dst = append(dst, r.Items[i].ProjectItem(r.AcceptedAt))
	}
	return dst
}

// ProjectItem is it as pg.Store stores it, accepted at acceptedAt (Unix
// microseconds, the record's AcceptedAt): the one mapping from a push item
// to a stored message (AppendProjectItems for whole records, the projector
// item by item for a record projected in pieces). Strings and the payload
// alias it's.
func (it *Item) ProjectItem(acceptedAt int64) pg.ProjectItem {
	return pg.ProjectItem{Queue: it.Queue, Partition: it.Partition, AcceptedAtMicros: acceptedAt,
		Message: pg.Message{ID: it.MessageID, TransactionID: it.TransactionID, CreatedAtMicros: acceptedAt,
			ProducerSub: it.ProducerSub, TraceID: it.TraceID, Payload: it.Payload, MintedTxID: it.MintedTxID}}
}

// EncodedLen is the length of r's push record, what EncodeRecord appends
// (kind 2: the fields compactFlags leaves out are not counted).
func (r *Record) EncodedLen() int {
	total, _ := r.encodedLens()
	return total
}

// encodedLens returns EncodedLen and how many of its bytes are payloads.
func (r *Record) encodedLens() (total, payloads int) {
	n := 1 + binenc.VarintLen(r.AcceptedAt) + binenc.UvarintLen(uint64(len(r.Items)))
	for i := range r.Items {
		it := &r.Items[i]
		flags := compactFlags(it)
		n += 1 + 16 + strLen(len(it.Queue)) + strLen(len(it.Payload))
		payloads += len(it.Payload)
		if flags&flagDefaultPart == 0 {
			n += strLen(len(it.Partition))
		}
		if flags&flagMintedTxID == 0 {
			n += strLen(len(it.TransactionID))
		}
		if it.ProducerSub != nil {
			n += strLen(len(*it.ProducerSub))
		}
	}
	return n, payloads
}

// compactFlags is the flags byte of it in a kind 2 record: producer_sub
// present, partition DefaultPartition (left out), transaction id the
// message id's text, as NewItems mints it (left out; known from
// it.MintedTxID without building the text, else compared).
func compactFlags(it *Item) byte {
	var flags byte
	if it.ProducerSub != nil {
		flags |= flagProducerSub
	}
	if it.Partition == DefaultPartition {
		flags |= flagDefaultPart
	}
	if (it.MintedTxID && len(it.TransactionID) == 36) || binenc.IsUUIDText(it.MessageID, it.TransactionID) {
		flags |= flagMintedTxID
	}
	return flags
}

func strLen(n int) int { return binenc.UvarintLen(uint64(n)) + n }

// Record is one push: the items of one request and their acceptance time.
type Record struct {
	// AcceptedAt is the broker's acceptance time in Unix microseconds.
	AcceptedAt int64
	Items      []Item
	// txEnd is DecodeRecordInto's scratch (where each item's
	// transactionId ends in the record's one string), kept so that a
	// reused Record decodes without allocating it again.
	txEnd []int
}

// EncodeRecord appends the binary push record for r to dst (kind 2, see
// doc.go).
func EncodeRecord(dst []byte, r *Record) []byte {
	dst = appendRecordHead(dst, r)
	for i := range r.Items {
		it := &r.Items[i]
		dst = appendItemHead(dst, it)
		dst = append(dst, it.Payload...)
	}
	return dst
}

// encodeRecordGathered lays out r's push record (EncodeRecord's bytes) in
// pieces without copying a payload: every byte but the payloads is
// appended to meta, and vec[:0] gets, in order, slices of meta and the
// items' Payload slices themselves. The first piece starts at meta[0], so
// the concatenation of the returned vec is what EncodeRecord(meta, r)
// returns (bytes already in meta, a WAL envelope's room, come first).
// meta is grown once, before the first piece is cut, so that it does not
// move under the pieces; the returned meta is what they alias.
func encodeRecordGathered(meta []byte, vec [][]byte, r *Record) ([]byte, [][]byte) {
	total, payloads := r.encodedLens()
	meta = slices.Grow(meta, total-payloads)
	vec = slices.Grow(vec[:0], 2*len(r.Items)+1)
	mark := 0
	meta = appendRecordHead(meta, r)
	for i := range r.Items {
		it := &r.Items[i]
		meta = appendItemHead(meta, it)
		vec = append(vec, meta[mark:len(meta):len(meta)], it.Payload)
		mark = len(meta)
	}
	if mark < len(meta) { // a record without items
		vec = append(vec, meta[mark:len(meta):len(meta)])
	}
	return meta, vec
}

// appendRecordHead appends the record header of r (kind, acceptance time,
// item count) to dst.
func appendRecordHead(dst []byte, r *Record) []byte {
	dst = append(dst, recordKindPushCompact)
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	return binenc.AppendUvarint(dst, uint64(len(r.Items)))
}

// appendItemHead appends everything of it's kind 2 entry up to its payload
// (flags, message id, names, the payload's length) to dst.
func appendItemHead(dst []byte, it *Item) []byte {
	flags := compactFlags(it)
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
	return binenc.AppendUvarint(dst, uint64(len(it.Payload)))
}

// encodeUUID writes id's canonical text (what uuid.UUID.String returns)
// into dst[:36] without allocating.
func encodeUUID(dst []byte, id uuid.UUID) { binenc.PutUUIDText(dst, id) }

// readHeader reads the header of push record b (kind 1 or 2): its kind,
// acceptance time and item count, refusing a count the input cannot hold
// (every item takes at least 21 bytes in kind 1, 19 in kind 2). Errors
// wrap ErrBadRecord.
func readHeader(b []byte) (rd *binenc.Reader, kind byte, acceptedAt int64, n int, err error) {
	rd = binenc.NewReader(b)
	kind = rd.Byte()
	if rd.Err() == nil && kind != recordKindPush && kind != recordKindPushCompact {
		return nil, 0, 0, 0, fmt.Errorf("%w: kind %d", ErrBadRecord, kind)
	}
	acceptedAt = rd.Varint()
	count := rd.Uvarint()
	if rd.Err() != nil {
		return nil, 0, 0, 0, fmt.Errorf("%w: header: %v", ErrBadRecord, rd.Err())
	}
	least := 21
	if kind == recordKindPushCompact {
		least = 19
	}
	if count > uint64(rd.Len()/least+1) {
		return nil, 0, 0, 0, fmt.Errorf("%w: count %d too large", ErrBadRecord, count)
	}
	return rd, kind, acceptedAt, int(count), nil
}

// itemFlags reads an item's flags byte: kind 1 knows only bit0 (its other
// bits are ignored, as the first readers did), kind 2 refuses unknown bits.
func itemFlags(rd *binenc.Reader, kind byte, i int) (byte, error) {
	flags := rd.Byte()
	if kind == recordKindPush {
		return flags & flagProducerSub, nil
	}
	if flags&^knownCompactFlags != 0 {
		return 0, fmt.Errorf("%w: item %d: unknown flags %#x", ErrBadRecord, i, flags)
	}
	return flags, nil
}

// ItemCount reads the item count from the header of the push record b
// (kind 1 or 2) without decoding the items (0 when the header does not
// decode: the decode itself then reports the error). The projector sizes
// its batch with it.
func ItemCount(b []byte) int {
	_, _, _, n, err := readHeader(b)
	if err != nil {
		return 0
	}
	return n
}

// DecodeRecord decodes a push record (kind 1 or 2). Payload slices alias
// b. Errors wrap ErrBadRecord.
func DecodeRecord(b []byte) (*Record, error) {
	r := &Record{}
	if err := DecodeRecordInto(r, b); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeRecordInto decodes a push record (kind 1 or 2) into r, reusing the
// capacity of r.Items (the projector decodes every whole record of a batch
// into one Record; it keeps one across batches). Payload slices alias b. The allocations are per record,
// not per item: a queue, partition or producerSub repeated across items is
// one string, and the transactionIds of all items (a minted one spelled out
// from the message id) are substrings of one. Errors wrap ErrBadRecord; r
// is then unspecified.
func DecodeRecordInto(r *Record, b []byte) error {
	rd, kind, acceptedAt, n, err := readHeader(b)
	if err != nil {
		return err
	}
	r.AcceptedAt = acceptedAt
	if cap(r.Items) >= n {
		r.Items = r.Items[:n]
		clear(r.Items)
	} else {
		r.Items = make([]Item, n)
	}
	var namesBuf [maxInterned]string
	names := namesBuf[:0] // queue/partition names seen
	var subs *string
	// The transactionIds are written into one builder, whose String is
	// the one string they are sliced from (no second copy).
	var txids strings.Builder
	txids.Grow(40 * n)
	txEnd := r.txEnd[:0] // end of items[i]'s transactionId in txids
	if cap(txEnd) < n {
		txEnd = make([]int, n)
	}
	txEnd = txEnd[:n]
	r.txEnd = txEnd
	for i := range r.Items {
		it := &r.Items[i]
		flags, err := itemFlags(rd, kind, i)
		if err != nil {
			return err
		}
		copy(it.MessageID[:], rd.Fixed(16))
		it.Queue, names = intern(names, rd.Bytes())
		if flags&flagDefaultPart != 0 {
			it.Partition = DefaultPartition
		} else {
			it.Partition, names = intern(names, rd.Bytes())
		}
		if flags&flagMintedTxID != 0 {
			var text [36]byte
			encodeUUID(text[:], it.MessageID)
			txids.Write(text[:])
			it.MintedTxID = true
		} else {
			txids.Write(rd.Bytes())
		}
		txEnd[i] = txids.Len()
		if flags&flagProducerSub != 0 {
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
	all, start := txids.String(), 0
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
	if len(b) > 0 {
		last := b[len(b)-1] // names that differ mostly differ here (p0, p1, …)
		for _, n := range names {
			if len(n) == len(b) && n[len(n)-1] == last && n == string(b) {
				return n, names
			}
		}
	}
	s := string(b)
	if len(names) < maxInterned {
		names = append(names, s)
	}
	return s, names
}

// RecordHeader reads only the header of a push record (kind 1 or 2): its
// acceptance time (Unix microseconds) and how many items it holds, without
// decoding the items. Errors wrap ErrBadRecord.
func RecordHeader(b []byte) (acceptedAt int64, items int, err error) {
	_, _, acceptedAt, items, err = readHeader(b)
	return acceptedAt, items, err
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
	sub        *string
}

// NewRecordReader reads the header of push record b (kind 1 or 2). Errors
// wrap ErrBadRecord.
func NewRecordReader(b []byte) (*RecordReader, error) {
	rd, kind, acceptedAt, n, err := readHeader(b)
	if err != nil {
		return nil, err
	}
	return &RecordReader{rd: rd, kind: kind, AcceptedAt: acceptedAt, n: n}, nil
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
	flags, err := itemFlags(rd, r.kind, i)
	if err != nil {
		return err
	}
	it.TraceID, it.MintedTxID = nil, false
	copy(it.MessageID[:], rd.Fixed(16))
	it.Queue = r.name(rd.Bytes(), &r.queue)
	if flags&flagDefaultPart != 0 {
		it.Partition = DefaultPartition
	} else {
		it.Partition = r.name(rd.Bytes(), &r.partition)
	}
	switch {
	case flags&flagMintedTxID != 0:
		it.TransactionID, it.MintedTxID = "", keep
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
		sub := rd.Bytes()
		if keep {
			if r.sub == nil || *r.sub != string(sub) {
				s := string(sub)
				r.sub = &s
			}
			it.ProducerSub = r.sub
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
