package projector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// TestHeavyBatchAnswersBehindBuffered: while a batch of more than
// MaxWaitBatchBytes is sent (held here by a lock on queen.segments), the
// push that waited behind it is answered buffered at once, and so is a push
// made meanwhile, long before their verdict timeout; the heavy push itself
// waits and is answered queued once its batch commits, and every item is
// stored, in WAL order.
func TestHeavyBatchAnswersBehindBuffered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := openWAL(t, wal.Options{})
	url := testenv.NewDatabase(t)
	store := openStore(t, url)
	if err := store.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	reg := ingest.NewRegistry()
	p := projector.New(projector.Config{BrokerID: uuid.New(), MaxBatchBytes: 1 << 10, MaxWaitBatchBytes: 2 << 10, Logger: testenv.Logger}, w, store, reg)
	const timeout = 30 * time.Second
	pipe := &ingest.Pipeline{WAL: w, Registry: reg, Gate: p, Maintenance: func() bool { return false }, VerdictTimeout: timeout}

	// The segments table locked against inserts: the heavy batch's
	// transaction stops at its segment insert until the lock goes.
	lock, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE queen.segments IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status ingest.Status
		took   time.Duration
		err    error
	}
	push := func(queue string, payloadBytes int) <-chan answer {
		ch := make(chan answer, 1)
		body := fmt.Sprintf(`{"items":[{"queue":%q,"payload":%q}]}`, queue, strings.Repeat("x", payloadBytes))
		go func() {
			start := time.Now()
			res, err := pipe.Push(ctx, []byte(body), nil)
			a := answer{took: time.Since(start), err: err}
			if err == nil {
				a.status = res[0].Status
			}
			ch <- a
		}()
		return ch
	}
	// Both records durable and waiting before the projector starts: the
	// heavy one first in the WAL, the small one behind it.
	heavy := push("heavy", 4<<10)
	testenv.WaitFor(t, 10*time.Second, "the heavy record durable", func() bool { return w.DurableIndex() == 1 })
	behind := push("small", 10)
	testenv.WaitFor(t, 10*time.Second, "the small record durable", func() bool { return w.DurableIndex() == 2 })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	select {
	case a := <-behind:
		if a.err != nil || a.status != ingest.StatusBuffered {
			t.Fatalf("the push behind the heavy batch: %v %v, want buffered", a.status, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the push behind the heavy batch was not answered while the batch was held")
	}
	if p.Accepting() {
		t.Fatal("the gate is open while a heavy batch is sent")
	}
	meanwhile := <-push("small", 10)
	if meanwhile.err != nil || meanwhile.status != ingest.StatusBuffered || meanwhile.took > 5*time.Second {
		t.Fatalf("a push while the heavy batch was held: %v %v after %v, want buffered at once", meanwhile.status, meanwhile.err, meanwhile.took)
	}
	select {
	case a := <-heavy:
		t.Fatalf("the heavy push was answered %v %v before its batch committed", a.status, a.err)
	default:
	}

	if err := tx.Rollback(ctx); err != nil { // the lock goes
		t.Fatal(err)
	}
	a := <-heavy
	if a.err != nil || a.status != ingest.StatusQueued {
		t.Fatalf("the heavy push: %v %v, want queued", a.status, a.err)
	}
	testenv.WaitFor(t, 30*time.Second, "every record projected", func() bool { return p.Checkpoint() == 3 })
	if !p.Accepting() {
		t.Fatal("the gate stays closed after the heavy batch")
	}
	for q, want := range map[string]int{"heavy": 1, "small": 2} {
		msgs, err := store.ReadPartition(ctx, q, "Default")
		if err != nil || len(msgs) != want {
			t.Fatalf("queue %s: %d messages (%v), want %d", q, len(msgs), err, want)
		}
	}
}
