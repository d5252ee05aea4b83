package wal

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAppendEnvelopedAsync: the outcome of an asynchronous append comes as
// exactly one onDone call, after onAssign, with the record's index once it
// is durable (DurableIndex covers it when onDone runs, and the record reads
// back); a failed fsync reports the error and leaves the index unused (the
// next record gets it); a closed log refuses at once without calling
// onDone.
func TestAppendEnvelopedAsync(t *testing.T) {
	t.Parallel()
	var failNext atomic.Bool
	injected := errors.New("injected fsync error")
	opts := Options{Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		if failNext.CompareAndSwap(true, false) {
			return injected
		}
		return f.Sync()
	}
	l, _ := openLog(t, filepath.Join(t.TempDir(), "wal"), opts)
	type outcome struct {
		assigned, index, durable uint64
		err                      error
	}
	appendAsync := func(payload []byte) outcome {
		t.Helper()
		rec := append(make([]byte, HeaderSize), payload...)
		var assigned atomic.Uint64
		got := make(chan outcome, 2) // a second call would be seen below
		err := l.AppendEnvelopedAsync(rec, func(i uint64) { assigned.Store(i) }, func(i uint64, err error) {
			got <- outcome{assigned.Load(), i, l.DurableIndex(), err}
		})
		if err != nil {
			t.Fatalf("AppendEnvelopedAsync: %v", err)
		}
		o := <-got
		select {
		case o2 := <-got:
			t.Fatalf("onDone called twice: %+v then %+v", o, o2)
		default:
		}
		return o
	}
	p1 := testPayload(1, 100)
	o := appendAsync(p1)
	if o.err != nil || o.index != 1 || o.assigned != 1 || o.durable < 1 {
		t.Fatalf("first append: %+v; want index 1, assigned 1, durable >= 1, no error", o)
	}
	if got, err := l.Read(1); err != nil || string(got) != string(p1) {
		t.Fatalf("Read(1) = %q, %v", got, err)
	}
	failNext.Store(true)
	if o := appendAsync(testPayload(2, 100)); !errors.Is(o.err, injected) || l.DurableIndex() != 1 {
		t.Fatalf("append with a failing fsync: %+v, durable %d; want the injected error, durable 1", o, l.DurableIndex())
	}
	p3 := testPayload(3, 100)
	if o := appendAsync(p3); o.err != nil || o.index != 2 {
		t.Fatalf("append after the failure: %+v; want index 2 (the failed one's), no error", o)
	}
	if got, err := l.Read(2); err != nil || string(got) != string(p3) {
		t.Fatalf("Read(2) = %q, %v", got, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	err := l.AppendEnvelopedAsync(make([]byte, HeaderSize+1), nil, func(uint64, error) { called = true })
	if !errors.Is(err, ErrClosed) || called {
		t.Fatalf("after Close: %v (onDone called: %v); want ErrClosed without onDone", err, called)
	}
}

// TestAppendQueuedWhileWriterBusy: appends made while the writer is busy
// with a group commit's fsync are queued without waiting for it
// (AppendEnvelopedAsync returns at once), and every queued append is
// finished exactly once, written or, when Close comes first, ErrClosed.
func TestAppendQueuedWhileWriterBusy(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	held := make(chan struct{})
	release := make(chan struct{})
	opts := Options{Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return f.Sync()
	}
	l, _ := openLog(t, filepath.Join(t.TempDir(), "wal"), opts)
	hold.Store(true)
	first := make(chan error, 1)
	go func() { _, err := l.Append(testPayload(0, 10), nil); first <- err }()
	<-held // the writer is in the first group commit's fsync
	const n = 50
	var calls [n]atomic.Int32
	var outcomes [n]error
	var finished sync.WaitGroup
	finished.Add(n)
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		for i := 0; i < n; i++ {
			rec := append(make([]byte, HeaderSize), testPayload(i+1, 10)...)
			err := l.AppendEnvelopedAsync(rec, nil, func(_ uint64, err error) {
				outcomes[i] = err
				calls[i].Add(1)
				finished.Done()
			})
			if err != nil {
				t.Errorf("append %d: %v", i, err)
				finished.Done()
			}
		}
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("appends waited for the writer's fsync")
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("held append: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	finished.Wait()
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("append %d finished %d times", i, c)
		}
		if err := outcomes[i]; err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("append %d: %v; want nil or ErrClosed", i, err)
		}
	}
}
