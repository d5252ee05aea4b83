package ingest

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// scanner validates JSON text (RFC 8259, UTF-8) in one pass and reports
// the spans of the values it is asked for. It never allocates for values
// it only validates: payloads are recorded as [start, end) offsets into
// the body and later sliced, never copied or decoded.
//
// The first syntax error sticks in err (a *ValidationError); every method
// returns at once after it.
type scanner struct {
	b     []byte
	pos   int
	depth int
	err   error
}

func (s *scanner) fail(what string) {
	if s.err == nil {
		s.err = bad("malformed JSON: %s at offset %d", what, s.pos)
	}
}

func (s *scanner) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek is the next non-space byte, 0 at the end.
func (s *scanner) peek() byte {
	// Most tokens follow the one before without spaces (no client
	// pretty-prints a push body): one comparison instead of ws's loop.
	if s.pos < len(s.b) && s.b[s.pos] > ' ' {
		return s.b[s.pos]
	}
	s.ws()
	if s.pos >= len(s.b) {
		return 0
	}
	return s.b[s.pos]
}

// finish fails unless only spaces follow the value just read (a body is
// one JSON value); after an error it does nothing. It tests the position,
// not peek: peek's 0 at the end is also a NUL byte of the body.
func (s *scanner) finish() {
	if s.err != nil {
		return
	}
	if s.ws(); s.pos < len(s.b) {
		s.fail("trailing data after the JSON value")
	}
}

// expect consumes c (after spaces) or fails.
func (s *scanner) expect(c byte, what string) bool {
	if s.peek() != c {
		s.fail(what)
		return false
	}
	s.pos++
	return true
}

// value validates one JSON value of any kind and returns its span.
func (s *scanner) value() (start, end int) {
	c := s.peek()
	start = s.pos
	switch {
	case c == '"':
		s.str()
	case c == '{':
		s.enter()
		s.pos++
		if s.peek() == '}' {
			s.pos++
		} else {
			for s.err == nil {
				if s.peek() != '"' {
					s.fail("expected an object key")
					break
				}
				s.str()
				if !s.expect(':', "expected ':' after an object key") {
					break
				}
				s.value()
				if s.peek() == ',' {
					s.pos++
					continue
				}
				s.expect('}', "expected ',' or '}' in an object")
				break
			}
		}
		s.depth--
	case c == '[':
		s.enter()
		s.pos++
		if s.peek() == ']' {
			s.pos++
		} else {
			for s.err == nil {
				s.value()
				if s.peek() == ',' {
					s.pos++
					continue
				}
				s.expect(']', "expected ',' or ']' in an array")
				break
			}
		}
		s.depth--
	case c == '-' || (c >= '0' && c <= '9'):
		s.number()
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	case c == 0:
		s.fail("unexpected end of input")
	default:
		s.fail(fmt.Sprintf("unexpected character %q", c))
	}
	return start, s.pos
}

// enter counts one level of nesting: bodies deeper than MaxDepth are
// refused so that nothing recurses without bound.
func (s *scanner) enter() {
	s.depth++
	if s.depth > MaxDepth && s.err == nil {
		s.err = bad("JSON nested deeper than %d levels", MaxDepth)
	}
}

func (s *scanner) literal(lit string) {
	if len(s.b)-s.pos < len(lit) || string(s.b[s.pos:s.pos+len(lit)]) != lit {
		s.fail("invalid literal")
		return
	}
	s.pos += len(lit)
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() {
	if s.b[s.pos] == '-' {
		s.pos++
	}
	if s.pos < len(s.b) && s.b[s.pos] == '0' {
		s.pos++
	} else if s.digits() == 0 {
		s.fail("invalid number")
		return
	}
	if s.pos < len(s.b) && s.b[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			s.fail("invalid number")
			return
		}
	}
	if s.pos < len(s.b) && (s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.b) && (s.b[s.pos] == '+' || s.b[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			s.fail("invalid number")
		}
	}
}

