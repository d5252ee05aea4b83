package fastapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/valyala/fasthttp"
)

// TestDBFail: each class of store error gets its one answer, and only a
// connection-level failure is called "database unavailable".
func TestDBFail(t *testing.T) {
	t.Parallel()
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pgErr := func(code string) error {
		return fmt.Errorf("pg: pop: %w", &pgconn.PgError{Code: code, Message: "secret detail"})
	}
	tests := []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{"deadline", fmt.Errorf("pg: pop: %w", context.DeadlineExceeded), 503, `{"error":"database unavailable"}`, ""},
		{"admin shutdown", pgErr("57P01"), 503, `{"error":"database unavailable"}`, ""},
		{"too many connections", pgErr("53300"), 503, `{"error":"database unavailable"}`, ""},
		{"deadlock", pgErr("40P01"), 503, `{"error":"database conflict (concurrent transaction): retry"}`, "1"},
		{"serialization", pgErr("40001"), 503, `{"error":"database conflict (concurrent transaction): retry"}`, "1"},
		{"foreign key", pgErr("23503"), 404, `{"error":"not found: it was deleted while the request ran"}`, ""},
		{"NUL in text", pgErr("22021"), 400, `{"error":"a text value of the request holds a NUL character or is not valid UTF-8"}`, ""},
		{"untranslatable character", pgErr("22P05"), 400, `{"error":"a text value of the request holds a NUL character or is not valid UTF-8"}`, ""},
		{"unique violation", pgErr("23505"), 500, `{"error":"internal error"}`, ""},
		{"plain error", errors.New("segment checksum mismatch"), 500, `{"error":"internal error"}`, ""},
	}
	for _, tt := range tests {
		var ctx fasthttp.RequestCtx
		s.dbFail(&ctx, "test", tt.err)
		if got := ctx.Response.StatusCode(); got != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.status)
		}
		if got := string(ctx.Response.Body()); got != tt.body {
			t.Errorf("%s: body %s, want %s", tt.name, got, tt.body)
		}
		if got := string(ctx.Response.Header.Peek(fasthttp.HeaderRetryAfter)); got != tt.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tt.name, got, tt.retryAfter)
		}
	}
}
