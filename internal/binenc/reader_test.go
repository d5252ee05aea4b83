package binenc

import (
	"encoding/binary"
	"testing"
)

// TestReaderVarintsMatchEncodingBinary: Uvarint and Varint (their one-byte
// fast path included) read what encoding/binary reads, consume the same
// bytes, and fail on the same short inputs.
func TestReaderVarintsMatchEncodingBinary(t *testing.T) {
	inputs := [][]byte{{}, {0x80}, {0xff, 0xff}}
	for a := 0; a < 256; a++ {
		inputs = append(inputs, []byte{byte(a)}, []byte{byte(a), 0x01}, []byte{byte(a), 0x7f, 0x05})
	}
	for _, in := range inputs {
		wantU, nU := binary.Uvarint(in)
		r := NewReader(in)
		if got := r.Uvarint(); (nU > 0) != (r.Err() == nil) || (nU > 0 && (got != wantU || r.Len() != len(in)-nU)) {
			t.Fatalf("Uvarint(%x) = %d, len %d, err %v; encoding/binary: %d, n %d", in, got, r.Len(), r.Err(), wantU, nU)
		}
		wantV, nV := binary.Varint(in)
		r = NewReader(in)
		if got := r.Varint(); (nV > 0) != (r.Err() == nil) || (nV > 0 && (got != wantV || r.Len() != len(in)-nV)) {
			t.Fatalf("Varint(%x) = %d, len %d, err %v; encoding/binary: %d, n %d", in, got, r.Len(), r.Err(), wantV, nV)
		}
	}
}
