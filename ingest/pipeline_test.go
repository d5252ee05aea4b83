package ingest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/wal"
)

// TestPipelinePushResults: a push of items with and without a
// transactionId, through a real WAL and a stand-in projector that answers
// the first item duplicate: every result names its own item's ids, the
// record in the WAL holds the same ids, and reused buffers (a second push
// right after) do not leak into the first push's answer.
func TestPipelinePushResults(t *testing.T) {
	l := openTestWAL(t)
	reg := NewRegistry()
	orig := uuid.New()
	stop := startStandInProjector(l, reg, func(index uint64) ([]Verdict, bool) {
		p, err := l.Read(index)
		if err != nil {
			t.Error(err)
			return nil, false
		}
		v := make([]Verdict, ItemCount(p))
		v[0] = Verdict{Duplicate: true, MessageID: orig}
		return v, true
	})
	defer stop()
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false },
		VerdictTimeout: 10 * time.Second}
	body := []byte(`{"items":[
		{"queue":"q","payload":1,"transactionId":"dup-1"},
		{"queue":"q","partition":"p","payload":2},
		{"queue":"r","payload":3,"transactionId":"tx-3"},
		{"queue":"q","payload":4}]}`)
	res, err := p.Push(context.Background(), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(context.Background(), []byte(`{"items":[{"queue":"z","payload":0,"transactionId":"other"}]}`), nil); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status Status
		txid   string
		queue  string
	}{{StatusDuplicate, "dup-1", "q"}, {StatusQueued, "", "q"}, {StatusQueued, "tx-3", "r"}, {StatusQueued, "", "q"}}
	if len(res) != len(want) {
		t.Fatalf("%d results", len(res))
	}
	rec, err := l.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, w := range want {
		g := res[i]
		if g.Index != i || g.Status != w.status || g.QueueName != w.queue {
			t.Errorf("result %d: %+v", i, g)
		}
		id, err := uuid.Parse(g.MessageID)
		if err != nil {
			t.Fatalf("result %d: message_id %q: %v", i, g.MessageID, err)
		}
		if w.status == StatusDuplicate {
			if id != orig || g.TransactionID != w.txid {
				t.Errorf("result %d: duplicate names %s / %q, want the original %s", i, id, g.TransactionID, orig)
			}
			continue
		}
		if id.Version() != 7 || id != r.Items[i].MessageID || seen[g.MessageID] {
			t.Errorf("result %d: message_id %s (version %d), record has %s", i, id, id.Version(), r.Items[i].MessageID)
		}
		seen[g.MessageID] = true
		switch {
		case w.txid == "" && g.TransactionID != g.MessageID:
			t.Errorf("result %d: minted transaction_id %q is not the message_id %q", i, g.TransactionID, g.MessageID)
		case w.txid != "" && g.TransactionID != w.txid:
			t.Errorf("result %d: transaction_id %q, want %q", i, g.TransactionID, w.txid)
		}
		if r.Items[i].TransactionID != g.TransactionID {
			t.Errorf("result %d: record's transaction id %q, answer's %q", i, r.Items[i].TransactionID, g.TransactionID)
		}
	}
}

