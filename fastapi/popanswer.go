package fastapi

import (
	"math"
	"slices"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// The pop answer (200):
//
//	{"success":true,"queue":Q,"partition":P,"partitionId":"…","leaseId":L,
//	 "consumerGroup":G,"partitionsClaimed":N,"messages":[M,…]}
//
// with each M
//
//	{"id":"…","transactionId":T,"traceId":"…"|null,"data":PAYLOAD,
//	 "producerSub":S|null,"createdAt":"2006-01-02T15:04:05.000000Z",
//	 "partitionId":"…","partition":P,"queue":Q,"offset":N,"leaseId":L,
//	 "consumerGroup":G}
//
// PAYLOAD is the pushed JSON value byte for byte (a JSON encoder would
// re-encode it), L is "" for an autoAck pop, and strings are escaped as
// goccy/go-json's Marshal escapes them (HTML characters included). The
// answer is appended in one pass into the response's own pooled body
// buffer (an answer over 64 KiB: a buffer of its own, streamed and counted
// in the answer budget, answerbudget.go), sized once, so each payload is
// copied exactly once between the decoded segment and the socket buffer.

// writePop writes the pop answer for res (at least one message) from the
// response's own buffer, whatever its size.
func writePop(ctx *fasthttp.RequestCtx, req pg.PopRequest, res *pg.PopResult) {
	writePopTo(ctx, req, res, nil)
}

// answerOut is how the server writes a pop answer: n is its length
// (popAnswerLen), and one over streamAnswerBytes, already counted in
// budget at that length (Server.fitAnswer), is streamed with the server's
// write deadlines (answerStream).
type answerOut struct {
	n            int
	budget       *answerBudget
	stall, total time.Duration
}

// popAnswerParts are the lease and group of res's answer, encoded.
func popAnswerParts(req pg.PopRequest, res *pg.PopResult) (lease, group []byte) {
	if res.LeaseID != uuid.Nil {
		lease = appendUUID(make([]byte, 0, 38), res.LeaseID, true)
	} else {
		lease = []byte(`""`)
	}
	return lease, appendJSONString(nil, req.Group)
}

// writePopTo is writePop, but an answer over streamAnswerBytes is built in
// memory of its own and streamed as out says (out nil: never).
func writePopTo(ctx *fasthttp.RequestCtx, req pg.PopRequest, res *pg.PopResult, out *answerOut) {
	lease, group := popAnswerParts(req, res)

	// Size the buffer exactly (popAnswerLen): fasthttp's body pool keeps
	// a buffer only while its capacity is within the size class of what
	// it held, so an over-estimate would cost every pop answer a fresh
	// allocation of its size.
	var n int
	if out != nil {
		n = out.n
	} else {
		n = popAnswerLen(res, lease, group)
	}
	stream := out != nil && n > streamAnswerBytes
	var b []byte
	if stream {
		// Not the pooled buffer: the answer's memory goes with it when
		// fasthttp is done with it (answerStream.Close).
		b = make([]byte, 0, n)
	} else {
		b = ctx.Response.SwapBody(nil)[:0]
		b = slices.Grow(b, n)
	}

	b = append(b, `{"success":true,"queue":`...)
	b = appendJSONString(b, res.Messages[0].Queue)
	b = append(b, `,"partition":`...)
	b = appendJSONString(b, res.Claimed[0].Name)
	b = append(b, `,"partitionId":`...)
	b = appendUUID(b, res.Claimed[0].ID, true)
	b = append(b, `,"leaseId":`...)
	b = append(b, lease...)
	b = append(b, `,"consumerGroup":`...)
	b = append(b, group...)
	b = append(b, `,"partitionsClaimed":`...)
	b = strconv.AppendInt(b, int64(len(res.Claimed)), 10)
	b = append(b, `,"messages":[`...)

	var enc popEncoder
	enc.lease, enc.group = lease, group
	for i := range res.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = enc.appendMessage(b, &res.Messages[i])
	}
	b = append(b, "]}"...)
	cors(ctx)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	if !stream {
		ctx.Response.SwapBody(b)
		return
	}
	if len(b) != n {
		// A string that needed escaping: count what was built.
		out.budget.add(int64(len(b) - n))
	}
	ctx.Response.SetBodyStream(&answerStream{b: b, budget: out.budget, n: int64(len(b)),
		conn: ctx.Conn(), stall: out.stall, total: out.total}, len(b))
}

