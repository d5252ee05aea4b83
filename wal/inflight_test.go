package wal

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestInFlight: InFlight is false while the log is idle, true while a
// group commit is written and fsynced (past DurableIndex), false again
// once it is durable, and false after a failed fsync, whose records never
// become durable (the index is assigned again to the next append).
func TestInFlight(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	held := make(chan struct{})
	gate := make(chan error)
	opts := Options{Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			if err := <-gate; err != nil {
				return err
			}
		}
		return f.Sync()
	}
	l, _ := openLog(t, filepath.Join(t.TempDir(), "wal"), opts)
	if l.InFlight() {
		t.Fatal("InFlight on a fresh log")
	}
	appendHeld := func(fsyncErr error) (uint64, error) {
		t.Helper()
		type res struct {
			idx uint64
			err error
		}
		done := make(chan res, 1)
		hold.Store(true)
		go func() {
			idx, err := l.Append(testPayload(1, 100), nil)
			done <- res{idx, err}
		}()
		<-held
		if !l.InFlight() {
			t.Error("InFlight false while a group commit is fsynced")
		}
		gate <- fsyncErr
		r := <-done
		return r.idx, r.err
	}
	injected := errors.New("injected fsync error")
	if _, err := appendHeld(injected); !errors.Is(err, injected) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	if l.InFlight() || l.DurableIndex() != 0 {
		t.Fatalf("after a failed fsync: InFlight %v, durable %d; want false, 0", l.InFlight(), l.DurableIndex())
	}
	if idx, err := appendHeld(nil); err != nil || idx != 1 {
		t.Fatalf("the append after the failure: index %d, %v; want 1", idx, err)
	}
	if l.InFlight() || l.DurableIndex() != 1 {
		t.Fatalf("after the fsync: InFlight %v, durable %d; want false, 1", l.InFlight(), l.DurableIndex())
	}
}
