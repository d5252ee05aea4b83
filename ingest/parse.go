package ingest

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits of the push body (docs/push.md, "Request" and "Answers").
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
	// (QUEEN_MAX_PUSH_ITEMS; docs/push.md, "Large pushes").
	DefaultMaxPushItems = 100_000
	// DefaultMaxPushPartitions is the default most distinct partitions
	// (queue and partition pairs) one push may name
	// (QUEEN_MAX_PUSH_PARTITIONS; docs/push.md, "Large pushes").
	DefaultMaxPushPartitions = 1000
	// MaxTransactionItems is the most push items one POST
	// /api/v1/transaction (over all its push operations) or one stream
	// cycle may carry. Those items are stored by the request's own
	// PostgreSQL transaction, which holds their partitions' row locks (and
	// the projector's pushes to them) until it commits, within the
	// database timeout: 300,000 items took 10 s and 560 MB of broker
	// memory and answered 503. Larger loads go through /api/v1/push and
	// its WAL.
	MaxTransactionItems = 10_000
	// DefaultPartition is the partition of an item that names none
	// (docs/push.md, "Request").
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
	// TraceID is set only by ParseTransactionItems (docs/push.md, "Request":
	// traceId is read only inside /api/v1/transaction).
	TraceID *uuid.UUID
}

// ParseBody validates a push body and returns its items in body order.
//
// Rules (docs/push.md, "Request" and "Answers"): the body is a JSON object
// with an array "items"; each item is an object with a non-empty string
// "queue" and a "payload" (any JSON value, kept byte-for-byte);
// "partition", when present, is a non-empty string; "transactionId", when
// present, is a string or null, at most 1 KiB. Keys match exactly after unescaping (no
// case folding); unknown keys are ignored; where a key repeats, the last
// one counts (as in encoding/json). Names are 1..255 bytes of UTF-8
// without control characters. The whole body must be valid JSON (RFC 8259,
// UTF-8, nested at most MaxDepth deep). Any violation returns a
// *ValidationError and no items: the request is all-or-nothing.
//
// The body is read in one pass (see scanner): payloads alias body, and a
// queue or partition name that repeats in the body is one string.
func ParseBody(body []byte) ([]ParsedItem, error) { return ParseBodyLimit(body, 0) }

// ParseBodyLimit is ParseBody refusing a body whose "items" array holds
// more than maxItems items (0 = no limit; QUEEN_MAX_PUSH_ITEMS) with a
// *ValidationError naming the count and the limit. The limit comes before
// the item rules: a longer push is refused whatever its items hold (only a
// syntax error of the body comes first), and the items past the limit are
// only checked for syntax, never decoded, so the work and memory a refused
// push costs are bounded by the limit.
func ParseBodyLimit(body []byte, maxItems int) ([]ParsedItem, error) {
	return parseBodyInto(nil, body, maxItems)
}

// parseBodyInto is ParseBodyLimit appending the items to dst[:0] (the
// push path's reused slice).
func parseBodyInto(dst []ParsedItem, body []byte, maxItems int) ([]ParsedItem, error) {
	p := itemParser{s: scanner{b: body}, maxItems: maxItems, dst: dst}
	s := &p.s
	switch s.peek() {
	case 0:
		return nil, bad("empty request body")
	case '{':
	default:
		s.value()
		s.finish()
		if s.err != nil {
			return nil, s.err
		}
		return nil, bad("body must be a JSON object with an \"items\" array")
	}
	s.enter()
	s.pos++
	var items []ParsedItem
	var verr error // the last "items" value's validation error
	found := false
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			if s.peek() != '"' {
				s.fail("expected an object key")
				break
			}
			isItems := p.key() == keyItems
			if !s.expect(':', "expected ':' after an object key") {
				break
			}
			if isItems { // where "items" repeats, the last one counts
				found = true
				items, verr = p.items(false)
			} else {
				s.value()
			}
			if s.peek() == ',' {
				s.pos++
				continue
			}
			s.expect('}', "expected ',' or '}' in an object")
			break
		}
	}
	s.finish()
	switch {
	case s.err != nil:
		return nil, s.err
	case !found:
		return nil, bad("\"items\" is required")
	case verr != nil:
		return nil, verr
	}
	return items, nil
}

