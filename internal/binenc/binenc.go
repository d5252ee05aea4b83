// Package binenc holds the few length-prefixed binary helpers shared by the
// WAL push record (package ingest) and the packed segment body (package pg).
//
// Layout conventions: unsigned integers are uvarints, signed ones zig-zag
// varints, byte strings are a uvarint length followed by the bytes.
package binenc

import (
	"encoding/binary"
	"errors"
)

// ErrShort is returned by Reader methods when the input ends before the
// value it is decoding, or when a declared length exceeds what remains.
var ErrShort = errors.New("binenc: input too short")

// AppendUvarint appends x as a uvarint.
func AppendUvarint(dst []byte, x uint64) []byte { return binary.AppendUvarint(dst, x) }

// AppendVarint appends x as a zig-zag varint.
func AppendVarint(dst []byte, x int64) []byte { return binary.AppendVarint(dst, x) }

// AppendBytes appends len(b) as a uvarint, then b.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendString appends len(s) as a uvarint, then s.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Reader decodes values appended by the Append helpers. The first error
// sticks: later calls return zero values and Err reports it.
type Reader struct {
	b   []byte
	err error
}

// NewReader returns a Reader over b (not copied).
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes not yet consumed.
func (r *Reader) Len() int { return len(r.b) }

// Uvarint reads a uvarint. A one-byte value (below 0x80: every length
// and count of a short message) is read without the general loop.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) > 0 && r.b[0] < 0x80 {
		v := uint64(r.b[0])
		r.b = r.b[1:]
		return v
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a zig-zag varint (one-byte values as in Uvarint).
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) > 0 && r.b[0] < 0x80 {
		u := uint64(r.b[0])
		r.b = r.b[1:]
		return int64(u>>1) ^ -int64(u&1)
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = ErrShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Fixed reads exactly n bytes; the result aliases the input.
func (r *Reader) Fixed(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = ErrShort
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Bytes reads a length-prefixed byte string; the result aliases the input.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = ErrShort
		return nil
	}
	return r.Fixed(int(n))
}

// String reads a length-prefixed string (copied).
func (r *Reader) String() string { return string(r.Bytes()) }

// UvarintLen is the length in bytes of x encoded by binary.AppendUvarint
// (1 to 10).
func UvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// VarintLen is the length in bytes of x encoded by binary.AppendVarint
// (its zig-zag form).
func VarintLen(x int64) int { return UvarintLen(uint64(x<<1) ^ uint64(x>>63)) }
