package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAppendAsyncStress: asynchronous and synchronous appends from many
// goroutines, with fsyncs failing at random, the byte cap reached and
// Close coming while appends are still being made. Every append handed
// over is finished exactly once (onDone, or the synchronous return),
// onAssign comes before onDone with the same index, a success is reported
// only once DurableIndex covers it, and the successes are exactly the
// records the log holds: indexes 1..DurableIndex, each with the payload
// of the append that was told it succeeded (the caller overwrites its
// record buffer as soon as onDone has run, as a push reusing its buffer
// does, which must not reach the log). Half the records are handed over
// in pieces (AppendGathered, AppendGatheredAsync), as pushes hand theirs.
func TestAppendAsyncStress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		maxBytes int64
	}{{"NoCap", 0}, {"Cap", 6 * 4096}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testAppendAsyncStress(t, c.maxBytes)
		})
	}
}

func testAppendAsyncStress(t *testing.T, maxBytes int64) {
	var fsyncs atomic.Int64
	injected := errors.New("injected fsync error")
	opts := Options{Logger: discardLogger(), SegmentSize: 4096, MaxBytes: maxBytes}
	opts.fsyncHook = func(f *os.File) error {
		if fsyncs.Add(1)%7 == 0 {
			return injected
		}
		return nil // the disk is not what is tested
	}
	dir := filepath.Join(t.TempDir(), "wal")
	l, _ := openLog(t, dir, opts)

	type outcome struct {
		payload  string
		assigned uint64
		index    uint64
		err      error
		calls    int
	}
	var (
		mu       sync.Mutex
		outcomes []*outcome
		bad      []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		bad = append(bad, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	const workers, perWorker = 8, 300
	var wg sync.WaitGroup
	var pending sync.WaitGroup
	closeAt := make(chan struct{})
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < perWorker; i++ {
				if g == 0 && i == perWorker/2 {
					close(closeAt)
				}
				payload := testPayload(g*perWorker+i, 20+rng.IntN(300))
				o := &outcome{payload: string(payload)}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				rec := append(make([]byte, HeaderSize), payload...)
				// Half the records go over in pieces (AppendGathered*, as
				// pushes do), each a slice of rec.
				var vec [][]byte
				if rng.IntN(2) == 0 {
					cut := HeaderSize + rng.IntN(len(payload)+1)
					vec = [][]byte{rec[:cut], rec[cut:cut], rec[cut:]}
				}
				if rng.IntN(4) == 0 {
					var idx uint64
					var err error
					if vec != nil {
						idx, err = l.AppendGathered(vec, func(i uint64) { o.assigned = i })
					} else {
						idx, err = l.AppendEnveloped(rec, func(i uint64) { o.assigned = i })
					}
					o.index, o.err, o.calls = idx, err, 1
					if err == nil && l.DurableIndex() < idx {
						fail("sync append %d returned before DurableIndex covered it", idx)
					}
					clear(rec)
					continue
				}
				pending.Add(1)
				appendAsync := func(assign func(uint64), done func(uint64, error)) error {
					if vec != nil {
						return l.AppendGatheredAsync(vec, assign, done)
					}
					return l.AppendEnvelopedAsync(rec, assign, done)
				}
				err := appendAsync(func(i uint64) { o.assigned = i }, func(i uint64, err error) {
					defer pending.Done()
					o.calls++
					o.index, o.err = i, err
					if err == nil && (o.assigned != i || l.DurableIndex() < i) {
						fail("onDone(%d) with assigned %d, DurableIndex %d", i, o.assigned, l.DurableIndex())
					}
					clear(rec) // the caller's buffer is its own again
				})
				if err != nil {
					pending.Done()
					o.err, o.calls = err, 1
					if !errors.Is(err, ErrClosed) {
						fail("AppendEnvelopedAsync: %v", err)
					}
				}
			}
		}()
	}
	<-closeAt
	time.Sleep(time.Millisecond)
	if err := l.Close(); err != nil && !errors.Is(err, injected) { // Close's own fsync may be one that fails
		t.Fatalf("Close: %v", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an append handed over was never finished") // (the hung appends leak: the test binary fails anyway)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	durable := l.DurableIndex()
	byIndex := make(map[uint64]string)
	for _, o := range outcomes {
		if o.calls != 1 {
			t.Fatalf("append %.12q finished %d times", o.payload, o.calls)
		}
		if o.err != nil {
			continue
		}
		if prev, dup := byIndex[o.index]; dup {
			t.Fatalf("index %d reported to two appends (%.12q, %.12q)", o.index, prev, o.payload)
		}
		byIndex[o.index] = o.payload
	}
	t.Logf("%d appends, %d durable, %d fsyncs", len(outcomes), durable, fsyncs.Load())
	if uint64(len(byIndex)) != durable {
		t.Fatalf("%d appends succeeded, DurableIndex %d", len(byIndex), durable)
	}
	if maxBytes == 0 && durable == 0 {
		t.Fatal("nothing was written")
	}
	l2, _ := openLog(t, dir, Options{Logger: discardLogger(), SegmentSize: 4096})
	if got := l2.DurableIndex(); got != durable {
		t.Fatalf("reopened log durable to %d, want %d", got, durable)
	}
	for i := uint64(1); i <= durable; i++ {
		want, ok := byIndex[i]
		if !ok {
			t.Fatalf("index %d durable but no append was told so", i)
		}
		got, err := l2.Read(i)
		if err != nil || string(got) != want {
			t.Fatalf("Read(%d) = %.12q, %v; want %.12q", i, got, err, want)
		}
	}
}