// ParseTransactionItems validates the "items" array of a push operation of
// POST /api/v1/transaction (or a stream cycle's push_items): the rules of
// ParseBody, plus "traceId", when present and not null, must be a UUID
// string. raw is the array's JSON text; payloads alias it. earlier is the
// number of push items the request's operations before this one carry:
// an array that takes the request past MaxTransactionItems is refused as
// a whole, without building its items. Errors are *ValidationError.
func ParseTransactionItems(raw []byte, earlier int) ([]ParsedItem, error) {
	p := itemParser{s: scanner{b: raw}, maxItems: max(MaxTransactionItems-earlier, 0), limitAll: true}
	if earlier > 0 {
		p.limitNote = fmt.Sprintf(" (%d push items in earlier operations)", earlier)
	}
	items, verr := p.items(true)
	p.s.finish()
	if p.s.err != nil {
		return nil, p.s.err
	}
	if verr != nil {
		return nil, verr
	}
	return items, nil
}

// itemParser reads the "items" array of a push with a scanner.
type itemParser struct {
	s scanner
	// names holds the distinct queue and partition names read so far (up
	// to maxInterned), so that names repeated across items share a string.
	names []string
	// scratch is the unescaped text of the last escaped key or string.
	scratch []byte
	// maxItems is the most items the array may hold (0 = no limit, unless
	// limitAll: a transaction's share of MaxTransactionItems, whose error
	// adds limitNote).
	maxItems  int
	limitAll  bool
	limitNote string
	// dst, when not nil, is where items are appended (from dst[:0]).
	dst []ParsedItem
	// txids holds the transactionIds of the items read so far, end to
	// end; txEnd[i] is where items[i]'s ends (items without one add
	// nothing; nil until the first one). items slices them from one
	// string at the end: a few allocations per push (the builder is sized
	// at the first transactionId from the rest of the body, see item),
	// not one per transactionId.
	txids strings.Builder
	txEnd []int
	// txidsSized: txids was sized for the body once (item); a repeated
	// "items" array's builder is not sized again.
	txidsSized bool
}

const maxInterned = 16

// Keys an item (or the body) may carry that the parser reads.
const (
	keyOther = iota
	keyItems
	keyQueue
	keyPartition
	keyPayload
	keyTransactionID
	keyTraceID
)

// key reads an object key (the scanner is at its '"') and classifies it.
func (p *itemParser) key() int {
	start := p.s.pos
	esc := p.s.str()
	if p.s.err != nil {
		return keyOther
	}
	k := p.s.b[start+1 : p.s.pos-1]
	if esc {
		p.scratch = appendUnescaped(p.scratch[:0], p.s.b[start:p.s.pos])
		k = p.scratch
	}
	switch string(k) {
	case "items":
		return keyItems
	case "queue":
		return keyQueue
	case "partition":
		return keyPartition
	case "payload":
		return keyPayload
	case "transactionId":
		return keyTransactionID
	case "traceId":
		return keyTraceID
	}
	return keyOther
}

// span is where a value sits in the body; end == 0 means absent.
type span struct {
	start, end int
	esc        bool // a string with escapes
}

