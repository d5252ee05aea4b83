package ingest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
)

// refParseBody is the push body parser this package used before the
// single-pass scanner (goccy/go-json decoding into maps of raw values),
// kept as the oracle that FuzzParseBodyMatchesReference compares ParseBody
// (and ParseBodyLimit) with: same items for every body both accept. The
// item limit (maxItems > 0) is checked on the decoded array's length before
// any item rule, as ParseBodyLimit documents.
func refParseBody(body []byte, maxItems int) (items []ParsedItem, err error) {
	defer func() {
		if r := recover(); r != nil {
			items, err = nil, bad("malformed JSON")
		}
	}()
	trimmed := trimJSONSpace(body)
	if len(trimmed) == 0 {
		return nil, bad("empty request body")
	}
	if !utf8.Valid(body) {
		return nil, bad("request body is not valid UTF-8")
	}
	if d, ok := JSONDepth(body); !ok {
		return nil, bad("malformed JSON")
	} else if d > MaxDepth {
		return nil, bad("JSON nested deeper than %d levels", MaxDepth)
	}
	if trimmed[0] != '{' {
		return nil, bad("body must be a JSON object with an \"items\" array")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return nil, bad("malformed JSON")
	}
	rawItems, ok := top["items"]
	if !ok {
		return nil, bad("\"items\" is required")
	}
	return refParseItems(rawItems, false, maxItems)
}

