package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/valyala/fasthttp"
)

// TestDBFail: each class of store error gets its one answer, and only a
// connection-level failure is called "database unavailable".
func TestDBFail(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Server{log: log, unavailable: &unavailableLog{log: log, now: time.Now}}
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

// TestUnavailableLoggedOncePerOutage: requests refused because PostgreSQL
// is away (an open console tab makes two every 2 s) give one warn line,
// on one line, and debug lines after it; a refusal after a minute without
// one is a new outage and warns again; any other failure is still an
// error line each time (docs/operations.md, "Logs").
func TestUnavailableLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	s := &Server{log: log, unavailable: &unavailableLog{log: log, now: func() time.Time { return now }}}
	// The text pgx gives for a host name that resolves to two addresses
	// (pgconn.ConnectError), wrapping an error Classify calls unavailable.
	down := fmt.Errorf("pg: overview: failed to connect to `user=queen database=queen`:\n\t[::1]:5432 (localhost): dial error: connection refused\n\t127.0.0.1:5432 (localhost): dial error: connection refused: %w", context.DeadlineExceeded)
	lines := func() []string {
		out := strings.TrimSpace(buf.String())
		buf.Reset()
		if out == "" {
			return nil
		}
		return strings.Split(out, "\n")
	}
	for i := range 30 { // a minute of a console tab: overview and queues every 2 s
		var ctx fasthttp.RequestCtx
		s.dbFail(&ctx, []string{"overview", "list queues"}[i%2], down)
		if ctx.Response.StatusCode() != 503 {
			t.Fatalf("status %d", ctx.Response.StatusCode())
		}
		now = now.Add(time.Second)
	}
	got := lines()
	if len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "what=overview") ||
		strings.Contains(got[0], `\n`) || !strings.Contains(got[0], "`user=queen database=queen`: [::1]:5432 (localhost): dial error: connection refused; 127.0.0.1:5432") {
		t.Errorf("a minute of refusals logged %d lines at info, want one warn line with the error on one line:\n%s", len(got), strings.Join(got, "\n"))
	}
	now = now.Add(unavailableQuiet)
	var ctx fasthttp.RequestCtx
	s.dbFail(&ctx, "list groups", down)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "what=\"list groups\"") {
		t.Errorf("the first refusal after a quiet minute: %q, want one warn line", got)
	}
	for range 2 {
		s.dbFail(&ctx, "overview", fmt.Errorf("pg: overview: %w", &pgconn.PgError{Code: "XX000", Message: "internal"}))
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "level=ERROR") {
		t.Errorf("internal errors: %q, want an error line each", got)
	}
}
