package ingest

import (
	"encoding/binary"
	stdjson "encoding/json"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// isSpecialByte is the byte-by-byte rule special tests eight bytes at a
// time: '"', '\\', a control character or a byte of 0x80 and above.
func isSpecialByte(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }

// firstSpecial is the index of w's first special byte in memory order
// (little-endian), 8 when none is.
func firstSpecial(w uint64) int {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	for i, c := range b {
		if isSpecialByte(c) {
			return i
		}
	}
	return 8
}

// TestSpecialIsExact: special(w) is zero exactly when no byte of w is
// special (str skips words on it: a false zero would let a quote, an
// escape, a control character or invalid UTF-8 through), and otherwise
// its lowest flagged byte is w's first special byte (skipPlain jumps to
// it), for every byte
// value at every position among plain bytes, every pair of byte values in
// adjacent positions (borrows run from one byte into the next), and
// random words.
func TestSpecialIsExact(t *testing.T) {
	t.Parallel()
	base := binary.LittleEndian.Uint64([]byte("xxxxxxxx"))
	check := func(w uint64) {
		got := 8
		if m := special(w); m != 0 {
			got = bits.TrailingZeros64(m) / 8
		}
		if want := firstSpecial(w); got != want {
			t.Fatalf("special(%#016x) flags byte %d first, want %d (8: none)", w, got, want)
		}
	}
	for k := 0; k < 8; k++ {
		for c := 0; c < 256; c++ {
			w := base&^(0xff<<(8*k)) | uint64(c)<<(8*k)
			check(w)
			if k < 7 {
				for d := 0; d < 256; d++ {
					check(w&^(0xff<<(8*(k+1))) | uint64(d)<<(8*(k+1)))
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		check(r.Uint64())
		// Mostly printable ASCII, as payloads are.
		var b [8]byte
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x60))
		}
		check(binary.LittleEndian.Uint64(b[:]))
	}
}

// TestStrFindsSpecialAtEveryOffset: a string of plain bytes with one
// special byte at any offset (inside a 32-byte block, the 8-byte tail or
// the last bytes) is read as the byte-by-byte rules say: a quote ends it,
// a backslash starts an escape, a control character or a bad UTF-8 byte
// is refused.
func TestStrFindsSpecialAtEveryOffset(t *testing.T) {
	t.Parallel()
	for n := 0; n < 100; n++ {
		for at := 0; at < n; at++ {
			for _, c := range []byte{'"', '\\', 0x01, 0x1f, 0xff} {
				text := []byte(strings.Repeat("x", n))
				text[at] = c
				lit := append(append([]byte{'"'}, text...), '"')
				s := scanner{b: lit}
				esc := s.str()
				switch c {
				case '"':
					if s.err != nil || s.pos != at+2 || esc {
						t.Fatalf("n=%d at=%d quote: pos %d, esc %v, err %v", n, at, s.pos, esc, s.err)
					}
				case '\\':
					// `\x` is an invalid escape; a backslash right before the
					// closing quote escapes it (unterminated).
					if s.err == nil || !esc {
						t.Fatalf("n=%d at=%d backslash: esc %v, err %v", n, at, esc, s.err)
					}
				default:
					if s.err == nil || s.pos != at+1 {
						t.Fatalf("n=%d at=%d byte %#x: pos %d, err %v", n, at, c, s.pos, s.err)
					}
				}
			}
		}
		s := scanner{b: []byte(`"` + strings.Repeat("x", n) + `"`)}
		if s.str(); s.err != nil || s.pos != n+2 {
			t.Fatalf("n=%d plain: pos %d, err %v", n, s.pos, s.err)
		}
	}
}

// BenchmarkScanString: the scanner over one string of 226 plain bytes
// (the pad of queen-bench's 256-byte payload).
func BenchmarkScanString(b *testing.B) {
	lit := []byte(`"` + strings.Repeat("x", 226) + `"`)
	b.SetBytes(int64(len(lit)))
	for b.Loop() {
		s := scanner{b: lit}
		s.str()
		if s.err != nil || s.pos != len(lit) {
			b.Fatal(s.err)
		}
	}
}

// refStr is str byte by byte (the rules without skipPlain's words): the
// position after the string (or of the error), whether it held escapes,
// and whether it was accepted.
func refStr(b []byte, pos int) (end int, escaped, ok bool) {
	i := pos + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return i, escaped, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
					return i, escaped, false
				}
				i += 6
			default:
				return i, escaped, false
			}
		case c < 0x20:
			return i, escaped, false
		case c < 0x80:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return i, escaped, false
			}
			i += n
		}
	}
	return i, escaped, false
}

// TestStrBoundaryTokens: escapes (`\"`, `\\` before the closing quote,
// `\u` with lone surrogates), control bytes, valid and invalid UTF-8
// (truncated, overlong, encoded surrogates) and DEL placed at every offset
// across the 8- and 32-byte steps of skipPlain, followed by plain bytes up
// to and past the next boundaries, the string closed, left unterminated
// at the end of the buffer (which then ends at every boundary), or
// followed by more JSON, are read exactly as byte by byte: same end,
// escape flag and verdict, and a string closed at the end of its buffer
// is read whole exactly when encoding/json finds it valid and it is UTF-8.
func TestStrBoundaryTokens(t *testing.T) {
	t.Parallel()
	tokens := []string{
		``, `\"`, `\\`, `\\\"`, `\\\\`, `\`, `\u`, `\u12`, `\u00e9`, `\ud800`, `\udc00`, `\ud83d\ude00`, `\ud83d`,
		`\/`, `\x`, "\x00", "\x1f", "\x7f", " ", "é", "€", "😀", "\xe2\x82", "\xe2", "\xf0\x9f\x98", "\xc0\xaf",
		"\xed\xa0\x80", "\xff", "\x80", "é\"", `"`, `\"\"`, "\t",
	}
	tails := []string{`"`, ``, `",1]`, `\`, `\"`, "é"}
	for _, tok := range tokens {
		for pre := 0; pre <= 72; pre++ {
			for post := 0; post <= 40; post++ {
				for _, tail := range tails {
					lit := []byte(`"` + strings.Repeat("a", pre) + tok + strings.Repeat("b", post) + tail)
					// The literal ends its buffer: no capacity past it.
					lit = lit[:len(lit):len(lit)]
					s := scanner{b: lit}
					esc := s.str()
					end, wantEsc, ok := refStr(lit, 0)
					if s.pos != end || esc != wantEsc || (s.err == nil) != ok {
						t.Fatalf("%q: str pos %d esc %v err %v; byte by byte pos %d esc %v ok %v",
							lit, s.pos, esc, s.err, end, wantEsc, ok)
					}
					if tail == `"` {
						// Closed at the end of the buffer: accepted whole
						// exactly when it is one valid JSON string of UTF-8.
						want := stdjson.Valid(lit) && utf8.Valid(lit)
						if got := ok && end == len(lit); got != want {
							t.Fatalf("%q: str reads it whole %v, encoding/json and utf8 say %v", lit, got, want)
						}
					}
				}
			}
		}
	}
}