// str validates a string starting at s.pos (a '"') and returns whether it
// holds escapes. Bytes of 0x80 and above must form valid UTF-8.
func (s *scanner) str() (escaped bool) {
	b := s.b
	i := s.pos + 1
	for {
		i = skipPlain(b, i)
		if i >= len(b) {
			s.pos = i
			s.fail("unterminated string")
			return escaped
		}
		c := b[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				s.pos = i
				s.fail("unterminated string")
				return escaped
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
					s.pos = i
					s.fail("invalid \\u escape")
					return escaped
				}
				i += 6
			default:
				s.pos = i
				s.fail("invalid escape")
				return escaped
			}
		case c < 0x20:
			s.pos = i
			s.fail("control character in string")
			return escaped
		default: // 0x80 and above (skipPlain stops at nothing else)
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				s.pos = i
				if s.err == nil {
					s.err = bad("request body is not valid UTF-8")
				}
				return escaped
			}
			i += n
		}
	}
}

// skipPlain returns the index of the first byte of b at or after i that
// is '"', '\\', a control character or at least 0x80 (len(b) when there
// is none): the plain bytes of a string, its bulk, are skipped eight at a
// time, where a run is long in blocks of 32 (four words tested
// independently run about twice as fast as one per step), and a word that
// holds a special byte gives its position at once (the lowest byte special
// flags is the first special one: see special), so the bytes before it are
// not looked at again one by one.
func skipPlain(b []byte, i int) int {
	for len(b)-i >= 8 {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
		for len(b)-i >= 32 {
			c := b[i : i+32 : i+32]
			if special(binary.LittleEndian.Uint64(c[0:]))|special(binary.LittleEndian.Uint64(c[8:]))|
				special(binary.LittleEndian.Uint64(c[16:]))|special(binary.LittleEndian.Uint64(c[24:])) != 0 {
				break // the word loop finds the byte
			}
			i += 32
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// special is not zero when a byte of w is '"', '\\', below 0x20 or at
// least 0x80 (SWAR: Hacker's Delight "has zero byte" and "has less"). It
// may also be non-zero for a word without such a byte, but only for one
// that also has such a byte below it (a borrow out of it) or a byte of
// 0x80 and above (which the w term flags anyway): the high bit of byte k
// of x-lo8 (x = w xor '"' or '\\' in every byte) is set only when byte k
// of x is 0, is at least 0x81, or a borrow came from byte k-1 (whose x
// was 0); of w-0x20 in every byte, only when byte k is below 0x20, at
// least 0xA0, or borrowed from (byte k-1 below 0x20). So a zero result
// means no special byte, and the lowest byte flagged is always a special
// one (no borrow reaches it: bytes below it are neither 0 after the xor
// nor below 0x20), the first of the word's special bytes.
func special(w uint64) uint64 {
	// (Go's | binds as loosely as -: every difference is parenthesized.)
	quote, back, ctl := (w^(lo8*'"'))-lo8, (w^(lo8*'\\'))-lo8, w-lo8*0x20
	return (quote | back | ctl | w) & hi8
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func hexVal(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// appendUnescaped appends the text of the valid JSON string literal lit
// (with its quotes) to dst. As encoding/json does, an escaped lone
// surrogate becomes U+FFFD (names and transactionIds with one are refused
// before they are unescaped: surrogate.go).
func appendUnescaped(dst, lit []byte) []byte {
	b := lit[1 : len(lit)-1]
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			j := i + 1
			for j < len(b) && b[j] != '\\' {
				j++
			}
			dst = append(dst, b[i:j]...)
			i = j
			continue
		}
		e := b[i+1]
		i += 2
		switch e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hexVal(b[i:])
			i += 4
			if r >= 0xD800 && r < 0xDC00 && i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
				if r2 := hexVal(b[i+2:]); r2 >= 0xDC00 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					i += 6
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
	}
	return dst
}
