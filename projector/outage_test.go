package projector

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOutageLog: a PostgreSQL outage of many retries logs one line when it
// starts (with the error), a reminder every outageReminder, one when
// PostgreSQL is back (with how long it was away) and one when the records
// waiting then are projected (with how many); retries are debug only.
func TestOutageLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	o := outageLog{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		now: func() time.Time { return now }}
	o.succeeded(10, 0) // healthy: nothing to say
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	for range 100 { // 100 retries, 4 s apart: 6m40s
		o.failed(down, time.Second, 50)
		now = now.Add(4 * time.Second)
	}
	o.succeeded(10, 50) // cursor loaded: back, 50 records waiting
	o.succeeded(30, 40) // a batch, and new pushes came in
	o.succeeded(60, 5)  // the 50 that waited are in
	o.succeeded(65, 0)  // nothing more to say
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="projector: PostgreSQL lost; pushes are kept in the WAL and answered buffered, projection retries with backoff" err="dial tcp 127.0.0.1:5432: connect: connection refused" backlog=50`,
		`level=WARN msg="projector: PostgreSQL still unreachable" down_for=5m0s`,
		`level=INFO msg="projector: PostgreSQL is back" down_for=6m40s backlog=50`,
		`level=INFO msg="projector: caught up after the PostgreSQL outage" records_projected=50 took=0s`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s\nwant it to contain %s", i, lines[i], w)
		}
	}

	// A stopping error is logged once per distinct error.
	buf.Reset()
	e1 := errors.New("record 7 does not verify")
	for range 10 {
		o.stopped("projector: stopped", e1)
	}
	o.stopped("projector: stopped", errors.New("record 9 does not verify"))
	if n := strings.Count(buf.String(), "projector: stopped"); n != 2 {
		t.Errorf("stopped logged %d times, want 2:\n%s", n, buf.String())
	}
}
