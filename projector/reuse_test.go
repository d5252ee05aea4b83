package projector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// reusePayload is the JSON payload of item k of record r: it names both,
// and its length varies, so that bytes of another record read in its place
// (a reused WAL segment buffer) never match.
func reusePayload(r, k int) string {
	return fmt.Sprintf("%q", fmt.Sprintf("r%d-%d-%s", r, k, strings.Repeat("x", (r*7+k)%53)))
}

// TestProjectionOverReusedSegmentBuffers: the WAL's segments are tiny (4
// KiB), so the projector's batches span many rolls and the log reuses
// dropped segment buffers under it (wal.Cursor's ownership rule: the
// projector releases its checkpoint after each commit); records of 200
// items are projected in pieces (a payload held across batches), and the
// projector's connections are killed now and then, so that batches fail
// and are read again from the checkpoint. Every item must be stored once,
// with the payload it was pushed with: a payload read from a buffer
// reused while the projector still used it would store other bytes, and
// shows as a data race under -race (a Release before the commit fails it
// so, every run).
func TestProjectionOverReusedSegmentBuffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := openWAL(t, wal.Options{SegmentSize: 4 << 10, NoSync: true})
	store := openStore(t, testenv.NewDatabase(t))
	p := projector.New(projector.Config{BrokerID: uuid.New(), MaxBatchItems: 64, BackoffMin: time.Millisecond,
		BackoffMax: 20 * time.Millisecond, Logger: testenv.Logger}, w, store, ingest.NewRegistry())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	const records, parts = 400, 3
	want := map[string]string{} // transactionId → payload
	items := func(r int) int {
		if r%61 == 0 {
			return 200
		}
		return 1 + r%23
	}
	killed := 0
	for r := 1; r <= records; r++ {
		rec := &ingest.Record{AcceptedAt: time.Now().UnixMicro()}
		for k := 0; k < items(r); k++ {
			tx := fmt.Sprintf("r%d-%d", r, k)
			want[tx] = reusePayload(r, k)
			rec.Items = append(rec.Items, ingest.Item{Queue: "q", Partition: fmt.Sprintf("P%d", r%parts), TransactionID: tx,
				MessageID: uuid.Must(uuid.NewV7()), Payload: []byte(want[tx])})
		}
		if _, err := w.Append(ingest.EncodeRecord(nil, rec), nil); err != nil {
			t.Fatal(err)
		}
		if r%50 == 0 { // fail the batches in flight: the projector reads them again
			// A pool connection killed the round before fails once.
			for try := 0; try < 5; try++ {
				if _, err := store.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid()`); err == nil {
					killed++
					break
				}
			}
		}
		// The projector keeps within a couple of segments of the tail, so
		// that rolls drop buffers its batches were read from.
		for w.DurableIndex() > p.Checkpoint()+8 && ctx.Err() == nil {
			time.Sleep(200 * time.Microsecond)
		}
	}
	testenv.WaitFor(t, 90*time.Second, "every record projected", func() bool { return p.Checkpoint() == records })
	p.Stop()
	// The last round of kills may have left dead idle connections in the
	// pool that the projector did not happen to reuse (a pool checks an
	// idle connection only after a second idle): read through fresh ones.
	store.Pool().Reset()
	got := 0
	for part := 0; part < parts; part++ {
		msgs, err := store.ReadPartition(ctx, "q", fmt.Sprintf("P%d", part))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			payload, ok := want[m.TransactionID]
			if !ok {
				t.Fatalf("stored transactionId %q was never pushed (or stored twice)", m.TransactionID)
			}
			if string(m.Payload) != payload {
				t.Fatalf("%s stored with payload %.40s, pushed %.40s", m.TransactionID, m.Payload, payload)
			}
			delete(want, m.TransactionID)
			got++
		}
	}
	if len(want) != 0 {
		t.Fatalf("%d items stored, %d never", got, len(want))
	}
	t.Logf("%d items, %d connection kills", got, killed)
}
