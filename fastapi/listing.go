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
		select {
		case turns <- struct{}{}:
		default:
			t := time.NewTimer(s.listingWait)
			select {
			case turns <- struct{}{}:
				t.Stop()
			case <-t.C:
				ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
				writeErr(ctx, fasthttp.StatusServiceUnavailable, "busy: "+strconv.Itoa(cap(turns))+
					" "+what+" are running (at most DB_POOL_SIZE/4 at once); retry")
				return
			}
		}
		defer func() { <-turns }()
		h(ctx)
	}
}
