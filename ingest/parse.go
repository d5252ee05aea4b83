package ingest

import (
	"bytes"
	"fmt"
	"unicode"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
)

// Limits of the push body (DESIGN.md §3).
const (
	// MaxNameBytes is the longest queue or partition name, in bytes.
	MaxNameBytes = 255
	// MaxTransactionIDBytes is the longest transactionId, in bytes.
	MaxTransactionIDBytes = 1024
	// MaxDepth is the deepest JSON nesting accepted anywhere in a body
	// (arrays and objects). Deeper bodies are refused with 400 so that no
	// decoder ever recurses without bound.
	MaxDepth = 512
	// DefaultMaxPushItems is the default most items one push may carry
	// (QUEEN_MAX_PUSH_ITEMS; README.md, "Push limits").
	DefaultMaxPushItems = 100_000
	// DefaultPartition is the partition of an item that names none
	// (spec/producing.md).
	DefaultPartition = "Default"
)

// ValidationError is a client mistake in a push body; the HTTP layer
// answers it with 400 and its message as {"error": ...}.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func bad(format string, a ...any) error { return &ValidationError{Msg: fmt.Sprintf(format, a...)} }

// ParsedItem is one item as read from the body, before ids are minted.
type ParsedItem struct {
	Queue     string
	Partition string
	// TransactionID is "" when absent, null or "" in the body.
	TransactionID string
	// Payload aliases the body.
	Payload []byte
	// TraceID is set only by ParseTransactionItems (spec/producing.md:
	// traceId is read only inside /api/v1/transaction).
	TraceID *uuid.UUID
}

// ParseBody validates a push body and returns its items in body order.
//
// Rules (spec/producing.md, DESIGN.md §3): the body is a JSON object with an
// array "items"; each item is an object with a non-empty string "queue" and
// a "payload" (any JSON value, kept byte-for-byte); "partition", when
// present, is a non-empty string; "transactionId", when present, is a
// string or null, at most 1 KiB. Keys match exactly (no case folding);
// unknown keys are ignored; where a key repeats, the last one counts (as in
// encoding/json). Names are 1..255 bytes of UTF-8 without control
// characters. Any violation returns a *ValidationError and no items: the
// request is all-or-nothing.
func ParseBody(body []byte) (items []ParsedItem, err error) { return ParseBodyLimit(body, 0) }

// ParseBodyLimit is ParseBody refusing, with a *ValidationError and before
// any item is decoded, a body of more than maxItems items (0 = no limit;
// QUEEN_MAX_PUSH_ITEMS).
func ParseBodyLimit(body []byte, maxItems int) (items []ParsedItem, err error) {
	defer func() {
		if r := recover(); r != nil { // a decoder bug must not take the broker down
			items, err = nil, bad("malformed JSON")
		}
	}()
	trimmed := bytes.TrimSpace(body)
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
		if !json.Valid(trimmed) {
			return nil, bad("malformed JSON")
		}
		return nil, bad("body must be a JSON object with an \"items\" array")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return nil, bad("malformed JSON: %s", jsonErr(err))
	}
	rawItems, ok := top["items"]
	if !ok {
		return nil, bad("\"items\" is required")
	}
	return parseItems(rawItems, false, maxItems)
}

// parseItems validates an "items" array (allowTrace: a transaction's, whose
// items may carry traceId). An empty array gives an empty, non-nil slice.
func parseItems(raw json.RawMessage, allowTrace bool, maxItems int) ([]ParsedItem, error) {
	if kind(raw) != '[' {
		return nil, bad("\"items\" must be an array")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, bad("malformed JSON: %s", jsonErr(err))
	}
	if maxItems > 0 && len(elems) > maxItems {
		return nil, bad("the push has %d items; at most %d are accepted per request (QUEEN_MAX_PUSH_ITEMS)", len(elems), maxItems)
	}
	items := make([]ParsedItem, 0, len(elems))
	for i, e := range elems {
		it, err := parseItem(i, e, allowTrace)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// ParseTransactionItems validates the "items" array of a push operation of
// POST /api/v1/transaction: the rules of ParseBody, plus "traceId", when
// present and not null, must be a UUID string. Errors are
// *ValidationError.
func ParseTransactionItems(raw []byte) (items []ParsedItem, err error) {
	defer func() {
		if r := recover(); r != nil {
			items, err = nil, bad("malformed JSON")
		}
	}()
	return parseItems(raw, true, 0)
}

func parseItem(i int, raw json.RawMessage, allowTrace bool) (ParsedItem, error) {
	var it ParsedItem
	if kind(raw) != '{' {
		return it, bad("items[%d] must be an object", i)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return it, bad("items[%d]: malformed JSON: %s", i, jsonErr(err))
	}
	q, ok := fields["queue"]
	if !ok {
		return it, bad("items[%d].queue is required", i)
	}
	name, err := nameField(q)
	if err != nil {
		return it, bad("items[%d].queue %s", i, err)
	}
	it.Queue = name
	payload, ok := fields["payload"]
	if !ok {
		return it, bad("items[%d].payload is required", i)
	}
	it.Payload = bytes.TrimSpace(payload)
	it.Partition = DefaultPartition
	if p, ok := fields["partition"]; ok {
		name, err := nameField(p)
		if err != nil {
			return it, bad("items[%d].partition %s", i, err)
		}
		it.Partition = name
	}
	if t, ok := fields["traceId"]; ok && allowTrace && kind(t) != 'n' {
		var str string
		if kind(t) != '"' || json.Unmarshal(t, &str) != nil {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		id, err := uuid.Parse(str)
		if err != nil {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		it.TraceID = &id
	}
	if t, ok := fields["transactionId"]; ok {
		switch kind(t) {
		case 'n':
			if string(bytes.TrimSpace(t)) != "null" {
				return it, bad("items[%d].transactionId must be a string or null", i)
			}
		case '"':
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return it, bad("items[%d].transactionId: malformed string", i)
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

// nameField decodes a queue or partition name and checks it (DESIGN.md §3:
// byte-exact UTF-8, 1..255 bytes, no control characters).
func nameField(raw json.RawMessage) (string, error) {
	if kind(raw) != '"' {
		return "", fmt.Errorf("must be a non-empty string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("is a malformed string")
	}
	if err := ValidateName(s); err != nil {
		return "", err
	}
	return s, nil
}

// ValidateName checks a queue, partition or consumer group name: 1..255
// bytes of valid UTF-8 with no control characters. Names are never trimmed
// or case-folded.
func ValidateName(s string) error {
	if s == "" {
		return fmt.Errorf("must be a non-empty string")
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("is longer than %d bytes", MaxNameBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains a control character")
		}
	}
	return nil
}

// kind returns the first non-space byte of a JSON value ('n' for null,
// 't'/'f' for booleans, '-' or a digit for numbers), or 0 when empty.
func kind(raw []byte) byte {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return 0
	}
	return t[0]
}

// JSONDepth returns the deepest nesting of arrays and objects in the JSON
// text b without recursion, and false when brackets do not balance. Callers
// compare it with MaxDepth before decoding untrusted JSON.
func JSONDepth(b []byte) (int, bool) {
	depth, max := 0, 0
	inStr, esc := false, false
	for _, c := range b {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '[', '{':
			depth++
			if depth > max {
				max = depth
			}
		case ']', '}':
			depth--
			if depth < 0 {
				return max, false
			}
		}
	}
	return max, depth == 0 && !inStr
}

// jsonErr shortens decoder errors to one line without echoing the body.
func jsonErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
