package fastapi

import (
	"slices"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
)

// The push answer (201) is the JSON array of ingest.Result, one per item:
//
//	[{"index":0,"message_id":"…","transaction_id":"…","queueName":"…","status":"queued"},…]
//
// (a failed item also has "error" after "status": ingest.FailedReason)
// appended in one pass into the response's own pooled body buffer, sized
// once: the field names are constant fragments, the strings are escaped as
// goccy/go-json escapes them (appendJSONString), so the bytes are those
// json.Marshal([]ingest.Result) gives (TestPushAnswerMatchesMarshal).

// pushItemOverhead bounds the bytes of one result beyond its three strings
// (unescaped): field names, quotes, the index and the status.
const pushItemOverhead = 96

// writePushAnswer writes res as the 201 answer of POST /api/v1/push.
func writePushAnswer(ctx *fasthttp.RequestCtx, res []ingest.Result) {
	n := 2
	for i := range res {
		r := &res[i]
		n += pushItemOverhead + len(r.MessageID) + len(r.TransactionID) + len(r.QueueName)
		if r.Error != "" {
			n += len(`,"error":""`) + len(r.Error)
		}
	}
	b := ctx.Response.SwapBody(nil)[:0]
	b = appendPushAnswer(slices.Grow(b, n), res)
	cors(ctx)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusCreated)
	ctx.Response.SwapBody(b)
}

// appendPushAnswer appends the JSON array of res to b.
func appendPushAnswer(b []byte, res []ingest.Result) []byte {
	b = append(b, '[')
	for i := range res {
		r := &res[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(r.Index), 10)
		b = append(b, `,"message_id":`...)
		at := len(b)
		b = appendJSONString(b, r.MessageID)
		b = append(b, `,"transaction_id":`...)
		if r.TransactionID == r.MessageID {
			// A minted id is both (one string, compared by its pointer):
			// its JSON is the one just written.
			b = append(b, b[at:len(b)-len(`,"transaction_id":`)]...)
		} else {
			b = appendJSONString(b, r.TransactionID)
		}
		b = append(b, `,"queueName":`...)
		b = appendJSONString(b, r.QueueName)
		switch r.Status {
		case ingest.StatusQueued:
			b = append(b, `,"status":"queued"}`...)
		default:
			b = append(b, `,"status":`...)
			b = appendJSONString(b, string(r.Status))
			if r.Error != "" {
				b = append(b, `,"error":`...)
				b = appendJSONString(b, r.Error)
			}
			b = append(b, '}')
		}
	}
	return append(b, ']')
}

// pushBodies holds push request body buffers for reuse: the push path
// keeps nothing that aliases the body once Pipeline.Push has returned
// (the WAL writer has copied the payloads from it into its tail segment
// by then, or never will: a refused or failed append). keepPushBody is
// the largest buffer kept, so a huge push does not pin its memory: 1 MiB, so that bodies of
// pushes of 1,000 items of up to about 1 KB are reused rather than made
// (and zeroed) afresh per push (the pool holds only what concurrent
// pushes had in use, and empties over two garbage collections).
var pushBodies sync.Pool

const keepPushBody = 1 << 20
