package ingest

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Lone surrogates.
//
// JSON may spell a character as a \uXXXX escape, and one beyond U+FFFF as a
// pair of them, a high surrogate D800..DBFF then a low one DC00..DFFF
// (RFC 8259 §7). An escape in D800..DFFF outside such a pair encodes no
// character at all. Go's JSON decoders replace it with U+FFFD, so
// "t\ud800" and "t\udfff" would both decode to "t\uFFFD": two distinct
// transactionIds become one (a false duplicate), two queue names one queue.
// Raw bytes that are not UTF-8 are refused already (utf8.Valid); an escape
// is the only way such a name arrives, and it is refused too: in queue and
// partition names and transactionIds of a push (ParseBody,
// ParseTransactionItems), and in every string of the other JSON bodies
// outside their free-form values (FindLoneSurrogate). Payloads are kept byte
// for byte and may hold lone surrogates: the broker never decodes them.

// ErrLoneSurrogate is the reason given for a name or id with a lone
// surrogate escape; messages prefix it with the field.
var ErrLoneSurrogate = errors.New(`contains a lone surrogate escape (\uD800-\uDFFF not in a high-low pair)`)

// loneSurrogate reports whether the JSON string text s (a string token,
// quotes included or not) has an escape in D800..DFFF that is not a high
// surrogate immediately followed by an escaped low one. A malformed escape
// reports false: the decoder refuses the string.
func loneSurrogate(s []byte) bool {
	i := bytes.IndexByte(s, '\\')
	if i < 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if i >= len(s) || s[i] != 'u' {
			continue
		}
		r, ok := hex4(s[i+1:])
		if !ok {
			return false
		}
		i += 4 // at the last hex digit
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low surrogate with no high one before it
		case r >= 0xD800 && r <= 0xDBFF:
			rest := s[i+1:]
			if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
				return true
			}
			lo, ok := hex4(rest[2:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6 // the pair's low half
		}
	}
	return false
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// mayHoldSurrogate is a fast pre-check for FindLoneSurrogate: whether b
// has a "\u" followed by d or D and one of 8..f, the only way a surrogate
// escape starts (an escaped backslash before "ud8" makes it a false
// positive, which the full scan sorts out).
func mayHoldSurrogate(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+3 >= len(b) {
			return false
		}
		if c, d := b[i+2], b[i+3]; (c == 'd' || c == 'D') && strings.IndexByte("89abcdefABCDEF", d) >= 0 {
			return true
		}
		b = b[i+2:]
	}
}

// FindLoneSurrogate scans the JSON text body for a string, member name or
// value, with a lone surrogate escape (see loneSurrogate) and returns where
// the first one is, as a path: "queue", "acknowledgments[2].transactionId",
// "operations[0].items[1].queue". The values of members named in skip (at
// any depth: free-form data such as "payload" or "data") are not looked
// into. The scan only tokenises (it never decodes, allocates only for the
// path it returns, and runs on malformed JSON without failing: that is the
// decoder's to refuse); it costs one bytes.Index pass when body has no
// surrogate escape at all.
func FindLoneSurrogate(body []byte, skip ...string) (string, bool) {
	if !mayHoldSurrogate(body) {
		return "", false
	}
	type frame struct {
		array   bool
		index   int    // array: the current element
		key     []byte // object: the current member's name (raw)
		wantKey bool   // object: the next string is a member name
		skipped bool   // inside a skipped value
	}
	var stack []frame
	// skippedValue: is the value starting here inside a skipped member?
	skippedValue := func() bool {
		if len(stack) == 0 {
			return false
		}
		f := stack[len(stack)-1]
		return f.skipped || (!f.array && slices.Contains(skip, string(f.key)))
	}
	path := func(key []byte) string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.array:
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			case f.key != nil:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.Write(f.key)
			}
		}
		if key != nil {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.Write(key)
		}
		return b.String()
	}
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			stack = append(stack, frame{array: c == '[', wantKey: c == '{', skipped: skippedValue()})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].array {
					stack[n-1].index++
				} else {
					stack[n-1].wantKey = true
				}
			}
		case ':':
			if n := len(stack); n > 0 {
				stack[n-1].wantKey = false
			}
		case '"':
			end := stringEnd(body, i+1)
			tok := body[i+1 : end]
			i = end
			n := len(stack)
			isKey := n > 0 && !stack[n-1].array && stack[n-1].wantKey
			if isKey {
				stack[n-1].key = tok
				if !stack[n-1].skipped && loneSurrogate(tok) {
					stack[n-1].key = nil
					return path(tok), true
				}
				continue
			}
			if !skippedValue() && loneSurrogate(tok) {
				return path(nil), true
			}
		}
	}
	return "", false
}

// stringEnd returns the index of the quote closing the JSON string whose
// text starts at from, or len(b) when it is not closed.
func stringEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(b)
}
