package pg

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/google/uuid"
	"github.com/klauspost/compress/s2"

	"github.com/queenmq/queen-go/internal/binenc"
)

// Segment body layout (the bytea in queen.segments.body):
//
//	version   byte     1
//	count     uvarint  last_offset - base_offset + 1
//	count × message, in offset order:
//	  message_id     16 bytes
//	  created_at     varint   acceptance time, Unix microseconds
//	  flags          byte     bit0 producer_sub, bit1 trace_id, bit2 payload encrypted
//	  transaction_id bytes    uvarint length + bytes
//	  producer_sub   bytes    only with bit0
//	  trace_id       16 bytes only with bit1
//	  payload        bytes    the pushed JSON value, verbatim
//
// A body the broker compressed (storeSegment) is version 2 instead:
//
//	version   byte     2
//	count     uvarint  as in version 1
//	first     varint   created_at of the first message, as in version 1
//	                   (a prefix of the body still tells it: firstCreatedAt)
//	length    uvarint  length of the version-1 body below, 1..maxPlainSegment
//	block     bytes    that version-1 body as one S2 block
//	                   (github.com/klauspost/compress/s2), to the end
//
// Every reader takes both (plainSegment); a version-1 body is what brokers
// before version 2 wrote, and what a broker writes when compressing saves
// too little or is turned off (QUEEN_SEGMENT_COMPRESSION=false).
const (
	segmentVersion   = 1
	segmentVersionS2 = 2
)

// Compression of segment bodies (storeSegment): a body shorter than
// minCompressSegment bytes is stored as it is (a message or two: little to
// gain, and PostgreSQL keeps such a row inline anyway), and a compressed
// body is kept only when it is at most compressKeep of the plain one
// (payloads that are already compressed or encrypted save next to
// nothing, and reading them back would pay the decompression and a
// buffer of their own for it; random base64 text with a JSON key or two
// per message saves about 7%, which is kept: 13 bytes a message of
// 256-byte payloads, measured in docs/decisions.md).
// maxPlainSegment bounds the length a version-2 header may announce, so a
// damaged header cannot make a reader allocate more (the block's own
// announced length is checked against it before anything is allocated);
// a larger body is stored uncompressed (a segment of a projection batch
// of at most 10,000 items is far below it unless its payloads are
// megabytes each).
const (
	minCompressSegment = 1024
	compressKeep       = 0.9375
	maxPlainSegment    = 256 << 20
)

// compressible reports whether storeSegment tries to compress a
// version-1 body of plainLen bytes (see minCompressSegment and
// maxPlainSegment); an empty segment's body never is.
func compressible(plainLen int) bool {
	return plainLen >= minCompressSegment && plainLen <= maxPlainSegment
}

// storedSegmentCap is the most bytes storeSegment may need in dst,
// compressed or not, for a version-1 body of plainLen bytes: the
// version-2 header (four fields of at most 10 bytes) and S2's bound.
func storedSegmentCap(plainLen int) int {
	if !compressible(plainLen) {
		return plainLen
	}
	return max(plainLen, 40+s2.MaxEncodedLen(plainLen))
}

// storeSegment appends to dst the body to store for plain, a version-1
// body (EncodeSegment) of count messages whose first was accepted at
// first (Unix microseconds): when it saves enough (see
// minCompressSegment), the version-2 body holding plain compressed;
// otherwise plain itself. plain is not kept. With storedSegmentCap bytes
// free in dst, dst is not grown.
func storeSegment(dst, plain []byte, count int, first int64) []byte {
	if !compressible(len(plain)) {
		return append(dst, plain...)
	}
	at := len(dst)
	dst = append(dst, segmentVersionS2)
	dst = binenc.AppendUvarint(dst, uint64(count))
	dst = binenc.AppendVarint(dst, first)
	dst = binenc.AppendUvarint(dst, uint64(len(plain)))
	head := len(dst) - at
	dst = slices.Grow(dst, s2.MaxEncodedLen(len(plain)))
	block := s2.Encode(dst[len(dst):cap(dst)], plain)
	if float64(head+len(block)) > compressKeep*float64(len(plain)) {
		return append(dst[:at], plain...)
	}
	return dst[:len(dst)+len(block)]
}

// plainSegment returns the version-1 body that body holds: body itself
// when it is one (or is not a version-2 body: the caller's decoder then
// reports what it finds), else its block decompressed into new memory,
// checked to announce the header's count and to be as long as the header
// says. Errors wrap ErrBadSegment.
func plainSegment(body []byte) ([]byte, error) {
	if len(body) == 0 || body[0] != segmentVersionS2 {
		return body, nil
	}
	rd := binenc.NewReader(body[1:])
	count := rd.Uvarint()
	rd.Varint()
	n := rd.Uvarint()
	if rd.Err() != nil || n == 0 || n > maxPlainSegment {
		return nil, fmt.Errorf("%w: compressed header", ErrBadSegment)
	}
	block := body[len(body)-rd.Len():]
	got, err := s2.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("%w: compressed block: %v", ErrBadSegment, err)
	}
	if uint64(got) != n {
		return nil, fmt.Errorf("%w: compressed block holds %d bytes, header says %d", ErrBadSegment, got, n)
	}
	plain, err := s2.Decode(make([]byte, n), block)
	if err != nil {
		return nil, fmt.Errorf("%w: compressed block: %v", ErrBadSegment, err)
	}
	prd := binenc.NewReader(plain)
	if v := prd.Byte(); v != segmentVersion || prd.Uvarint() != count || prd.Err() != nil {
		return nil, fmt.Errorf("%w: compressed block does not hold the %d messages its header says", ErrBadSegment, count)
	}
	return plain, nil
}

