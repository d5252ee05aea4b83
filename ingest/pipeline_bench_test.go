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
			l, _, err := wal.Open(b.TempDir(), wal.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			reg := NewRegistry()
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // the projector: every durable record is queued
				defer close(done)
				verdicts := make([]Verdict, sh.items)
				next := uint64(1)
				for {
					select {
					case <-l.Notify():
					case <-stop:
						return
					}
					for ; next <= l.DurableIndex(); next++ {
						reg.Deliver(next, verdicts)
					}
				}
			}()
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
			close(stop)
			<-done
		})
	}
}
