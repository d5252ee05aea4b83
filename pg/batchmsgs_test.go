package pg_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// TestConcurrentBatchesKeepTheirMessages: projection batches (Project,
// one broker per worker) and transactional pushes (Transaction) run at
// once on one Store over the same partitions, so that their messages go
// through arrays of the shared pool (getBatchMsgs) while other batches
// hold theirs, predictions go stale (the one-round-trip way rolls back
// and the batch goes the long way), and repeated client keys send batches
// the long way too. Every batch must store exactly its own messages, the
// duplicates found: a message array handed to a second batch while the
// first still encodes from it shows as another payload or id stored, and
// under -race as a data race.
func TestConcurrentBatchesKeepTheirMessages(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const workers, batches, per, parts = 4, 20, 24, 3
	type want struct{ txid, payload string }
	var mu sync.Mutex
	stored := map[uuid.UUID]want{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			broker := uuid.New()
			wal := uint64(0)
			for b := 0; b < batches; b++ {
				tx := b%5 == 4 // a transactional push: no duplicates (one would roll it back)
				items := make([]pg.ProjectItem, per)
				dup := make([]bool, per)
				at := time.Now().UnixMicro()
				for i := range items {
					id := uuid.Must(uuid.NewV7())
					txid, minted := id.String(), true
					switch {
					case (i == 4 || i == 19) && b > 0 && !tx:
						// The client key of item 1 of this worker's batch before
						// (the same partition: dedup is per partition).
						txid, minted, dup[i] = fmt.Sprintf("g%d-b%d-i1", g, b-1), false, true
					case i%3 == 1:
						txid, minted = fmt.Sprintf("g%d-b%d-i%d", g, b, i), false
					}
					payload := fmt.Sprintf("%q", fmt.Sprintf("g%d-b%d-i%d-%s", g, b, i, strings.Repeat("x", (g*31+b*7+i)%97)))
					items[i] = pg.ProjectItem{Queue: "race", Partition: fmt.Sprintf("p%d", i%parts), AcceptedAtMicros: at,
						Message: pg.Message{ID: id, TransactionID: txid, CreatedAtMicros: at, Payload: []byte(payload), MintedTxID: minted}}
				}
				var out []pg.Outcome
				if tx {
					res, err := s.Transaction(ctx, items, nil)
					if err != nil {
						errs <- fmt.Errorf("worker %d batch %d: transaction: %w", g, b, err)
						return
					}
					out = res.Pushes
				} else {
					wal++
					var err error
					if out, err = s.Project(ctx, broker, pg.Checkpoint{Index: wal, HasCRC: true}, items); err != nil {
						errs <- fmt.Errorf("worker %d batch %d: project: %w", g, b, err)
						return
					}
				}
				mu.Lock()
				for i, o := range out {
					if o.Duplicate != dup[i] {
						mu.Unlock()
						errs <- fmt.Errorf("worker %d batch %d item %d (%s): duplicate %v, want %v", g, b, i, items[i].Message.TransactionID, o.Duplicate, dup[i])
						return
					}
					if !dup[i] {
						stored[items[i].Message.ID] = want{items[i].Message.TransactionID, string(items[i].Message.Payload)}
					}
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	n := 0
	for p := 0; p < parts; p++ {
		msgs, err := s.ReadPartition(ctx, "race", fmt.Sprintf("p%d", p))
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]int{} // worker → last batch*per+item seen, for WAL order per worker
		for i, m := range msgs {
			w, ok := stored[m.ID]
			if !ok || w.txid != m.TransactionID || w.payload != string(m.Payload) || m.Offset != int64(i) {
				t.Fatalf("p%d offset %d (at %d): %s %q %s, want %+v (known %v)", p, m.Offset, i, m.ID, m.TransactionID, m.Payload, w, ok)
			}
			var g, b, k int
			if _, err := fmt.Sscanf(strings.Trim(w.payload, `"`), "g%d-b%d-i%d-", &g, &b, &k); err != nil {
				t.Fatal(err)
			}
			key, pos := fmt.Sprint(g), b*per+k
			if prev, ok := last[key]; ok && pos <= prev {
				t.Fatalf("p%d: worker %d's item %d stored after its item %d", p, g, pos, prev)
			}
			last[key] = pos
		}
		n += len(msgs)
	}
	if n != len(stored) {
		t.Fatalf("%d messages stored, want %d", n, len(stored))
	}
}