// ErrBadSegment is returned by DecodeSegment for a body it cannot read.
var ErrBadSegment = errors.New("pg: bad segment body")

// Message is one stored message.
type Message struct {
	ID            uuid.UUID
	TransactionID string
	// CreatedAtMicros is the broker's acceptance time, Unix microseconds.
	CreatedAtMicros int64
	ProducerSub     *string
	TraceID         *uuid.UUID
	// Payload is the pushed JSON value, byte-for-byte.
	Payload []byte
	// Encrypted says Payload is a crypt envelope (a queue with
	// encryptionEnabled); Store decrypts before handing messages out.
	Encrypted bool
	// MintedTxID, set by the push path (ingest) for a message pushed
	// without a transactionId, says TransactionID is ID's text: the
	// projection then takes the key for a minted one (minted) without
	// building and comparing the text. False says nothing: the text is
	// compared. Whoever changes TransactionID clears it. Not stored: a
	// segment spells every transactionId out.
	MintedTxID bool
}

// SegmentLen is the length in bytes of the segment body of msgs: what
// EncodeSegment appends.
func SegmentLen(msgs []Message) int {
	n := 1 + binenc.UvarintLen(uint64(len(msgs)))
	for i := range msgs {
		n += messageLen(&msgs[i])
	}
	return n
}

// messageLen is the bytes m takes in a version-1 segment body: its
// stored length, which the pops' byte bound counts (withinBytes; in SQL
// the segments' plain_bytes, which are these summed plus a header of a
// few bytes).
func messageLen(m *Message) int {
	n := 16 + binenc.VarintLen(m.CreatedAtMicros) + 1 + binenc.UvarintLen(uint64(len(m.TransactionID))) + len(m.TransactionID)
	if m.ProducerSub != nil {
		n += binenc.UvarintLen(uint64(len(*m.ProducerSub))) + len(*m.ProducerSub)
	}
	if m.TraceID != nil {
		n += 16
	}
	return n + binenc.UvarintLen(uint64(len(m.Payload))) + len(m.Payload)
}

// EncodeSegment appends the body for msgs to dst, growing dst at most once
// (to SegmentLen more bytes).
func EncodeSegment(dst []byte, msgs []Message) []byte {
	dst = slices.Grow(dst, SegmentLen(msgs))
	return encodeSegmentGrown(dst, msgs)
}

// encodeSegmentGrown is EncodeSegment into a dst with room for it.
func encodeSegmentGrown(dst []byte, msgs []Message) []byte {
	dst = append(dst, segmentVersion)
	dst = binenc.AppendUvarint(dst, uint64(len(msgs)))
	for i := range msgs {
		m := &msgs[i]
		dst = append(dst, m.ID[:]...)
		dst = binenc.AppendVarint(dst, m.CreatedAtMicros)
		var flags byte
		if m.ProducerSub != nil {
			flags |= 1
		}
		if m.TraceID != nil {
			flags |= 2
		}
		if m.Encrypted {
			flags |= 4
		}
		dst = append(dst, flags)
		dst = binenc.AppendString(dst, m.TransactionID)
		if m.ProducerSub != nil {
			dst = binenc.AppendString(dst, *m.ProducerSub)
		}
		if m.TraceID != nil {
			dst = append(dst, m.TraceID[:]...)
		}
		dst = binenc.AppendBytes(dst, m.Payload)
	}
	return dst
}

// DecodeSegment decodes a segment body (either version). Payloads alias b,
// or, for a compressed body, memory of their own.
func DecodeSegment(b []byte) ([]Message, error) {
	b, err := plainSegment(b)
	if err != nil {
		return nil, err
	}
	rd := binenc.NewReader(b)
	if v := rd.Byte(); rd.Err() == nil && v != segmentVersion {
		return nil, fmt.Errorf("%w: version %d", ErrBadSegment, v)
	}
	n := rd.Uvarint()
	if rd.Err() != nil || n > uint64(rd.Len()/19+1) {
		return nil, fmt.Errorf("%w: header", ErrBadSegment)
	}
	out := make([]Message, n)
	for i := range out {
		m := &out[i]
		copy(m.ID[:], rd.Fixed(16))
		m.CreatedAtMicros = rd.Varint()
		flags := rd.Byte()
		m.TransactionID = rd.String()
		if flags&1 != 0 {
			s := rd.String()
			m.ProducerSub = &s
		}
		if flags&2 != 0 {
			var t uuid.UUID
			copy(t[:], rd.Fixed(16))
			m.TraceID = &t
		}
		m.Payload = rd.Bytes()
		m.Encrypted = flags&4 != 0
		if rd.Err() != nil {
			return nil, fmt.Errorf("%w: message %d: %v", ErrBadSegment, i, rd.Err())
		}
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", ErrBadSegment)
	}
	return out, nil
}

