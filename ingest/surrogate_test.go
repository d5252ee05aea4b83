package ingest

import (
	stdjson "encoding/json"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// refLoneSurrogate is the reference for loneSurrogate: the JSON string text
// s (no quotes) as UTF-16 code units, then a well-formedness check.
func refLoneSurrogate(s string) bool {
	var units []uint16
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) {
			if s[i+1] == 'u' && i+6 <= len(s) {
				r, ok := hex4([]byte(s[i+2 : i+6]))
				if !ok {
					return false
				}
				units = append(units, uint16(r))
				i += 6
				continue
			}
			units = append(units, uint16(s[i+1]))
			i += 2
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		units = utf16.AppendRune(units, r)
		i += n
	}
	for i := 0; i < len(units); i++ {
		switch u := units[i]; {
		case u >= 0xDC00 && u <= 0xDFFF:
			return true
		case u >= 0xD800 && u <= 0xDBFF:
			if i+1 >= len(units) || units[i+1] < 0xDC00 || units[i+1] > 0xDFFF {
				return true
			}
			i++
		}
	}
	return false
}

var surrogateCases = []struct {
	text string // JSON string text, without quotes
	lone bool
}{
	{``, false},
	{`plain`, false},
	{`t\ud800`, true},
	{`t\udfff`, true},
	{`sq\udbff`, true},
	{`\uD800`, true},
	{`\ud83d\ude00`, false}, // a pair: U+1F600
	{`\uD83D\uDE00`, false},
	{`\ud83d`, true},             // high at the end
	{`\ud83dx`, true},            // high then a plain character
	{`\ud83d\u0041`, true},       // high then a non-surrogate escape
	{`\ud83d\ud83d\ude00`, true}, // high, then a pair
	{`\ude00\ud83d`, true},       // low before high
	{`\\ud800`, false},           // an escaped backslash, then text
	{`\\\ud800`, true},           // an escaped backslash, then the escape
	{`\u00e9\u0000`, false},
	{`\n\t\"\/\ud7ff\ue000`, false}, // just outside the surrogate range
	{`é😀`, false},                   // raw UTF-8, no escapes
}

func TestLoneSurrogate(t *testing.T) {
	t.Parallel()
	for _, c := range surrogateCases {
		if got := loneSurrogate([]byte(`"` + c.text + `"`)); got != c.lone {
			t.Errorf("loneSurrogate(%q) = %v, want %v", c.text, got, c.lone)
		}
		if ref := refLoneSurrogate(c.text); ref != c.lone {
			t.Errorf("reference(%q) = %v, want %v (the table or the reference is wrong)", c.text, ref, c.lone)
		}
	}
}

// TestCaseLoneSurrogateNamesCollide: "t\ud800" and "t\udfff" decode to the
// same string, so they would be one transactionId; both are refused, in
// every name and id field, and the payload keeps its lone surrogate.
func TestCaseLoneSurrogateNamesCollide(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, want string
	}{
		{`{"items":[{"queue":"q","payload":1,"transactionId":"t\ud800"}]}`, `items[0].transactionId contains a lone surrogate`},
		{`{"items":[{"queue":"q","payload":1},{"queue":"q","payload":1,"transactionId":"t\udfff"}]}`, `items[1].transactionId contains a lone surrogate`},
		{`{"items":[{"queue":"sq\ud800","payload":1}]}`, `items[0].queue contains a lone surrogate`},
		{`{"items":[{"queue":"q","partition":"p\udbff","payload":1}]}`, `items[0].partition contains a lone surrogate`},
	} {
		_, err := ParseBody([]byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseBody(%s) = %v, want an error %q", c.body, err, c.want)
		}
	}
	items, err := ParseBody([]byte(`{"items":[{"queue":"q\ud83d\ude00","payload":"\ud800 \udfff","transactionId":"t\uD83D\uDE00"}]}`))
	if err != nil {
		t.Fatalf("pairs in names and lone surrogates in the payload: %v", err)
	}
	if it := items[0]; it.Queue != "q😀" || it.TransactionID != "t😀" || string(it.Payload) != `"\ud800 \udfff"` {
		t.Fatalf("item %+v: want queue q😀, transactionId t😀, payload kept byte for byte", it)
	}
	if _, err := ParseTransactionItems([]byte(`[{"queue":"q","payload":1,"transactionId":"\udc00"}]`), 0); err == nil ||
		!strings.Contains(err.Error(), "items[0].transactionId contains a lone surrogate") {
		t.Fatalf("ParseTransactionItems: %v, want the transactionId refused", err)
	}
}

