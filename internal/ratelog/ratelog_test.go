package ratelog

import (
	"bytes"
	"github.com/queenmq/queen-go/internal/logbuf"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func setup(t *testing.T, interval time.Duration) (*Logger, *clock, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), interval)
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l.now = c.now
	return l, c, &buf
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestFirstLoggedThenOnePerIntervalWithCount(t *testing.T) {
	t.Parallel()
	l, c, buf := setup(t, 10*time.Second)
	l.Error("wal: write failed", "err", "e1")
	for i := 0; i < 99; i++ { // 99 more within the interval: held back
		c.advance(50 * time.Millisecond)
		l.Error("wal: write failed", "err", "e2")
	}
	if got := lines(buf); len(got) != 1 || !strings.Contains(got[0], "err=e1") || strings.Contains(got[0], "repeated") {
		t.Fatalf("after 100 occurrences within 10 s: lines %q, want only the first, without a count", got)
	}
	c.advance(10 * time.Second)
	l.Error("wal: write failed", "err", "e3")
	got := lines(buf)
	if len(got) != 2 {
		t.Fatalf("lines %q, want 2", got)
	}
	if !strings.Contains(got[1], "err=e3") || !strings.Contains(got[1], "repeated=100") || !strings.Contains(got[1], "over=14.95s") {
		t.Fatalf("second line %q: want the latest attributes, repeated=100 (99 held + this one), over=14.95s", got[1])
	}
	// Alone after the interval: written without a count.
	c.advance(time.Minute)
	l.Error("wal: write failed", "err", "e4")
	if got := lines(buf); len(got) != 3 || strings.Contains(got[2], "repeated") {
		t.Fatalf("lines %q: a lone occurrence after the interval carries no count", got)
	}
}

func TestMessagesAreLimitedApart(t *testing.T) {
	t.Parallel()
	l, _, buf := setup(t, time.Hour)
	for i := 0; i < 10; i++ {
		l.Error("a")
		l.Warn("b")
	}
	if got := lines(buf); len(got) != 2 {
		t.Fatalf("lines %q, want one per message", got)
	}
}

func TestDisabledLevelIsNotCounted(t *testing.T) {
	t.Parallel()
	l, c, buf := setup(t, time.Second)
	l.Log(slog.LevelInfo, "quiet") // below the handler's level
	c.advance(time.Millisecond)
	l.Log(slog.LevelWarn, "quiet")
	if got := lines(buf); len(got) != 1 || strings.Contains(got[0], "repeated") {
		t.Fatalf("lines %q: a line the handler drops must not count or hold back", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	var buf logbuf.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				l.Error("same")
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines from 8000 occurrences within the interval, want 1", n)
	}
}