// decodeSegmentRange decodes the body of partition pid's segment holding
// offsets base..last and checks it holds exactly that many messages
// (ErrBadSegment otherwise); errors name the partition and base offset.
func decodeSegmentRange(pid uuid.UUID, base, last int64, body []byte) ([]Message, error) {
	msgs, err := DecodeSegment(body)
	if err != nil {
		return nil, fmt.Errorf("partition %s offset %d: %w", pid, base, err)
	}
	if int64(len(msgs)) != last-base+1 {
		return nil, fmt.Errorf("partition %s offset %d: %w: %d messages for %d offsets", pid, base, ErrBadSegment, len(msgs), last-base+1)
	}
	return msgs, nil
}

// appendSegmentOffsets appends to out the messages of offsets from..to
// (inclusive; clipped to the segment) of partition pid's segment holding
// base..last, whose body is body: the pop and ack paths' decoder. Only
// those offsets are decoded: the messages before from are skipped over by
// their lengths and decoding stops after to, so a pop starting in the
// middle of a segment does not decode its head, nor one ending early its
// tail (a damaged tail is reported by the pop that reaches it). Nothing is
// allocated per message: payloads, transactionIds and producer subjects
// alias body (which must not change afterwards; a compressed body is
// decompressed into memory of its own first, which they alias), and the trace ids and
// producer subjects of one call share one backing array each. It checks
// that the body holds exactly last-base+1 messages (ErrBadSegment); errors
// name the partition and base offset.
func appendSegmentOffsets(out []StoredMessage, pid uuid.UUID, base, last int64, body []byte, from, to int64) ([]StoredMessage, error) {
	return decodeOffsets[StoredMessage](out, pid, base, last, body, from, to)
}

// storedIn is what decodeOffsets decodes into: *StoredMessage, or
// *PoppedMessage (a claimed pop decodes straight into its answer's
// messages, pg/claim.go deliverClaimed, instead of into a scratch slice
// copied afterwards).
type storedIn[T any] interface {
	*T
	stored() *StoredMessage
}

func (m *StoredMessage) stored() *StoredMessage { return m }

// decodeOffsets is appendSegmentOffsets into a slice of T (see storedIn).
func decodeOffsets[T any, P storedIn[T]](out []T, pid uuid.UUID, base, last int64, body []byte, from, to int64) ([]T, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("partition %s offset %d: %w: "+format, append([]any{pid, base, ErrBadSegment}, args...)...)
	}
	body, err := plainSegment(body)
	if err != nil {
		return nil, fmt.Errorf("partition %s offset %d: %w", pid, base, err)
	}
	rd := binenc.NewReader(body)
	if v := rd.Byte(); rd.Err() == nil && v != segmentVersion {
		return nil, bad("version %d", v)
	}
	n := rd.Uvarint()
	if rd.Err() != nil {
		return nil, bad("header")
	}
	if n != uint64(last-base+1) {
		return nil, bad("%d messages for %d offsets", n, last-base+1)
	}
	from, to = max(from, base), min(to, last)
	if from > to {
		return out, nil
	}
	out = slices.Grow(out, int(to-from+1))
	var subs []string
	var traces []uuid.UUID
	for off := base; off <= to; off++ {
		if off < from {
			// Skip: id, time, flags, then the flagged fields and payload.
			rd.Fixed(16)
			rd.Varint()
			flags := rd.Byte()
			rd.Bytes()
			if flags&1 != 0 {
				rd.Bytes()
			}
			if flags&2 != 0 {
				rd.Fixed(16)
			}
			rd.Bytes()
			if rd.Err() != nil {
				return nil, bad("message %d: %v", off-base, rd.Err())
			}
			continue
		}
		var zero T
		out = append(out, zero)
		sm := P(&out[len(out)-1]).stored()
		sm.PartitionID, sm.Offset = pid, off
		m := &sm.Message
		copy(m.ID[:], rd.Fixed(16))
		m.CreatedAtMicros = rd.Varint()
		flags := rd.Byte()
		m.TransactionID = aliasString(rd.Bytes())
		if flags&1 != 0 {
			if subs == nil {
				subs = make([]string, 0, to-off+1)
			}
			subs = append(subs, aliasString(rd.Bytes()))
			m.ProducerSub = &subs[len(subs)-1]
		}
		if flags&2 != 0 {
			if traces == nil {
				traces = make([]uuid.UUID, 0, to-off+1)
			}
			traces = append(traces, uuid.UUID{})
			t := &traces[len(traces)-1]
			copy(t[:], rd.Fixed(16))
			m.TraceID = t
		}
		m.Payload = rd.Bytes()
		m.Encrypted = flags&4 != 0
		if rd.Err() != nil {
			return nil, bad("message %d: %v", off-base, rd.Err())
		}
	}
	return out, nil
}

// aliasString is b as a string without copying; b must not change while
// the string is in use (segment bodies never do once read).
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
