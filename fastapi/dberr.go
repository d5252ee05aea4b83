package fastapi

import (
	"context"
	"log/slog"
	"strings"
	"sync"
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

// unavailableQuiet is how long without a request that met PostgreSQL
// unavailable ends an outage for unavailableLog.
const unavailableQuiet = time.Minute

// unavailableLog logs the requests that could not reach PostgreSQL
// (pg.ClassUnavailable: answered 503 "database unavailable", or a waiting
// pop that retries and then answers 204). Such a request meets
// PostgreSQL's absence, not a fault of the broker's, and while that lasts
// every request that needs PostgreSQL meets it (an open console tab makes
// two every 2 s), so the log follows the projector's outage policy
// (projector/outage.go, docs/operations.md "Logs"): the first one of an
// outage is logged at warn, in one line, the others at debug. For this
// log an outage ends when no request met it for unavailableQuiet; the
// next one after that is logged at warn again. Safe for concurrent use.
type unavailableLog struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last time.Time // the last request that met it; zero before the first
}

// met logs that what (a route's work, e.g. "overview") could not reach
// PostgreSQL: err, on one line.
func (u *unavailableLog) met(what string, err error) {
	now := u.now()
	u.mu.Lock()
	first := u.last.IsZero() || now.Sub(u.last) >= unavailableQuiet
	u.last = now
	u.mu.Unlock()
	if first {
		u.log.Warn("http: PostgreSQL unavailable; requests that need it are answered 503 until it is back",
			"what", what, "err", oneLine(err))
		return
	}
	u.log.Debug("http: "+what+": PostgreSQL unavailable", "err", oneLine(err))
}

// oneLine is err's text on one line: pgx puts each address a connection
// was tried at on a line of its own, indented ("failed to connect to
// `user=u database=d`:\n\t[::1]:5432 (localhost): ...\n\t127.0.0.1:5432
// ..."); the lines are joined with "; " (a space after a colon).
func oneLine(err error) string {
	lines := strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.ReplaceAll(strings.Join(lines, "; "), ":; ", ": ")
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
// the error itself is logged, never sent (it may name tables and values):
// an unavailable one through unavailableLog (once per outage at warn), the
// others at once.
func (s *Server) dbFail(ctx *fasthttp.RequestCtx, what string, err error) {
	class := pg.Classify(err)
	switch class {
	case pg.ClassUnavailable:
		s.unavailable.met(what, err)
	case pg.ClassInvalidText:
		// The client's mistake, at a client's rate: not an error of the
		// broker's.
		s.log.Warn(what+" refused by PostgreSQL: invalid text", "err", err)
	default:
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
