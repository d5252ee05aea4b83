package pg

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters of the projection batch, encoded without pgx's
// per-element work.
//
// pgx encodes a Go slice bound to an array parameter element by element
// through interface values (one allocation per int64 of a bigint[], and
// through a buffer that starts at 256 bytes and doubles, so a bytea[] of a
// batch's segment bodies is copied about twice more than its size and
// leaves as much garbage behind). The codecs below take over the binary
// encoding of the parameter shapes the projector sends per message or per
// payload byte, and leave everything else (text format, other Go types,
// every decode) to pgx's own ArrayCodec:
//
//   - bigint[] from []int64 (sidecar key hashes, offsets): written at once,
//     12 bytes an element, into a buffer grown once;
//   - integer[] from []int32 (message counts per segment, the segment
//     bodies' offsets and lengths): the same, 8 bytes an element;
//   - uuid[] from []pgtype.UUID (partition ids);
//   - bytea[] from [][]byte, grown once to its exact size;
//   - bytea from segmentPack (a batch's segment bodies one after another,
//     not an array: see segmentPack): every partition's segment body is
//     encoded (EncodeSegment's layout) straight into pgx's parameter
//     buffer, so a payload is copied once on its way from the WAL record
//     into the bind message, not into a body of its own first; and pgx's
//     parameter buffer, which restarts at 256 bytes for every statement,
//     is first moved into a buffer of the connection's own, kept from
//     batch to batch (up to wbufKeepMax, as the connection's write buffer:
//     pg/wbuf.go).
//
// The bytes are PostgreSQL's binary array format exactly as pgx writes it
// (one dimension, lower bound 1, the has-null flag; a nil slice is NULL),
// which TestFastArrayCodecsMatchPgx checks byte for byte against pgx.
// registerFastArrays installs them on each new pool connection
// (Store.Open's AfterConnect); a connection without them still encodes
// every one of these values correctly through pgx (segmentPack is also a
// pgtype.BytesValuer), only more slowly.

// registerFastArrays replaces the codecs of bigint[], integer[], uuid[] and bytea[] in
// m (a connection's type map) by fastArrayCodec wrappers of pgx's own, and
// bytea's by a fastByteaCodec one, which holds the connection's kept
// parameter buffer.
func registerFastArrays(m *pgtype.Map) {
	kept := newKeptBuffer()
	for _, oid := range []uint32{pgtype.Int8ArrayOID, pgtype.Int4ArrayOID, pgtype.UUIDArrayOID, pgtype.ByteaArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		ac, ok := t.Codec.(*pgtype.ArrayCodec)
		if !ok {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: &fastArrayCodec{ArrayCodec: ac}})
	}
	if t, ok := m.TypeForOID(pgtype.ByteaOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: pgtype.ByteaOID, Codec: &fastByteaCodec{Codec: t.Codec, kept: kept}})
	}
}

// fastArrayCodec is pgx's ArrayCodec with the binary encode plans of the
// shapes above in front.
type fastArrayCodec struct {
	*pgtype.ArrayCodec
}

