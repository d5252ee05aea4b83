package projector_test

import (
	"context"
	"fmt"
	"os"
	"sync"
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
	w, _, err := wal.Open(t.TempDir(), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	store, err := pg.Open(pg.Config{URL: testenv.NewDatabase(t), PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
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
