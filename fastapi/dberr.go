package fastapi

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// Deadlines of a request's PostgreSQL work (Config.DBTimeout and
// Config.AdminDBTimeout); past one the request answers 503 "database
// unavailable" instead of hanging while PostgreSQL does not answer (paused,
// partitioned away, or its host frozen).
const (
	// DefaultDBTimeout bounds the PostgreSQL work of the consume and produce
	// routes a client waits on: a pop without wait, each attempt of a
	// waiting pop, acks, lease extension and release, configure,
	// transactions and the maintenance flags. A pop's COMMIT already
	// sent is waited for past it (pg's commitTimeout, 30 s), so
	// that a commit that happened is answered as one (docs/consume.md,
	// "When a commit is slow or its outcome unknown").
	DefaultDBTimeout = 5 * time.Second
	// DefaultAdminDBTimeout bounds the PostgreSQL work of the resource,
	// admin, message and trace routes, which may scan or delete a lot (a
	// queue delete cascades to all its messages).
	DefaultAdminDBTimeout = 30 * time.Second
	// popMinAttempt is the least time one attempt of a waiting pop gets,
	// even when less of its timeout is left: a waiting pop therefore
	// answers at most this long after its timeout (longer only while a
	// commit it sent is on the way, see DefaultDBTimeout).
	popMinAttempt = time.Second
	// conflictRetryAfter is the Retry-After (seconds) of a 503 for a
	// serialization failure or deadlock.
	conflictRetryAfter = "1"
)

// dbCtx is the context of a consume or produce route's PostgreSQL work
// (Config.DBTimeout).
func (s *Server) dbCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.DBTimeout)
}

// adminCtx is the context of an admin or resource route's PostgreSQL work
// (Config.AdminDBTimeout).
func (s *Server) adminCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.AdminDBTimeout)
}

// dbFail answers for a failed store call (what names it in the log), by
// pg.Classify:
//
//	unavailable  503 {"error":"database unavailable"}
//	conflict     503 {"error":"database conflict (concurrent transaction): retry"}, Retry-After: 1
//	vanished     404 {"error":"not found: it was deleted while the request ran"}
//	invalid text 400 {"error":"a text value of the request holds a NUL character or is not valid UTF-8"}
//	internal     500 {"error":"internal error"}
//
// Only a connection-level failure is ever called "database unavailable";
// the error itself is logged, never sent (it may name tables and values).
func (s *Server) dbFail(ctx *fasthttp.RequestCtx, what string, err error) {
	class := pg.Classify(err)
	if class == pg.ClassInvalidText {
		// The client's mistake, at a client's rate: not an error of the
		// broker's.
		s.log.Warn(what+" refused by PostgreSQL: invalid text", "err", err)
	} else {
		s.log.Error(what+" failed", "class", class.String(), "err", err)
	}
	switch class {
	case pg.ClassUnavailable:
		writeErr(ctx, fasthttp.StatusServiceUnavailable, "database unavailable")
	case pg.ClassConflict:
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, conflictRetryAfter)
		writeErr(ctx, fasthttp.StatusServiceUnavailable, "database conflict (concurrent transaction): retry")
	case pg.ClassVanished:
		writeErr(ctx, fasthttp.StatusNotFound, "not found: it was deleted while the request ran")
	case pg.ClassInvalidText:
		writeErr(ctx, fasthttp.StatusBadRequest, "a text value of the request holds a NUL character or is not valid UTF-8")
	default:
		writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
	}
}
