package pg_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queenmq/queen-go/pg"
)

// TestDeadLetterError: an error text up to MaxDeadLetterError bytes is
// stored as it is; a longer one is cut at a UTF-8 boundary to at most
// that many bytes, ending with a marker that gives the original length.
func TestDeadLetterError(t *testing.T) {
	for _, in := range []string{"", "boom", strings.Repeat("x", pg.MaxDeadLetterError)} {
		if got := pg.DeadLetterError(in); got != in {
			t.Fatalf("%d bytes: changed to %d bytes", len(in), len(got))
		}
	}
	for _, in := range []string{
		strings.Repeat("x", pg.MaxDeadLetterError+1),
		strings.Repeat("é", 25<<20/2), // two bytes a rune: a cut can fall inside one
		strings.Repeat("€", 5000),     // three bytes a rune
	} {
		got := pg.DeadLetterError(in)
		if len(got) > pg.MaxDeadLetterError || !utf8.ValidString(got) {
			t.Fatalf("%d bytes in: %d bytes out, valid UTF-8 %v", len(in), len(got), utf8.ValidString(got))
		}
		want := " … (truncated from " + strconv.Itoa(len(in)) + " bytes)"
		if !strings.HasSuffix(got, want) || !strings.HasPrefix(in, strings.TrimSuffix(got, want)) {
			t.Fatalf("%d bytes in: %q… does not keep a prefix and end with %q", len(in), got[:20], want)
		}
		if len(got) < pg.MaxDeadLetterError-4 {
			t.Fatalf("%d bytes in: only %d bytes kept", len(in), len(got))
		}
	}
}