func TestFindLoneSurrogate(t *testing.T) {
	t.Parallel()
	skip := []string{"payload", "data"}
	for _, c := range []struct {
		body, path string
		found      bool
	}{
		{`{"queue":"sq\ud800"}`, "queue", true},
		{`{"queue":"sq"}`, "", false},
		{`{"queue":"sq\ud83d\ude00"}`, "", false},
		{`{"consumerGroup":"g","acknowledgments":[{"transactionId":"a"},{"transactionId":"b\udfff"}]}`, "acknowledgments[1].transactionId", true},
		{`{"operations":[{"type":"push","items":[{"queue":"q","payload":{"x":"\ud800"}},{"queue":"r\ud800","payload":1}]}]}`, "operations[0].items[1].queue", true},
		{`{"operations":[{"type":"push","items":[{"queue":"q","payload":["\ud800",{"k\udc00":"\udc00"}]}]}]}`, "", false},
		{`{"transactionId":"t","data":{"note":"\ud800"},"eventType":"e\ud800"}`, "eventType", true},
		{`{"transactionId":"t","data":"\ud800"}`, "", false},
		{`{"options":{"k\ud800y":1}}`, "options.k\\ud800y", true},
		{`{"a":"\\ud800"}`, "", false},
		{`{"a":"x\"\ud800"}`, "a", true},
		{`{"traceNames":["a","b\ud800"]}`, "traceNames[1]", true},
		{`{"a":[[1,2],[3,"\ud800"]]}`, "a[1][1]", true},
		{`{"a":"\ud800`, "a", true}, // unclosed: still found, the decoder refuses it anyway
		{`]]}}{"a":"\ud800"}`, "a", true},
	} {
		path, found := FindLoneSurrogate([]byte(c.body), skip...)
		if path != c.path || found != c.found {
			t.Errorf("FindLoneSurrogate(%s) = %q, %v; want %q, %v", c.body, path, found, c.path, c.found)
		}
	}
}

// FuzzLoneSurrogate: loneSurrogate agrees with the UTF-16 reference on
// every valid JSON string; ParseBody refuses exactly those names with the
// lone-surrogate error while keeping them in payloads; FindLoneSurrogate
// finds them outside skipped members only.
func FuzzLoneSurrogate(f *testing.F) {
	for _, c := range surrogateCases {
		f.Add(c.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		tok := `"` + text + `"`
		if !stdjson.Valid([]byte(tok)) {
			return
		}
		want := refLoneSurrogate(text)
		if got := loneSurrogate([]byte(tok)); got != want {
			t.Fatalf("loneSurrogate(%s) = %v, reference says %v", tok, got, want)
		}
		if !utf8.ValidString(text) {
			return // refused as a whole body, before any field is looked at
		}
		_, err := ParseBody([]byte(`{"items":[{"queue":` + tok + `,"payload":` + tok + `}]}`))
		if want && (err == nil || !strings.Contains(err.Error(), "items[0].queue contains a lone surrogate")) {
			t.Fatalf("ParseBody with queue %s: %v, want the lone surrogate refused", tok, err)
		}
		if !want && err != nil && strings.Contains(err.Error(), "surrogate") {
			t.Fatalf("ParseBody with queue %s: %v, but it holds no lone surrogate", tok, err)
		}
		items, err := ParseBody([]byte(`{"items":[{"queue":"q","payload":` + tok + `}]}`))
		if err != nil || string(items[0].Payload) != tok {
			t.Fatalf("payload %s: %v %+v, want it accepted byte for byte", tok, err, items)
		}
		path, found := FindLoneSurrogate([]byte(`{"payload":`+tok+`,"a":[{"b":`+tok+`}]}`), "payload")
		if found != want || (want && path != "a[0].b") {
			t.Fatalf("FindLoneSurrogate with %s = %q, %v; want a[0].b, %v", tok, path, found, want)
		}
	})
}
