// Package logbuf is a log sink for tests: an io.Writer (say for
// slog.NewTextHandler) that logging goroutines and the test may use at
// once. A leaf package, so that any package's own tests can import it.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; String is all of it so far. The
// zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
