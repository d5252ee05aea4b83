package binenc

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestIsUUIDText: true exactly for uuid.UUID.String's text of the id;
// false for another id's text, the uppercase or braced spellings, a text
// differing in any single byte, and other lengths.
func TestIsUUIDText(t *testing.T) {
	for range 100 {
		id := uuid.Must(uuid.NewV7())
		s := id.String()
		if !IsUUIDText(id, s) {
			t.Fatalf("%s: false for its own text", s)
		}
		if IsUUIDText(uuid.New(), s) || IsUUIDText(id, strings.ToUpper(s)) || IsUUIDText(id, "{"+s+"}") ||
			IsUUIDText(id, s[:35]) || IsUUIDText(id, s+"0") || IsUUIDText(id, "") {
			t.Fatalf("%s: true for another text", s)
		}
		for i := range s {
			b := []byte(s)
			b[i] ^= 1
			if IsUUIDText(id, string(b)) {
				t.Fatalf("%s: true with byte %d changed: %s", s, i, b)
			}
		}
	}
}

// TestPutUUIDText: the text is uuid.UUID.String's.
func TestPutUUIDText(t *testing.T) {
	for range 100 {
		id := uuid.New()
		var b [36]byte
		PutUUIDText(b[:], id)
		if string(b[:]) != id.String() {
			t.Fatalf("%s written as %s", id, b)
		}
	}
}