func refParseItems(raw json.RawMessage, allowTrace bool, maxItems int) ([]ParsedItem, error) {
	if refKind(raw) != '[' {
		return nil, bad("\"items\" must be an array")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, bad("malformed JSON")
	}
	if maxItems > 0 && len(elems) > maxItems {
		return nil, bad("the push has %d items; at most %d are accepted per request (QUEEN_MAX_PUSH_ITEMS)", len(elems), maxItems)
	}
	items := make([]ParsedItem, 0, len(elems))
	for i, e := range elems {
		it, err := refParseItem(i, e, allowTrace)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func refParseItem(i int, raw json.RawMessage, allowTrace bool) (ParsedItem, error) {
	var it ParsedItem
	if refKind(raw) != '{' {
		return it, bad("items[%d] must be an object", i)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return it, bad("items[%d]: malformed JSON", i)
	}
	q, ok := fields["queue"]
	if !ok {
		return it, bad("items[%d].queue is required", i)
	}
	name, err := refNameField(q)
	if err != nil {
		return it, bad("items[%d].queue %s", i, err)
	}
	it.Queue = name
	payload, ok := fields["payload"]
	if !ok {
		return it, bad("items[%d].payload is required", i)
	}
	it.Payload = trimJSONSpace(payload)
	it.Partition = DefaultPartition
	if p, ok := fields["partition"]; ok {
		name, err := refNameField(p)
		if err != nil {
			return it, bad("items[%d].partition %s", i, err)
		}
		it.Partition = name
	}
	if t, ok := fields["traceId"]; ok && allowTrace && refKind(t) != 'n' {
		var str string
		if refKind(t) != '"' || json.Unmarshal(t, &str) != nil {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		id, err := uuid.Parse(str)
		if err != nil {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		it.TraceID = &id
	}
	if t, ok := fields["transactionId"]; ok {
		switch refKind(t) {
		case 'n':
		case '"':
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return it, bad("items[%d].transactionId: malformed string", i)
			}
			if loneSurrogate(t) {
				return it, bad("items[%d].transactionId %v", i, ErrLoneSurrogate)
			}
			if len(s) > MaxTransactionIDBytes {
				return it, bad("items[%d].transactionId is longer than %d bytes", i, MaxTransactionIDBytes)
			}
			if !utf8.ValidString(s) {
				return it, bad("items[%d].transactionId is not valid UTF-8", i)
			}
			it.TransactionID = s
		default:
			return it, bad("items[%d].transactionId must be a string or null", i)
		}
	}
	return it, nil
}

func refNameField(raw json.RawMessage) (string, error) {
	if refKind(raw) != '"' {
		return "", bad("must be a non-empty string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", bad("is a malformed string")
	}
	if loneSurrogate(raw) {
		return "", ErrLoneSurrogate
	}
	if err := ValidateName(s); err != nil {
		return "", err
	}
	return s, nil
}

func refKind(raw []byte) byte {
	t := trimJSONSpace(raw)
	if len(t) == 0 {
		return 0
	}
	return t[0]
}

// FuzzParseBodyMatchesReference: the single-pass parser accepts exactly
// the bodies the decoder-based one accepted, with the same items, and
// refuses the others with a *ValidationError; with an item limit (maxItems
// 1..3) too, a body over the limit refused by both with the same message.
func FuzzParseBodyMatchesReference(f *testing.F) {
	for i, s := range fuzzBodies {
		f.Add([]byte(s), uint8(i))
	}
	f.Add([]byte(`{"items":[{"queue":"q","payload":1},{"queue":"","payload":2},3]}`), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, limit uint8) {
		maxItems := int(limit % 4) // 0 = no limit
		got, err := ParseBodyLimit(body, maxItems)
		want, werr := refParseBody(body, maxItems)
		if (err == nil) != (werr == nil) {
			t.Fatalf("body %q, limit %d: ParseBodyLimit error %v, reference error %v", body, maxItems, err, werr)
		}
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ParseBody: error %v (%T) is not a *ValidationError", err, err)
			}
			overErr := strings.Contains(err.Error(), "QUEEN_MAX_PUSH_ITEMS")
			if overRef := strings.Contains(werr.Error(), "QUEEN_MAX_PUSH_ITEMS"); (overErr || overRef) && err.Error() != werr.Error() {
				t.Fatalf("body %q, limit %d: ParseBodyLimit error %q, reference %q", body, maxItems, err, werr)
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("body %q: %d items, reference %d", body, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Queue != w.Queue || g.Partition != w.Partition || g.TransactionID != w.TransactionID ||
				!bytes.Equal(g.Payload, w.Payload) || (g.TraceID == nil) != (w.TraceID == nil) {
				t.Fatalf("body %q: items[%d] = %+v, reference %+v", body, i, g, w)
			}
		}
	})
}

// trimJSONSpace trims the four whitespace bytes of RFC 8259 (space, tab,
// line feed, carriage return) from both ends of b; bytes.TrimSpace would
// also trim \f, \v and Unicode spaces, which JSON does not allow.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\n\r")
}

// TestParseBodyBoundaryTokensMatchReference: a string holding an escape
// (`\"`, a `\\` right before its closing quote, `\u` lone surrogates), a
// control byte, DEL, or valid or invalid UTF-8 at offsets around
// skipPlain's 8- and 32-byte steps, as a queue name, transactionId or
// payload, and a body that ends inside such a string, are accepted or
// refused by ParseBody exactly as by the reference parser, with the same
// items.
func TestParseBodyBoundaryTokensMatchReference(t *testing.T) {
	t.Parallel()
	tokens := []string{`\"`, `\\`, `\\\\`, `\u00e9`, `\ud800`, `\udc00x`, `\ud83d\ude00`, "\x01", "\x7f", "é", "😀",
		"\xe2\x82", "\xed\xa0\x80", "\xff", `\`}
	shapes := []string{
		`{"items":[{"queue":"%s","payload":1}]}`,
		`{"items":[{"queue":"q","transactionId":"%s","payload":1}]}`,
		`{"items":[{"queue":"q","payload":"%s"},{"queue":"q","payload":2}]}`,
		`{"items":[{"queue":"q","payload":"%s`, // ends inside the string
	}
	for _, shape := range shapes {
		for _, tok := range tokens {
			for pre := 0; pre <= 40; pre++ {
				for _, post := range []int{0, 1, 7, 8, 9, 31, 32, 33} {
					s := strings.Repeat("a", pre) + tok + strings.Repeat("b", post)
					body := []byte(strings.Replace(shape, "%s", s, 1))
					body = body[:len(body):len(body)]
					got, err := ParseBody(body)
					want, werr := refParseBody(body, 0)
					if (err == nil) != (werr == nil) {
						t.Fatalf("body %q: ParseBody error %v, reference error %v", body, err, werr)
					}
					if len(got) != len(want) {
						t.Fatalf("body %q: %d items, reference %d", body, len(got), len(want))
					}
					for i := range got {
						g, w := got[i], want[i]
						if g.Queue != w.Queue || g.Partition != w.Partition || g.TransactionID != w.TransactionID ||
							!bytes.Equal(g.Payload, w.Payload) {
							t.Fatalf("body %q: items[%d] = %+v, reference %+v", body, i, g, w)
						}
					}
				}
			}
		}
	}
}