// items reads an "items" value (the scanner is at its first byte). A
// syntax error is left in p.s.err; a rule broken by an item (or a value
// that is not an array) is returned as verr after the rest of the value
// has been checked for syntax. An empty array gives an empty, non-nil
// slice.
func (p *itemParser) items(allowTrace bool) (items []ParsedItem, verr error) {
	s := &p.s
	if s.peek() != '[' {
		s.value()
		return nil, bad("\"items\" must be an array")
	}
	s.enter()
	s.pos++
	p.txids.Reset() // "items" may repeat: the last one counts
	p.txEnd = nil
	items = p.dst[:0]
	if items == nil {
		items = []ParsedItem{}
	}
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return items, nil
	}
	n := 0 // items in the array
	from := s.pos
	for i := 0; s.err == nil; i++ {
		n++
		switch {
		case verr != nil || p.tooMany(n): // only syntax matters from here
			s.value()
		case s.peek() != '{':
			s.value()
			verr = bad("items[%d] must be an object", i)
		default:
			it, err := p.item(i, allowTrace)
			if err != nil {
				verr = err
			} else {
				items = append(items, it)
				if p.txEnd == nil && p.txids.Len() > 0 {
					// The first transactionId: the items before it have none.
					// Room for the items the rest of the body holds at the
					// size of those read so far, at most what a fixed
					// max(64, 2*items) gave (which was 512 bytes for a
					// one-item push; the bound keeps a body of tiny items
					// and one huge one from sizing it by its bytes); append
					// grows it where that guess is short.
					more := (len(s.b) - s.pos) * len(items) / max(s.pos-from, 1)
					p.txEnd = make([]int, len(items)-1, min(len(items)+1+more, max(64, 2*len(items))))
				}
				if p.txEnd != nil {
					p.txEnd = append(p.txEnd, p.txids.Len())
				}
			}
		}
		if s.peek() == ',' {
			s.pos++
			continue
		}
		s.expect(']', "expected ',' or ']' in an array")
		break
	}
	s.depth--
	if p.tooMany(n) {
		if p.limitAll {
			return nil, bad("the push has %d items%s; a transaction or stream cycle carries at most %d push items in all",
				n, p.limitNote, MaxTransactionItems)
		}
		return nil, bad("the push has %d items; at most %d are accepted per request (QUEEN_MAX_PUSH_ITEMS)", n, p.maxItems)
	}
	if verr != nil {
		return nil, verr
	}
	if p.txids.Len() > 0 {
		all, start := p.txids.String(), 0
		for i := range items {
			items[i].TransactionID, start = all[start:p.txEnd[i]], p.txEnd[i]
		}
	}
	return items, nil
}

// tooMany reports whether n items are more than the array may hold.
func (p *itemParser) tooMany(n int) bool {
	return (p.maxItems > 0 || p.limitAll) && n > p.maxItems
}

// item reads one item object (the scanner is at its '{') and applies the
// item rules of ParseBody in their fixed order.
func (p *itemParser) item(i int, allowTrace bool) (ParsedItem, error) {
	s := &p.s
	var it ParsedItem
	var queue, partition, payload, txid, trace span
	start := s.pos
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
			k := p.key()
			if !s.expect(':', "expected ':' after an object key") {
				break
			}
			var sp span
			if s.peek() == '"' {
				sp.start = s.pos
				sp.esc = s.str()
				sp.end = s.pos
			} else {
				sp.start, sp.end = s.value()
			}
			switch k {
			case keyQueue:
				queue = sp
			case keyPartition:
				partition = sp
			case keyPayload:
				payload = sp
			case keyTransactionID:
				txid = sp
			case keyTraceID:
				trace = sp
			}
			if s.peek() == ',' {
				s.pos++
				continue
			}
			s.expect('}', "expected ',' or '}' in an object")
			break
		}
	}
	s.depth--
	if s.err != nil {
		return it, nil // the syntax error wins; the caller stops
	}
	if queue.end == 0 {
		return it, bad("items[%d].queue is required", i)
	}
	name, err := p.name(queue)
	if err != nil {
		return it, bad("items[%d].queue %s", i, err)
	}
	it.Queue = name
	if payload.end == 0 {
		return it, bad("items[%d].payload is required", i)
	}
	it.Payload = s.b[payload.start:payload.end:payload.end]
	it.Partition = DefaultPartition
	if partition.end != 0 {
		name, err := p.name(partition)
		if err != nil {
			return it, bad("items[%d].partition %s", i, err)
		}
		it.Partition = name
	}
	if allowTrace && trace.end != 0 && s.b[trace.start] != 'n' {
		if s.b[trace.start] != '"' {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		id, err := uuid.ParseBytes(p.text(trace))
		if err != nil {
			return it, bad("items[%d].traceId must be a UUID string", i)
		}
		it.TraceID = &id
	}
	if txid.end != 0 {
		switch s.b[txid.start] {
		case 'n': // null counts as absent
		case '"':
			if txid.esc && loneSurrogate(s.b[txid.start:txid.end]) {
				return it, bad("items[%d].transactionId %v", i, ErrLoneSurrogate)
			}
			t := p.text(txid)
			if len(t) > MaxTransactionIDBytes {
				return it, bad("items[%d].transactionId is longer than %d bytes", i, MaxTransactionIDBytes)
			}
			if !utf8.Valid(t) {
				return it, bad("items[%d].transactionId is not valid UTF-8", i)
			}
			if p.txids.Cap() == 0 && !p.txidsSized {
				// Room for this transactionId and one as long for each
				// item the rest of the body holds at this item's size (s
				// is at its end), at most the rest of the body (unescaping
				// never lengthens one) and 64 KiB; a longer push's grow as
				// the builder does. A fixed 1 KiB was most of what a
				// one-item push allocated; a cap of 1 KiB made a push of
				// 100 UUID texts (3.6 KB) grow the builder twice, copying
				// what it held each time. Once per body: a repeated
				// "items" starts the builder again (Reset), and sizing
				// each repeat for the rest of the body would allocate up
				// to 64 KiB per repeat, many times the body; a repeat's
				// builder grows from its first transactionId instead.
				p.txidsSized = true
				more := (len(s.b) - s.pos) / max(s.pos-start, 1)
				p.txids.Grow(min(64<<10, len(s.b)-txid.start, len(t)*(1+more)))
			}
			p.txids.Write(t) // items sets TransactionID from it
		default:
			return it, bad("items[%d].transactionId must be a string or null", i)
		}
	}
	return it, nil
}