// TestPipelinePushCancelled: a push whose context has ended (server
// shutdown) is still answered only once its record is durable: buffered,
// with the record in the WAL, and the waiter's buffers reused safely by the
// pushes after it (-race).
func TestPipelinePushCancelled(t *testing.T) {
	l := openTestWAL(t)
	reg := NewRegistry()
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false },
		VerdictTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 1; i <= 20; i++ {
		res, err := p.Push(ctx, []byte(`{"items":[{"queue":"q","payload":1}]}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Status != StatusBuffered {
			t.Fatalf("push %d: %+v, want buffered", i, res)
		}
		if d := l.DurableIndex(); d < uint64(i) {
			t.Fatalf("push %d answered with the WAL durable to %d", i, d)
		}
	}
	if reg.Waiting(20) {
		t.Fatal("a cancelled push is still registered")
	}
}

// TestPipelinePushDrained: a push waiting under a context that cannot end
// (the HTTP server's) is answered buffered by Registry.Drain, and so is
// every push after it, once its record is durable, while no verdict ever
// comes.
func TestPipelinePushDrained(t *testing.T) {
	l := openTestWAL(t)
	reg := NewRegistry()
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false },
		VerdictTimeout: time.Minute}
	body := []byte(`{"items":[{"queue":"q","payload":1}]}`)
	type answer struct {
		res []Result
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := p.Push(context.WithoutCancel(context.Background()), body, nil)
		first <- answer{res, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !reg.Waiting(1) { // durable and waiting for a verdict that never comes
		if time.Now().After(deadline) {
			t.Fatal("the push never waited for its verdict")
		}
		time.Sleep(time.Millisecond)
	}
	reg.Drain()
	select {
	case a := <-first:
		if a.err != nil || len(a.res) != 1 || a.res[0].Status != StatusBuffered {
			t.Fatalf("waiting push: %+v, %v; want buffered", a.res, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not answer the waiting push")
	}
	for i := 2; i <= 5; i++ {
		res, err := p.Push(context.Background(), body, nil)
		if err != nil || len(res) != 1 || res[0].Status != StatusBuffered {
			t.Fatalf("push %d after Drain: %+v, %v; want buffered", i, res, err)
		}
		if d := l.DurableIndex(); d < uint64(i) {
			t.Fatalf("push %d answered with the WAL durable to %d", i, d)
		}
	}
}

// TestPipelinePushWALFull: a push the WAL refuses (its byte cap, reported
// by the WAL writer after the push handed its record over) is answered
// failed, promptly, and nothing is registered for it; the pushes before it
// were queued.
func TestPipelinePushWALFull(t *testing.T) {
	l, _, err := wal.Open(t.TempDir(), wal.Options{NoSync: true, SegmentSize: 4096, MaxBytes: 4 * 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	reg := NewRegistry()
	stop := startStandInProjector(l, reg, func(index uint64) ([]Verdict, bool) { return []Verdict{{}}, true })
	defer stop()
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false },
		VerdictTimeout: 10 * time.Second}
	body := []byte(`{"items":[{"queue":"q","payload":"` + strings.Repeat("x", 1000) + `"}]}`)
	for i := 0; i < 100; i++ {
		start := time.Now()
		res, err := p.Push(context.Background(), body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("push %d answered after %v", i, d)
		}
		switch res[0].Status {
		case StatusQueued:
			continue
		case StatusFailed:
			if i == 0 {
				t.Fatal("the first push failed")
			}
			if reg.Waiting(l.DurableIndex() + 1) {
				t.Fatal("a failed push is still registered")
			}
			return
		default:
			t.Fatalf("push %d: %q, want queued until the cap, then failed", i, res[0].Status)
		}
	}
	t.Fatal("the WAL never reached its cap")
}

// TestPipelineObserveStages: a push answered with verdicts is observed
// once, with its wal stage ending when the record was fsynced and its
// projection stage covering the stand-in projector's delay (30 ms, from
// the record's durability to its verdicts); both stages fit inside the
// push's own duration. A push answered buffered (the gate closed) is not
// observed.
func TestPipelineObserveStages(t *testing.T) {
	const delay = 30 * time.Millisecond
	l := openTestWAL(t)
	reg := NewRegistry()
	stop := startStandInProjector(l, reg, func(index uint64) ([]Verdict, bool) {
		time.Sleep(delay)
		return []Verdict{{}}, true
	})
	defer stop()
	type obs struct{ wal, projection time.Duration }
	var got []obs
	p := &Pipeline{WAL: l, Registry: reg, Gate: openGate{}, Maintenance: func() bool { return false },
		VerdictTimeout: 10 * time.Second,
		ObserveStages:  func(w, pr time.Duration) { got = append(got, obs{w, pr}) }}
	start := time.Now()
	res, err := p.Push(context.Background(), []byte(`{"items":[{"queue":"q","payload":1}]}`), nil)
	total := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != StatusQueued {
		t.Fatalf("status %q", res[0].Status)
	}
	if len(got) != 1 {
		t.Fatalf("%d observations, want 1", len(got))
	}
	o := got[0]
	if o.wal <= 0 || o.wal >= delay {
		t.Errorf("wal stage %v: want above 0 and below the projector's delay %v", o.wal, delay)
	}
	if o.projection < delay {
		t.Errorf("projection stage %v: want at least the projector's delay %v", o.projection, delay)
	}
	if o.wal+o.projection > total {
		t.Errorf("stages %v + %v exceed the push's %v", o.wal, o.projection, total)
	}

	p.Gate = closedGate{}
	res, err = p.Push(context.Background(), []byte(`{"items":[{"queue":"q","payload":2}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != StatusBuffered {
		t.Fatalf("status with the gate closed %q, want buffered", res[0].Status)
	}
	if len(got) != 1 {
		t.Errorf("a buffered push was observed: %d observations", len(got))
	}
}
