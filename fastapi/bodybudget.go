package fastapi

import (
	"errors"
	"io"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// bodyFreeBytes is how much of each request body the server reads without
// asking the body budget: a body of at most this size (a push of a few
// hundred small items) is never refused for memory. What it costs beyond
// the budget is bounded by the connections: QUEEN_MAX_CONNS × 64 KiB.
const bodyFreeBytes = 64 << 10

// errBodyBudget is returned by readBody when the body budget cannot cover
// the next part of a body; the handler answers 503 with Retry-After.
var errBodyBudget = errors.New("request body memory budget spent")

// bodyBudget bounds the bytes of request bodies the server holds at once,
// all connections together (QUEEN_BODY_MEMORY_BYTES). A body's bytes are
// taken from it as they arrive, in doubling steps past bodyFreeBytes, so
// a client that declares a large Content-Length and sends little holds
// little; they are given back when the request's handler has returned
// (release). Without it, N connections each sending most of a
// QUEEN_MAX_BODY_BYTES body and then stalling held N × 64 MiB until the
// read timeout (60 of them held 3.77 GB).
type bodyBudget struct {
	left atomic.Int64 // bytes not taken
}

func newBodyBudget(n int64) *bodyBudget {
	b := &bodyBudget{}
	b.left.Store(n)
	return b
}

// take takes n bytes when that many are left, and reports whether it did.
func (b *bodyBudget) take(n int64) bool {
	for {
		l := b.left.Load()
		if l < n {
			return false
		}
		if b.left.CompareAndSwap(l, l-n) {
			return true
		}
	}
}

// give gives back n bytes taken.
func (b *bodyBudget) give(n int64) { b.left.Add(n) }

// bodyTakenKey is the RequestCtx user value under which readStream
// records the bytes a request took from the budget (an int64), for
// release. Only requests that took some carry it.
type bodyTakenKey struct{}

// release wraps the server's handler: once h has returned (the body is no
// longer read: handlers keep nothing that aliases it, see Pusher), the
// bytes the request took from the budget are given back.
func (b *bodyBudget) release(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if n, ok := ctx.UserValue(bodyTakenKey{}).(int64); ok && n > 0 {
			ctx.SetUserValue(bodyTakenKey{}, int64(0))
			b.give(n)
		}
	}
}

// readStream reads stream into buf (from its start) until EOF or n bytes,
// taking from the budget what the body grows past bodyFreeBytes before it
// is read or allocated: each step doubles what the request may read
// (64 KiB, 128 KiB, ...), and buf is allocated no larger than that. A step
// the budget cannot cover ends the read with errBodyBudget. The bytes
// taken are recorded on ctx (bodyTakenKey) for release, whatever the
// outcome.
func (s *Server) readStream(ctx *fasthttp.RequestCtx, stream io.Reader, buf []byte, n int) ([]byte, error) {
	allowed := min(n, bodyFreeBytes) // bytes this request may read
	var taken int64
	defer func() {
		if taken > 0 {
			ctx.SetUserValue(bodyTakenKey{}, taken)
		}
	}()
	buf = buf[:0]
	if want := min(max(ctx.Request.Header.ContentLength(), 512), allowed); cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	for len(buf) < n {
		if len(buf) == allowed {
			step := min(allowed, n-allowed)
			if !s.bodies.take(int64(step)) {
				// A body that ends exactly here (a chunked one whose end
				// comes in a read of its own) is not refused.
				var probe [1]byte
				if m, err := stream.Read(probe[:]); m == 0 && err == io.EOF {
					return buf, nil
				}
				return buf, errBodyBudget
			}
			taken += int64(step)
			allowed += step
		}
		if len(buf) == cap(buf) {
			// Up to what may be read, or the declared length when that is less.
			grow := allowed
			if cl := ctx.Request.Header.ContentLength(); cl > len(buf) && cl < grow {
				grow = cl + 1 // +1: room to see the EOF without growing again
			}
			next := make([]byte, len(buf), grow)
			copy(next, buf)
			buf = next
		}
		m, err := stream.Read(buf[len(buf):min(cap(buf), allowed)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