// PlanEncode implements pgtype.Codec.
func (c *fastArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch c.ElementType.OID {
		case pgtype.Int8OID:
			if _, ok := value.([]int64); ok {
				return encodeInt8Array{}
			}
		case pgtype.Int4OID:
			if _, ok := value.([]int32); ok {
				return encodeInt4Array{}
			}
		case pgtype.UUIDOID:
			if _, ok := value.([]pgtype.UUID); ok {
				return encodeUUIDArray{}
			}
		case pgtype.ByteaOID:
			if _, ok := value.([][]byte); ok {
				return encodeByteaArray{}
			}
		}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// arrayHeaderLen is the binary header of a one-dimensional array.
const arrayHeaderLen = 20

// appendArrayHeader appends the binary header of a one-dimensional array
// of n elements of type elemOID (lower bound 1).
func appendArrayHeader(buf []byte, elemOID uint32, n int, hasNull bool) []byte {
	var null uint32
	if hasNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}

type encodeInt8Array struct{}

func (encodeInt8Array) Encode(value any, buf []byte) ([]byte, error) {
	return appendIntArray(buf, value.([]int64), pgtype.Int8OID), nil
}

type encodeInt4Array struct{}

func (encodeInt4Array) Encode(value any, buf []byte) ([]byte, error) {
	return appendIntArray(buf, value.([]int32), pgtype.Int4OID), nil
}

// appendIntArray appends a as a binary one-dimensional array of elemOID
// (int4 for int32, int8 for int64), grown once; a nil a is NULL (nil).
func appendIntArray[T int32 | int64](buf []byte, a []T, elemOID uint32) []byte {
	if a == nil {
		return nil
	}
	size := int(unsafe.Sizeof(T(0)))
	buf = slices.Grow(buf, arrayHeaderLen+(4+size)*len(a))
	buf = appendArrayHeader(buf, elemOID, len(a), false)
	for _, v := range a {
		buf = binary.BigEndian.AppendUint32(buf, uint32(size))
		if size == 8 {
			buf = binary.BigEndian.AppendUint64(buf, uint64(v))
		} else {
			buf = binary.BigEndian.AppendUint32(buf, uint32(v))
		}
	}
	return buf
}

type encodeUUIDArray struct{}

func (encodeUUIDArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([]pgtype.UUID)
	if a == nil {
		return nil, nil
	}
	hasNull := false
	for i := range a {
		hasNull = hasNull || !a[i].Valid
	}
	buf = slices.Grow(buf, arrayHeaderLen+20*len(a))
	buf = appendArrayHeader(buf, pgtype.UUIDOID, len(a), hasNull)
	for i := range a {
		if !a[i].Valid {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, a[i].Bytes[:]...)
	}
	return buf, nil
}

type encodeByteaArray struct{}

func (encodeByteaArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([][]byte)
	if a == nil {
		return nil, nil
	}
	n, hasNull := arrayHeaderLen, false
	for _, b := range a {
		n += 4 + len(b)
		hasNull = hasNull || b == nil
	}
	buf = slices.Grow(buf, n)
	buf = appendArrayHeader(buf, pgtype.ByteaOID, len(a), hasNull)
	for _, b := range a {
		if b == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
	}
	return buf, nil
}

// segmentBodies is the segment bodies of a projection batch: element i
// is the messages of segment i, encoded when the batch is queued
// (packSegments) as parameters of store_segments_packed: where each
// stored body lies (two integer[]) and segmentPack, the bodies one after
// another (a single bytea). The messages' strings and payloads must stay
// unchanged until then.
type segmentBodies [][]Message

// packBuf holds a projection batch's packed bodies (out) and the scratch
// a body is encoded into before it is compressed (plain); pooled, so that
// a batch's hundreds of KiB are not fresh memory every time.
type packBuf struct{ plain, out []byte }

var packBufs = sync.Pool{New: func() any { return new(packBuf) }}

// maxPooledPack bounds the buffers packBufs keeps (bytes each): a batch
// of larger bodies gets its own, which the collector takes back.
const maxPooledPack = 4 << 20

// packSegments encodes segs for store_segments_packed: each segment's
// body to store (storeSegment: compressed where compress is set and it
// pays, else version 1), one after another in pack.out, and where each
// lies: its byte offset (0-based) and length, in order, the integer[]
// parameters that cut the pack apart, and each body's plain (version-1)
// length, stored as the segment's plain_bytes (what the pops' byte bound
// sums: popBytesSQL). Give pack back with putPackBuf once the statement is
// sent.
func packSegments(segs segmentBodies, compress bool) (pack *packBuf, offsets, lens, plains []int32) {
	pack = packBufs.Get().(*packBuf)
	offsets, lens, plains = make([]int32, len(segs)), make([]int32, len(segs)), make([]int32, len(segs))
	// out is grown once, for the most the bodies may take while packed.
	n := 0
	for i, msgs := range segs {
		plains[i] = int32(SegmentLen(msgs))
		if compress {
			n += storedSegmentCap(int(plains[i]))
		} else {
			n += int(plains[i])
		}
	}
	out := slices.Grow(pack.out[:0], n)
	for i, msgs := range segs {
		at := len(out)
		if !compress || !compressible(int(plains[i])) {
			out = encodeSegmentGrown(out, msgs) // stored as it is: encoded in place
		} else {
			pack.plain = EncodeSegment(pack.plain[:0], msgs)
			out = storeSegment(out, pack.plain, len(msgs), msgs[0].CreatedAtMicros)
		}
		offsets[i], lens[i] = int32(at), int32(len(out)-at)
	}
	pack.out = out
	return pack, offsets, lens, plains
}

// putPackBuf gives a packBuf back to packBufs (nil: nothing), unless it
// grew past maxPooledPack.
func putPackBuf(p *packBuf) {
	if p == nil || cap(p.out) > maxPooledPack || cap(p.plain) > maxPooledPack {
		return
	}
	p.out, p.plain = p.out[:0], p.plain[:0]
	packBufs.Put(p)
}

// release gives back w's packed bodies (packSegments) once its batch was
// sent; w's statements must not be sent again after it.
func (w *batchWrites) release() {
	putPackBuf(w.pack)
	w.pack = nil
}

// segmentPack is a bytea parameter: a batch's stored segment bodies one
// after another, without separators (packSegments; its offsets and
// lengths cut it apart: store_segments_packed in pg/schema.sql).
//
// Why one bytea rather than a bytea[] of the bodies: PostgreSQL builds a
// received array anew (array_recv: a zeroed allocation of the array's
// size, every element copied in), and for a batch's bodies, tens to
// hundreds of KiB, that allocation is fresh memory each time (page faults,
// then the zeroing): array_recv was 22% of the projector backend's CPU at
// 8 x 100 pushes over 10 partitions (perf of the backend). A bytea
// parameter is copied once; each body is then cut out of it with
// substring (one copy of its own, which the array's unnest did not
// need). Measured in docs/decisions.md ("Segment bodies as one bytea").
type segmentPack []byte

// encodeSegmentPack is the binary plan of segmentPack; kept (nil: none) is
// the connection's parameter buffer (fastByteaCodec), which the pack is
// copied into instead of pgx's buffer grown by doubling.
type encodeSegmentPack struct{ kept *keptBuffer }

func (e encodeSegmentPack) Encode(value any, buf []byte) ([]byte, error) {
	pack := value.(segmentPack)
	if pack == nil {
		return nil, nil
	}
	if e.kept != nil {
		buf = reserve(buf, len(pack), e.kept)
	}
	return append(buf, pack...), nil
}

// BytesValue makes segmentPack a pgtype.BytesValuer, so that a type map
// without registerFastArrays encodes it too.
func (s segmentPack) BytesValue() ([]byte, error) { return s, nil }

// fastByteaCodec is pgx's ByteaCodec with segmentPack's binary plan in
// front; every other value is pgx's.
type fastByteaCodec struct {
	pgtype.Codec
	// kept is the connection's parameter buffer for segment bodies: used
	// only by that connection's type map, one statement at a time, and
	// only through encodeSegmentPack, which never writes below the
	// parameters already in pgx's buffer.
	kept *keptBuffer
}

// PlanEncode implements pgtype.Codec. A segmentPack goes in binary only:
// in text, pgx would send a batch's hundreds of KiB of bodies as hex,
// twice their size, through its own buffer grown by doubling; that plan is
// refused rather than taken silently.
func (c *fastByteaCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(segmentPack); ok {
		if format == pgtype.BinaryFormatCode {
			return encodeSegmentPack{kept: c.kept}
		}
		return refuseSegmentPack{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// refuseSegmentPack is the plan of a segmentPack in text format: an error.
type refuseSegmentPack struct{}

func (refuseSegmentPack) Encode(any, []byte) ([]byte, error) {
	return nil, errors.New("pg: segment bodies are sent in binary format only")
}
