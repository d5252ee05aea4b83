package wal

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestSegmentBufferLaggingCursorsSeekBack: two cursors far behind the
// writer (so they read sealed segments loaded from their files, into
// reused buffers) hold batches at different paces while appends roll
// segments, and one of them rewinds as the projector does: to its release
// mark after a failed commit, and below it after a database restore (a
// Seek back past what it released, reading the records again). Every
// payload a cursor still holds, and every record read again, must read as
// appended: a buffer reused under one shows up as changed bytes, or as a
// data race under -race. Segments are truncated meanwhile past what the
// slow cursor holds (its payloads stay as read; it skips to the first
// kept record).
func TestSegmentBufferLaggingCursorsSeekBack(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{SegmentSize: 4 << 10, NoSync: true, Logger: discardLogger()})
	l := b.log
	const first, more = 600, 600 // about 40 segments each
	for i := 1; i <= first; i++ {
		if _, err := l.Append(reusePayload(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer keeps rolling segments meanwhile
		defer wg.Done()
		for i := first + 1; i <= first+more; i++ {
			if _, err := l.Append(reusePayload(i), nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	check := func(who string, es []Entry) {
		t.Helper()
		for _, e := range es {
			if want := reusePayload(int(e.Index)); !bytes.Equal(e.Payload, want) {
				t.Fatalf("%s: record %d reads %.20q, want %.20q", who, e.Index, e.Payload, want)
			}
		}
	}
	const total = first + more
	rng := rand.New(rand.NewPCG(1, 2))
	a, slow := l.NewCursor(1), l.NewCursor(1)
	defer a.Close()
	defer slow.Close()
	var aHeld [][]Entry // batches read, not yet "committed"
	var aReleased uint64
	var slowHeld []Entry
	rewinds, restores := 0, 0
	var truncated uint64
	for step := 0; a.Position() <= total || slow.Position() <= total; step++ {
		if step > 200000 {
			t.Fatalf("no progress: cursors at %d and %d of %d", a.Position(), slow.Position(), total)
		}
		es, err := a.Next(1+rng.IntN(30), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		check("cursor", es)
		if len(es) > 0 {
			aHeld = append(aHeld, es)
		}
		for _, h := range aHeld {
			check("cursor, held", h)
		}
		switch r := rng.IntN(20); {
		case r == 0 && len(aHeld) > 0: // a failed commit: read again from the mark
			aHeld = nil
			a.Seek(aReleased + 1)
			rewinds++
		case r == 1 && aReleased > 100: // a restored database: re-project from further back
			aHeld = nil
			aReleased -= uint64(1 + rng.IntN(100))
			a.Seek(aReleased + 1)
			restores++
		case len(aHeld) > 2: // the oldest batch is committed
			aReleased = aHeld[0][len(aHeld[0])-1].Index
			a.Release(aReleased)
			aHeld = aHeld[1:]
		}
		if step%5 == 0 { // the slow cursor: one batch held for five steps
			check("slow cursor, held", slowHeld)
			if len(slowHeld) > 0 {
				slow.Release(slowHeld[len(slowHeld)-1].Index)
			}
			es, err := slow.Next(1+rng.IntN(60), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			check("slow cursor", es)
			slowHeld = append(slowHeld[:0], es...)
		}
		if step%40 == 0 { // truncation past what the slow cursor holds (a cursor may lag a checkpoint)
			if _, err := l.TruncateProjected(a.Position()-1, 0); err != nil {
				t.Fatal(err)
			}
			truncated = l.FirstIndex()
		}
		if a.Position() > total && slow.Position() > total {
			break
		}
	}
	wg.Wait()
	t.Logf("%d rewinds, %d restores, truncated to %d, %d buffers reused", rewinds, restores, truncated, reusedBuffers(l))
	if reusedBuffers(l) == 0 {
		t.Fatal("no segment buffer reused: the test did not exercise reuse")
	}
}

// TestSegmentBufferHeldAcrossRollback: fsyncs fail now and then (the log
// rolls back to its durable index and reopens, with a new segment store)
// while a cursor holds batches read from the store before the rollback
// and from the one after; appends roll segments throughout, so that both
// stores drop buffers. Every held payload stays as read, every record
// appended successfully reads as appended, and buffers are still reused
// after the rollbacks.
func TestSegmentBufferHeldAcrossRollback(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		syncs int
	)
	errInjected := errors.New("injected fsync error")
	opts := Options{SegmentSize: 4 << 10, Logger: discardLogger()}
	opts.fsyncHook = func(f *os.File) error {
		mu.Lock()
		syncs++
		fail := syncs%151 == 0
		mu.Unlock()
		if fail {
			return errInjected
		}
		return nil // no disk sync needed for this test
	}
	l, _ := openLog(t, filepath.Join(t.TempDir(), "wal"), opts)
	want := map[uint64][]byte{}
	c := l.NewCursor(1)
	defer c.Close()
	var held [][]Entry
	check := func(who string, es []Entry) {
		t.Helper()
		for _, e := range es {
			if !bytes.Equal(e.Payload, want[e.Index]) {
				t.Fatalf("%s: record %d reads %.20q, want %.20q", who, e.Index, e.Payload, want[e.Index])
			}
		}
	}
	failed := 0
	for n := 1; n <= 1500; n++ {
		p := reusePayload(n)
		idx, err := l.Append(p, nil)
		if errors.Is(err, errInjected) {
			failed++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		want[idx] = p
		es, err := c.Next(1+n%5, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		check("cursor", es)
		if len(es) > 0 {
			held = append(held, es)
		}
		for _, h := range held {
			check("cursor, held", h)
		}
		// Keep the last 1 to 40 records read (up to about four segments of
		// records): sometimes the segment a roll drops is still held. The
		// last appends keep up, so that rolls reuse buffers.
		keep := 1
		if n <= 1300 {
			keep += (n / 50) % 40
		}
		for ; len(held) > keep; held = held[1:] {
			c.Release(held[0][len(held[0])-1].Index)
		}
	}
	if failed == 0 {
		t.Fatal("no fsync failed: the test did not exercise rollback")
	}
	for idx, p := range want {
		got, err := l.Read(idx)
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("Read(%d) = %.20q, %v; want %.20q", idx, got, err, p)
		}
	}
	if reusedBuffers(l) == 0 {
		t.Fatal("no segment buffer reused since the last rollback")
	}
	t.Logf("%d appends failed, %d buffers reused since the last rollback", failed, reusedBuffers(l))
}
