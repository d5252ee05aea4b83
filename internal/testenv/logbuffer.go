package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer is a log sink (an io.Writer, say for slog.NewTextHandler)
// that the logging goroutines and the test may use at once; String is
// what was written so far.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
