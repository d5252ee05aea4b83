package projector_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// openWAL opens a WAL with opts in a directory of the test's, closed when
// the test ends.
func openWAL(t *testing.T, opts wal.Options) *wal.Log {
	t.Helper()
	w, _, err := wal.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// openStore opens a Store of 4 connections on the database at url, closed
// when the test ends.
func openStore(t *testing.T, url string) *pg.Store {
	t.Helper()
	store, err := pg.Open(pg.Config{URL: url, PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}

// record returns a push record of n items to queue q, partition "P",
// transaction ids prefix0..prefix(n-1).
func record(q, prefix string, n int) []byte {
	r := &ingest.Record{AcceptedAt: time.Now().UnixMicro()}
	for i := 0; i < n; i++ {
		r.Items = append(r.Items, ingest.Item{Queue: q, Partition: "P", TransactionID: fmt.Sprintf("%s%d", prefix, i),
			MessageID: uuid.Must(uuid.NewV7()), Payload: []byte(fmt.Sprint(i))})
	}
	return ingest.EncodeRecord(nil, r)
}

// TestBatchesAndPieces: with MaxBatchItems 10, records of 3, 4, 5, 25 and 2
// items are projected as batches of 7 (3+4: the 5 would not fit), 5 (the 25
// would not fit), 10 and 10 (the 25 in pieces) and 7 (its last 5 and the
// 2), every item stored once in WAL order, the checkpoint at the last
// record with no record in pieces.
func TestBatchesAndPieces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := openWAL(t, wal.Options{})
	store := openStore(t, testenv.NewDatabase(t))
	sizes := []int{3, 4, 5, 25, 2}
	for i, n := range sizes {
		if _, err := w.Append(record("q", fmt.Sprintf("r%d-", i), n), nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var batches []int
	id := uuid.New()
	p := projector.New(projector.Config{BrokerID: id, MaxBatchItems: 10, Logger: testenv.Logger,
		ObserveBatch: func(items int, _ time.Duration, err error) {
			if err == nil {
				mu.Lock()
				batches = append(batches, items)
				mu.Unlock()
			}
		}}, w, store, ingest.NewRegistry())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	testenv.WaitFor(t, 30*time.Second, "every record projected", func() bool { return p.Checkpoint() == uint64(len(sizes)) })
	p.Stop()
	mu.Lock()
	if got := fmt.Sprint(batches); got != "[7 5 10 10 7]" {
		t.Errorf("batches of %s items, want [7 5 10 10 7]", got)
	}
	mu.Unlock()
	msgs, err := store.ReadPartition(ctx, "q", "P")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, n := range sizes {
		for k := 0; k < n; k++ {
			want = append(want, fmt.Sprintf("r%d-%d", i, k))
		}
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages stored, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if m.TransactionID != want[i] || m.Offset != int64(i) {
			t.Fatalf("offset %d: %s at %d, want %s", i, m.TransactionID, m.Offset, want[i])
		}
	}
	cp, ok, err := store.Checkpoint(ctx, id)
	if err != nil || !ok || cp.Index != uint64(len(sizes)) || cp.PartialItems != 0 {
		t.Fatalf("checkpoint %+v %v %v, want record %d whole", cp, ok, err, len(sizes))
	}
}

// pauseSwitch is a Config.Maintenance that a test turns on and off.
type pauseSwitch struct{ on atomic.Bool }

func (m *pauseSwitch) PushEnabled() bool { return m.on.Load() }

// TestSmallBatchWaitsForGroupCommit: a batch smaller than MinBatchItems
// waits for the WAL group commit in flight (its fsync held here) and takes
// its record too; with MinBatchItems negative, or when the fsync takes
// longer than MaxBatchWait, it goes alone.
func TestSmallBatchWaitsForGroupCommit(t *testing.T) {
	for _, c := range []struct {
		name     string
		min      int
		wait     time.Duration
		hold     time.Duration
		want     string
		minTaken time.Duration // the first batch is not committed before this
	}{
		{"waits", 0, 10 * time.Second, 300 * time.Millisecond, "[2]", 300 * time.Millisecond},
		{"off", -1, 10 * time.Second, 2 * time.Second, "[1 1]", 0},
		{"bounded", 0, 100 * time.Millisecond, 2 * time.Second, "[1 1]", 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var held atomic.Bool
			// ObserveSync runs in the WAL writer after the fsync and before
			// the records count as durable: blocking it holds the group in
			// flight.
			release := make(chan struct{})
			w := openWAL(t, wal.Options{ObserveSync: func(time.Duration) {
				if held.Load() {
					<-release
				}
			}})
			store := openStore(t, testenv.NewDatabase(t))
			var mu sync.Mutex
			var batches []int
			var first time.Time
			pause := &pauseSwitch{}
			p := projector.New(projector.Config{BrokerID: uuid.New(), MinBatchItems: c.min, MaxBatchWait: c.wait, Logger: testenv.Logger,
				Maintenance: pause,
				ObserveBatch: func(items int, _ time.Duration, err error) {
					if err == nil {
						mu.Lock()
						if first.IsZero() {
							first = time.Now()
						}
						batches = append(batches, items)
						mu.Unlock()
					}
				}}, w, store, ingest.NewRegistry())
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			// A first record while the WAL is idle: nothing is in flight,
			// so nothing waits.
			if _, err := w.Append(record("q", "a", 1), nil); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 30*time.Second, "the first record projected", func() bool { return p.Checkpoint() == 1 })
			// Paused, a durable record and a group commit held in flight
			// behind it.
			pause.on.Store(true)
			p.MaintenanceChanged()
			if _, err := w.Append(record("q", "b", 1), nil); err != nil {
				t.Fatal(err)
			}
			held.Store(true)
			appended := make(chan error, 1)
			go func() { _, err := w.Append(record("q", "c", 1), nil); appended <- err }()
			testenv.WaitFor(t, 10*time.Second, "the third record's group commit in flight", w.InFlight)
			mu.Lock()
			batches, first = nil, time.Time{}
			mu.Unlock()
			start := time.Now()
			pause.on.Store(false)
			p.MaintenanceChanged()
			time.AfterFunc(c.hold, func() { close(release) })
			if err := <-appended; err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 30*time.Second, "every record projected", func() bool { return p.Checkpoint() == 3 })
			p.Stop()
			mu.Lock()
			defer mu.Unlock()
			if got := fmt.Sprint(batches); got != c.want {
				t.Errorf("batches of %s items, want %s", got, c.want)
			}
			took := first.Sub(start)
			if took < c.minTaken {
				t.Errorf("first batch committed after %v, want at least %v", took, c.minTaken)
			}
			if c.want != "[2]" && took > c.hold {
				t.Errorf("first batch committed after %v, not before the held fsync ended (%v)", took, c.hold)
			}
		})
	}
}

// TestStopWhileWaitingForGroupCommit: Stop returns promptly while a small
// batch waits for a group commit whose fsync is held (MaxBatchWait far
// away), and nothing durable is lost: a projector started afterwards
// projects every record once.
func TestStopWhileWaitingForGroupCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var held atomic.Bool
	release := make(chan struct{})
	w := openWAL(t, wal.Options{ObserveSync: func(time.Duration) {
		if held.Load() {
			<-release
		}
	}})
	store := openStore(t, testenv.NewDatabase(t))
	broker := uuid.New()
	pause := &pauseSwitch{}
	cfg := projector.Config{BrokerID: broker, MaxBatchWait: time.Minute, Logger: testenv.Logger, Maintenance: pause}
	p := projector.New(cfg, w, store, ingest.NewRegistry())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if _, err := w.Append(record("q", "a", 1), nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the first record projected", func() bool { return p.Checkpoint() == 1 })
	pause.on.Store(true)
	p.MaintenanceChanged()
	if _, err := w.Append(record("q", "b", 1), nil); err != nil {
		t.Fatal(err)
	}
	held.Store(true)
	appended := make(chan error, 1)
	go func() { _, err := w.Append(record("q", "c", 1), nil); appended <- err }()
	testenv.WaitFor(t, 10*time.Second, "the third record's group commit in flight", w.InFlight)
	pause.on.Store(false)
	p.MaintenanceChanged()
	time.Sleep(200 * time.Millisecond) // the batch of b is waiting for c
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Stop did not return while the batch waited for a held fsync")
	}
	close(release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	p2 := projector.New(cfg, w, store, ingest.NewRegistry())
	pause.on.Store(false)
	if err := p2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p2.Stop()
	testenv.WaitFor(t, 30*time.Second, "every record projected after the restart", func() bool { return p2.Checkpoint() == 3 })
	var n int
	if err := store.Pool().QueryRow(ctx, `SELECT next_offset FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'q'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("partition next_offset %d (%v), want 3", n, err)
	}
}
