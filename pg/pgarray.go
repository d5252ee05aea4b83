package pg

import (
	"encoding/binary"
	"slices"

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
//   - uuid[] from []pgtype.UUID (partition ids);
//   - bytea[] from [][]byte, grown once to its exact size;
//   - bytea[] from segmentBodies: every partition's segment body is encoded
//     (EncodeSegment's layout) straight into pgx's parameter buffer, so a
//     payload is copied once on its way from the WAL record into the bind
//     message, not into a body of its own first; and pgx's parameter
//     buffer, which restarts at 256 bytes for every statement, is first
//     moved into a buffer of the connection's own, kept from batch to batch
//     (up to wbufKeepMax, as the connection's write buffer: pg/wbuf.go).
//
// The bytes are PostgreSQL's binary array format exactly as pgx writes it
// (one dimension, lower bound 1, the has-null flag; a nil slice is NULL),
// which TestFastArrayCodecsMatchPgx checks byte for byte against pgx.
// registerFastArrays installs them on each new pool connection
// (Store.Open's AfterConnect); a connection without them still encodes
// every one of these values correctly through pgx (segmentBodies is also a
// pgtype.ArrayGetter), only more slowly.

// registerFastArrays replaces the codecs of bigint[], uuid[] and bytea[] in
// m (a connection's type map) by fastArrayCodec wrappers of pgx's own,
// with one kept parameter buffer for the connection.
func registerFastArrays(m *pgtype.Map) {
	kept := newKeptBuffer()
	for _, oid := range []uint32{pgtype.Int8ArrayOID, pgtype.UUIDArrayOID, pgtype.ByteaArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		ac, ok := t.Codec.(*pgtype.ArrayCodec)
		if !ok {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: &fastArrayCodec{ArrayCodec: ac, kept: kept}})
	}
}

// fastArrayCodec is pgx's ArrayCodec with the binary encode plans of the
// shapes above in front.
type fastArrayCodec struct {
	*pgtype.ArrayCodec
	// kept is the connection's parameter buffer for segment bodies: used
	// only by that connection's type map, one statement at a time, and
	// only through encodeSegmentBodies, which never writes below the
	// parameters already in pgx's buffer.
	kept *keptBuffer
}

// PlanEncode implements pgtype.Codec.
func (c *fastArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch c.ElementType.OID {
		case pgtype.Int8OID:
			if _, ok := value.([]int64); ok {
				return encodeInt8Array{}
			}
		case pgtype.UUIDOID:
			if _, ok := value.([]pgtype.UUID); ok {
				return encodeUUIDArray{}
			}
		case pgtype.ByteaOID:
			switch value.(type) {
			case [][]byte:
				return encodeByteaArray{}
			case segmentBodies:
				return encodeSegmentBodies{kept: c.kept}
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
	a := value.([]int64)
	if a == nil {
		return nil, nil
	}
	buf = slices.Grow(buf, arrayHeaderLen+12*len(a))
	buf = appendArrayHeader(buf, pgtype.Int8OID, len(a), false)
	for _, v := range a {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(v))
	}
	return buf, nil
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

// segmentBodies is a bytea[] parameter whose i-th element is the segment
// body (EncodeSegment) of the messages [i], encoded when the parameter is.
// The messages' strings and payloads must stay unchanged until the batch
// holding the parameter is sent.
type segmentBodies [][]Message

// encodeSegmentBodies is the plan of segmentBodies; kept (nil: none) is
// the connection's parameter buffer (fastArrayCodec).
type encodeSegmentBodies struct{ kept *keptBuffer }

func (e encodeSegmentBodies) Encode(value any, buf []byte) ([]byte, error) {
	segs := value.(segmentBodies)
	if segs == nil {
		return nil, nil
	}
	n := arrayHeaderLen
	for _, msgs := range segs {
		n += 4 + SegmentLen(msgs)
	}
	if e.kept != nil {
		buf = reserve(buf, n, e.kept)
	}
	buf = slices.Grow(buf, n)
	buf = appendArrayHeader(buf, pgtype.ByteaOID, len(segs), false)
	for _, msgs := range segs {
		at := len(buf)
		buf = encodeSegmentGrown(append(buf, 0, 0, 0, 0), msgs)
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	return buf, nil
}

// Dimensions, Index and IndexType make segmentBodies a pgtype.ArrayGetter,
// so that a type map without registerFastArrays encodes it too (each body
// built on its own by EncodeSegment).
func (s segmentBodies) Dimensions() []pgtype.ArrayDimension {
	if s == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(s)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter: segment i's body.
func (s segmentBodies) Index(i int) any { return EncodeSegment(nil, s[i]) }

// IndexType implements pgtype.ArrayGetter.
func (s segmentBodies) IndexType() any { return []byte(nil) }