// popAnswerLen is the length of the pop answer writePop writes for res
// with lease and group (both already encoded), counting each string as
// it is when it needs no escaping (what names, transactionIds and
// producer subjects almost always are: the strings are not scanned twice)
// and createdAt years as 0000..9999: exact then, short otherwise (the
// buffer then grows once more).
func popAnswerLen(res *pg.PopResult, lease, group []byte) int {
	n, _ := popAnswerFit(res, lease, group, -1)
	return n
}

// popAnswerFit is popAnswerLen of the answer of res's first k messages,
// with k the most whose answer is at most room bytes long (at least one;
// room < 0: all of them).
func popAnswerFit(res *pg.PopResult, lease, group []byte, room int) (n, k int) {
	const uuidLen, timeLen = 38, len("2006-01-02T15:04:05.000000Z")
	n = len(`{"success":true,"queue":`) + jsonStringLen(res.Messages[0].Queue) +
		len(`,"partition":`) + jsonStringLen(res.Claimed[0].Name) +
		len(`,"partitionId":`) + uuidLen + len(`,"leaseId":`) + len(lease) +
		len(`,"consumerGroup":`) + len(group) +
		len(`,"partitionsClaimed":`) + intLen(int64(len(res.Claimed))) + len(`,"messages":[`) +
		len("]}")
	// Per message, what does not depend on it:
	fixed := len(`{"id":`) + uuidLen + len(`,"transactionId":`) + len(`,"traceId":`) + len(`,"data":`) +
		len(`,"producerSub":`) + len(`,"createdAt":"`) + timeLen + len(`"`) +
		len(`,"leaseId":`) + len(lease) + len(`,"consumerGroup":`) + len(group) + len("}")
	var wherePart, whereQueue string
	whereLen := -1
	for i := range res.Messages {
		m := &res.Messages[i]
		mn := fixed + jsonStringLen(m.TransactionID) + len(m.Payload) + intLen(m.Offset)
		if i > 0 {
			mn++ // the comma before it
		}
		if m.TraceID != nil {
			mn += uuidLen
		} else {
			mn += len("null")
		}
		if m.ProducerSub != nil {
			mn += jsonStringLen(*m.ProducerSub)
		} else {
			mn += len("null")
		}
		if whereLen < 0 || m.Partition != wherePart || m.Queue != whereQueue {
			wherePart, whereQueue = m.Partition, m.Queue
			whereLen = len(`,"partitionId":`) + uuidLen + len(`,"partition":`) + jsonStringLen(m.Partition) +
				len(`,"queue":`) + jsonStringLen(m.Queue) + len(`,"offset":`)
		}
		mn += whereLen
		if room >= 0 && i > 0 && n+mn > room {
			return n, i
		}
		n += mn
	}
	return n, len(res.Messages)
}

// jsonStringLen is len(appendJSONString(nil, s)) when s needs no
// escaping, shorter otherwise.
func jsonStringLen(s string) int { return len(s) + 2 }

