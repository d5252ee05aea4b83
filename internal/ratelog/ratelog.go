// Package ratelog keeps a failure that repeats on every request from
// flooding the log: the first occurrence of a message is logged at once,
// later ones at most once per interval, with how many were held back.
//
// A full or read-only WAL fails every push; logging two lines each is
// thousands of lines a minute that bury the one line that matters. With a
// Logger the log shows the first failure in full, then one line per
// interval:
//
//	level=ERROR msg="wal: write failed; ..." err=...
//	level=ERROR msg="wal: write failed; ..." err=... repeated=412 over=10s
//
// where repeated counts the occurrences since the previous line (this one
// included) and over is the time they span. Occurrences are told apart by
// their message only: the attributes (the error text, sizes) of the lines
// held back are dropped, those of the line written are the latest.
//
// There is no background flush: a count is reported with the next
// occurrence after the interval, so when a failure stops, the last up to
// one interval's worth of repeats is never reported (the failure stopped;
// the lines that were written say so).
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is the least time between two lines of one message.
const DefaultInterval = 10 * time.Second

// Logger rate-limits lines per message. It is safe for concurrent use.
// The zero value is not usable; build one with New.
type Logger struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	msgs map[string]*state
}

type state struct {
	last time.Time // when the last line of this message was written
	held int       // occurrences since then that were not written
}

// New returns a Logger writing to log (slog.Default() when nil) at most one
// line per message per interval (DefaultInterval when interval <= 0).
func New(log *slog.Logger, interval time.Duration) *Logger {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Logger{log: log, interval: interval, now: time.Now, msgs: map[string]*state{}}
}

// Error logs msg at error level, subject to the rate limit (see the package
// comment). args are slog key-value pairs, as for slog.Logger.Error.
func (l *Logger) Error(msg string, args ...any) { l.Log(slog.LevelError, msg, args...) }

// Warn logs msg at warn level, subject to the rate limit.
func (l *Logger) Warn(msg string, args ...any) { l.Log(slog.LevelWarn, msg, args...) }

// Log logs msg at level unless a line of the same msg was written less
// than the interval ago; then it only counts it. A written line that
// follows held-back ones carries "repeated" (occurrences since the
// previous line, this one included) and "over" (the time since it).
func (l *Logger) Log(level slog.Level, msg string, args ...any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	now := l.now()
	l.mu.Lock()
	st, ok := l.msgs[msg]
	if !ok {
		st = &state{}
		l.msgs[msg] = st
	}
	if ok && now.Sub(st.last) < l.interval {
		st.held++
		l.mu.Unlock()
		return
	}
	held, since := st.held, now.Sub(st.last)
	st.last, st.held = now, 0
	l.mu.Unlock()
	if held > 0 {
		args = append(args, "repeated", held+1, "over", since.Round(time.Millisecond))
	}
	l.log.Log(context.Background(), level, msg, args...)
}
