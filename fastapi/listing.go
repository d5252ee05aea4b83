package fastapi

import (
	"strconv"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// The listing gate. The listing routes (status, analytics, resources,
// consumer groups, DLQ, messages, traces) read PostgreSQL on the same
// connection pool as the projector, pops and acks. A listing can be heavy
// (a page deep into a large queue, every queue of a large broker), and ten
// of them at once held every connection of the default pool of ten for
// their whole timeout: the projector could not commit, pushes were
// answered "buffered", pops failed with 503 (found by a hostile-input
// probe, 2026-12-07). So the GETs of those routes run at most
// Config.MaxListingRequests at a time; a request that finds no free turn
// waits for one up to 10 s (defaultListingWait), then is answered 503 with Retry-After,
// having touched nothing.

// DefaultMaxListingRequests is Config.MaxListingRequests' default: a
// quarter of the default pool of ten, rounded down.
const DefaultMaxListingRequests = 2

// defaultListingWait is how long a listing request waits for a turn
// (Server.listingWait).
const defaultListingWait = 10 * time.Second

// listingRoutes registers routes on r, the GETs through s's listing gate.
type listingRoutes struct {
	r *router.Router
	s *Server
}

// GET registers h for path behind the listing gate.
func (l listingRoutes) GET(path string, h fasthttp.RequestHandler) { l.r.GET(path, l.s.listingGate(h)) }

// POST and DELETE register h as it is: a write is not a listing.
func (l listingRoutes) POST(path string, h fasthttp.RequestHandler)   { l.r.POST(path, h) }
func (l listingRoutes) DELETE(path string, h fasthttp.RequestHandler) { l.r.DELETE(path, h) }

// listingGate runs h once it holds one of the s.listingTurns; without a
// turn within s.listingWait it answers 503 {"error": ...} naming the limit,
// with Retry-After: 1.
func (s *Server) listingGate(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return s.turnGate(s.listingTurns, "listing requests", h)
}

// heavyWriteGate is listingGate for the writes whose size or locks a
// client chooses, with turns of their own (s.heavyWriteTurns, as many as
// the listings'): stream cycles (up to 10,000 state operations and push
// items, serialised per shard by a lock held on a pool connection) and
// seeks (every cursor of a group on a queue, locked). Ten of either at
// once held the pool: a probe's other client made 19 requests in 15 s
// where it made 5,745 alone (cycles), 212 against 4,897 (seeks).
func (s *Server) heavyWriteGate(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return s.turnGate(s.heavyWriteTurns, "stream cycles and seeks", h)
}

// turnGate runs h once it holds one of turns; without one within
// s.listingWait it answers 503 {"error": ...} naming what runs (what) and
// the limit, with Retry-After: 1, having touched nothing.
func (s *Server) turnGate(turns chan struct{}, what string, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !s.takeTurn(ctx, turns, what) {
			return
		}
		defer func() { <-turns }()
		h(ctx)
	}
}

// takeTurn takes one of turns, waiting up to s.listingWait; without one
// it answers 503 as turnGate does and returns false. The caller gives a
// turn taken back (<-turns).
func (s *Server) takeTurn(ctx *fasthttp.RequestCtx, turns chan struct{}, what string) bool {
	select {
	case turns <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.listingWait)
	defer t.Stop()
	select {
	case turns <- struct{}{}:
		return true
	case <-t.C:
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
		writeErr(ctx, fasthttp.StatusServiceUnavailable, "busy: "+strconv.Itoa(cap(turns))+
			" "+what+" are running (at most DB_POOL_SIZE/4 at once); retry")
		return false
	}
}

// largeWrites names the requests that take the heavy writes' turns by
// their size (largeWriteGate, ackBatch) in the busy answer.
const largeWrites = "heavy writes (stream cycles, seeks, large transactions and ack batches)"

// largeWriteBodyBytes is the body size above which a POST
// /api/v1/transaction or /api/v1/ack/batch takes one of the heavy writes'
// turns before its body is read (largeWriteGate, ackBatch): about 1,800
// acks.
const largeWriteBodyBytes = 256 << 10

// largeWriteGate runs h at once for a request whose body is declared at
// most largeWriteBodyBytes long, and behind the heavy writes' turns
// otherwise (a larger body, or one of unknown length): POST
// /api/v1/transaction. A transaction of 10,000 ack operations (1.4 MB)
// allocates about 24 MB in the broker while it runs; four clients sending
// them in a loop kept the heap over the runtime's memory limit, and
// another client's pushes and pops fell from 3,474 to 68 in 15 s (p99
// 19 -> 540 ms). Small transactions, the usual ones, never wait.
func (s *Server) largeWriteGate(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	gated := s.turnGate(s.heavyWriteTurns, largeWrites, h)
	return func(ctx *fasthttp.RequestCtx) {
		if !largeBody(ctx) {
			h(ctx)
			return
		}
		gated(ctx)
	}
}

// largeBody reports whether the request's body is declared longer than
// largeWriteBodyBytes, or its length is not declared (chunked).
func largeBody(ctx *fasthttp.RequestCtx) bool {
	n := ctx.Request.Header.ContentLength()
	return n < 0 || n > largeWriteBodyBytes
}
