package ingest

import (
	"context"
	"testing"

	"github.com/queenmq/queen-go/wal"
)

type openGate struct{}

func (openGate) Accepting() bool { return true }

// BenchmarkPipelinePush: one push through Pipeline.Push with a real WAL
// (fsync off: the disk is not what is measured) and a stand-in projector
// that answers every durable record queued at once, so what is measured
// is the broker's own work per push: parse, mint, encode, the group
// commit hand-off and the verdict wait. Pushes run from 8 goroutines, as
// 8 connections would.
func BenchmarkPipelinePush(b *testing.B) {
	for _, sh := range benchShapes {
		body := benchBody(sh.items, 256, sh.txid)
		b.Run(sh.name, func(b *testing.B) {
			l := openTestWAL(b)
			reg := NewRegistry()
			verdicts := make([]Verdict, sh.items) // every durable record is queued
			stop := startStandInProjector(l, reg, func(uint64) ([]Verdict, bool) { return verdicts, true })
			p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false }}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.SetParallelism(4) // 8 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := p.Push(context.Background(), body, nil)
					if err != nil || len(res) != sh.items || res[0].Status != StatusQueued {
						b.Errorf("push: %v %v", err, res[:min(len(res), 1)])
						return
					}
				}
			})
			b.StopTimer()
			stop()
		})
	}
}

// openTestWAL opens a WAL in a fresh temp dir with fsync off (NoSync) and
// closes it at cleanup.
func openTestWAL(tb testing.TB) *wal.Log {
	tb.Helper()
	l, _, err := wal.Open(tb.TempDir(), wal.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// startStandInProjector plays the projector for a pipeline test: for each
// record of l that becomes durable, in index order from 1, it delivers
// verdicts(index) to reg; verdicts answering false stops it. stop ends it
// and waits until it has returned.
func startStandInProjector(l *wal.Log, reg *Registry, verdicts func(index uint64) ([]Verdict, bool)) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := uint64(1)
		for {
			select {
			case <-l.Notify():
			case <-quit:
				return
			}
			for ; next <= l.DurableIndex(); next++ {
				v, ok := verdicts(next)
				if !ok {
					return
				}
				reg.Deliver(next, v)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// BenchmarkPipelinePushWait: one-item pushes from 64 goroutines (64
// connections on 2 cores), through a real WAL (fsync off) and the stand-in
// projector, waiting under the two kinds of context a push can have: one
// that ends, shared by every push (the HTTP server's request context,
// whose done channel is the server's: the wait is a select that queues
// each push on it), and one that cannot end (what the server passes since
// it drains the Registry at shutdown: the wait is a plain receive).
func BenchmarkPipelinePushWait(b *testing.B) {
	body := benchBody(1, 256, "")
	shared, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"ctx=shared-done", shared}, {"ctx=without-cancel", context.WithoutCancel(shared)}} {
		b.Run(c.name, func(b *testing.B) {
			l := openTestWAL(b)
			reg := NewRegistry()
			verdicts := make([]Verdict, 1)
			stop := startStandInProjector(l, reg, func(uint64) ([]Verdict, bool) { return verdicts, true })
			p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false }}
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := p.Push(c.ctx, body, nil)
					if err != nil || len(res) != 1 || res[0].Status != StatusQueued {
						b.Errorf("push: %v %v", err, res)
						return
					}
				}
			})
			b.StopTimer()
			stop()
		})
	}
}
