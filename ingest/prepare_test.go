package ingest

import (
	"context"
	"testing"
	"time"
)

// TestPipelinePrepareBeforeAppend: Prepare sees a valid push's items
// before its record is in the WAL, once per push; it is not called for an
// invalid push, nor while the gate is closed or push maintenance is on
// (those pushes are answered buffered without waiting, and the projector
// creates their partitions when it can).
func TestPipelinePrepareBeforeAppend(t *testing.T) {
	l := openTestWAL(t)
	reg := NewRegistry()
	stop := startStandInProjector(l, reg, func(index uint64) ([]Verdict, bool) {
		p, err := l.Read(index)
		if err != nil {
			t.Error(err)
			return nil, false
		}
		return make([]Verdict, ItemCount(p)), true
	})
	defer stop()
	type call struct {
		pairs   [][2]string
		durable uint64
	}
	var calls []call
	maintenance := false
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return maintenance },
		VerdictTimeout: 10 * time.Second, Prepare: func(items []Item) {
			c := call{durable: l.DurableIndex()}
			for _, it := range items {
				c.pairs = append(c.pairs, [2]string{it.Queue, it.Partition})
			}
			calls = append(calls, c)
		}}
	ctx := context.Background()
	body := []byte(`{"items":[{"queue":"q","payload":1},{"queue":"r","partition":"p","payload":2}]}`)
	res, err := p.Push(ctx, body, nil)
	if err != nil || res[0].Status != StatusQueued {
		t.Fatalf("push: %+v, %v", res, err)
	}
	if len(calls) != 1 || calls[0].durable != 0 || len(calls[0].pairs) != 2 ||
		calls[0].pairs[0] != [2]string{"q", "Default"} || calls[0].pairs[1] != [2]string{"r", "p"} {
		t.Fatalf("Prepare calls %+v, want one with q/Default and r/p before the first record", calls)
	}
	if _, err := p.Push(ctx, []byte(`{"items":[{"queue":"","payload":1}]}`), nil); err == nil {
		t.Fatal("invalid push accepted")
	}
	maintenance = true
	if res, err := p.Push(ctx, body, nil); err != nil || res[0].Status != StatusBuffered {
		t.Fatalf("push in maintenance: %+v, %v", res, err)
	}
	maintenance = false
	p.Gate = closedGate{}
	if res, err := p.Push(ctx, body, nil); err != nil || res[0].Status != StatusBuffered {
		t.Fatalf("push with the gate closed: %+v, %v", res, err)
	}
	if len(calls) != 1 {
		t.Fatalf("Prepare called %d times, want once (only the first push)", len(calls))
	}
}