// text is the unescaped content of the string value at sp (valid only
// until the next call: it may be p.scratch).
func (p *itemParser) text(sp span) []byte {
	if !sp.esc {
		return p.s.b[sp.start+1 : sp.end-1]
	}
	p.scratch = appendUnescaped(p.scratch[:0], p.s.b[sp.start:sp.end])
	return p.scratch
}

// name checks a queue or partition name value (ValidateName: byte-exact
// UTF-8, 1..255 bytes, no control characters; no lone surrogate escape:
// surrogate.go) and returns it, shared with an equal name read before.
func (p *itemParser) name(sp span) (string, error) {
	if p.s.b[sp.start] != '"' {
		return "", fmt.Errorf("must be a non-empty string")
	}
	if sp.esc && loneSurrogate(p.s.b[sp.start:sp.end]) {
		return "", ErrLoneSurrogate
	}
	t := p.text(sp)
	if len(t) > 0 {
		// Names that differ mostly differ in their last byte (p0, p1, …):
		// it is compared before the whole name.
		last := t[len(t)-1]
		for _, n := range p.names {
			if len(n) == len(t) && n[len(n)-1] == last && n == string(t) {
				return n, nil
			}
		}
	}
	n := string(t)
	if err := ValidateName(n); err != nil {
		return "", err
	}
	if len(p.names) < maxInterned {
		p.names = append(p.names, n)
	}
	return n, nil
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

// CheckPartitions returns a *ValidationError when items name more than
// max distinct partitions (queue and partition pairs); max <= 0 is no
// limit. A push's new queues and partitions are created in one piece: by
// the push itself before its WAL append when it names many
// (Pipeline.Prepare), else by the projector in order with everything
// else it writes, where one push naming 100,000 new queues held every
// other producer's pushes for some 20 s (a hostile-input probe,
// 2026-12-07); 1,000 new queues held them at most 0.065-0.092 s (durable
// PostgreSQL; docs/push.md, "Large pushes"). A push of at most max items cannot
// exceed it and is not counted (no map on the common path).
func CheckPartitions(items []ParsedItem, max int) error {
	if max <= 0 || len(items) <= max {
		return nil
	}
	type pair struct{ queue, partition string }
	seen := make(map[pair]struct{}, max+1)
	for i := range items {
		seen[pair{items[i].Queue, items[i].Partition}] = struct{}{}
		if len(seen) > max {
			return bad("the request's push items name more than %d partitions (queue and partition pairs); at most %d are accepted per request (QUEEN_MAX_PUSH_PARTITIONS): split it", max, max)
		}
	}
	return nil
}
