package binenc

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestVarintLens: UvarintLen and VarintLen are the lengths binary's
// encoders produce, at every length boundary.
func TestVarintLens(t *testing.T) {
	var b [binary.MaxVarintLen64]byte
	for _, x := range []uint64{0, 1, 127, 128, 16383, 16384, 1<<35 - 1, 1 << 35, 1<<63 - 1, math.MaxUint64} {
		if got, want := UvarintLen(x), binary.PutUvarint(b[:], x); got != want {
			t.Errorf("UvarintLen(%d) = %d, want %d", x, got, want)
		}
		s := int64(x)
		if got, want := VarintLen(s), binary.PutVarint(b[:], s); got != want {
			t.Errorf("VarintLen(%d) = %d, want %d", s, got, want)
		}
	}
}