// intLen is len(strconv.AppendInt(nil, v, 10)).
func intLen(v int64) int {
	n := 1
	if v < 0 {
		n++
		if v == math.MinInt64 {
			return 20
		}
		v = -v
	}
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// popEncoder appends the messages of one pop answer. What repeats from
// message to message is encoded once: the lease and group, the part
// naming the partition and queue (the same for a partition's run of
// messages), and the date and time up to the second.
type popEncoder struct {
	lease, group []byte
	// where is `,"partitionId":"…","partition":P,"queue":Q,"offset":` for
	// wherePID/wherePart/whereQueue.
	where                 []byte
	wherePID              uuid.UUID
	wherePart, whereQueue string
	whereSet              bool
	// second is the createdAt text up to and including the '.' for Unix
	// second secondAt.
	second   []byte
	secondAt int64
}

func (e *popEncoder) appendMessage(b []byte, m *pg.PoppedMessage) []byte {
	b = append(b, `{"id":`...)
	b = appendUUID(b, m.ID, true)
	b = append(b, `,"transactionId":`...)
	b = appendJSONString(b, m.TransactionID)
	b = append(b, `,"traceId":`...)
	if m.TraceID != nil {
		b = appendUUID(b, *m.TraceID, true)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"data":`...)
	b = append(b, m.Payload...)
	b = append(b, `,"producerSub":`...)
	if m.ProducerSub != nil {
		b = appendJSONString(b, *m.ProducerSub)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"createdAt":"`...)
	b = e.appendTime(b, m.CreatedAtMicros)
	b = append(b, '"')
	if !e.whereSet || m.PartitionID != e.wherePID || m.Partition != e.wherePart || m.Queue != e.whereQueue {
		w := append(e.where[:0], `,"partitionId":`...)
		w = appendUUID(w, m.PartitionID, true)
		w = append(w, `,"partition":`...)
		w = appendJSONString(w, m.Partition)
		w = append(w, `,"queue":`...)
		w = appendJSONString(w, m.Queue)
		w = append(w, `,"offset":`...)
		e.where, e.wherePID, e.wherePart, e.whereQueue, e.whereSet = w, m.PartitionID, m.Partition, m.Queue, true
	}
	b = append(b, e.where...)
	b = strconv.AppendInt(b, m.Offset, 10)
	b = append(b, `,"leaseId":`...)
	b = append(b, e.lease...)
	b = append(b, `,"consumerGroup":`...)
	b = append(b, e.group...)
	return append(b, '}')
}

// appendTime appends the Unix microsecond time us in MicrosLayout.
func (e *popEncoder) appendTime(b []byte, us int64) []byte {
	sec, frac := us/1e6, us%1e6
	if frac < 0 {
		sec, frac = sec-1, frac+1e6
	}
	if e.second == nil || sec != e.secondAt {
		e.second = time.Unix(sec, 0).UTC().AppendFormat(e.second[:0], "2006-01-02T15:04:05.")
		e.secondAt = sec
	}
	b = append(b, e.second...)
	f := int(frac) // 0..999999: three pairs of decimal digits
	p0, p1, p2 := 2*(f/10000), 2*(f/100%100), 2*(f%100)
	return append(b, decPairs[p0], decPairs[p0+1], decPairs[p1], decPairs[p1+1], decPairs[p2], decPairs[p2+1], 'Z')
}

// decPairs holds the two decimal digits of 0..99.
var decPairs = func() (t [200]byte) {
	for i := range 100 {
		t[2*i], t[2*i+1] = byte('0'+i/10), byte('0'+i%10)
	}
	return t
}()

// appendUUID appends u in its canonical 36-character form, in quotes when
// quoted, straight into b (two hex digits per byte from hexPairs).
func appendUUID(b []byte, u uuid.UUID, quoted bool) []byte {
	n := 36
	if quoted {
		n = 38
	}
	b = slices.Grow(b, n)
	t := b[len(b) : len(b)+n]
	i := 0
	if quoted {
		t[0], t[37] = '"', '"'
		i = 1
	}
	for j, c := range u {
		if j == 4 || j == 6 || j == 8 || j == 10 {
			t[i] = '-'
			i++
		}
		t[i], t[i+1] = hexPairs[2*int(c)], hexPairs[2*int(c)+1]
		i += 2
	}
	return b[:len(b)+n]
}

// hexPairs holds the two lower-case hex digits of every byte value.
var hexPairs = func() (t [512]byte) {
	const digits = "0123456789abcdef"
	for c := range 256 {
		t[2*c], t[2*c+1] = digits[c>>4], digits[c&15]
	}
	return t
}()

// jsonPlain marks the bytes appendJSONString copies as they are: printable
// ASCII but '"', '\\', '<', '>', '&' (one table lookup per byte on the
// path every id and name takes).
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string. Printable ASCII without
// '"', '\\' and the HTML characters '<', '>', '&' (what names,
// transactionIds and producer subjects almost always are) is appended as
// it is; anything else goes through goccy/go-json's Marshal, so escaping
// is the library's in every case.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			enc, _ := json.Marshal(s)
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
