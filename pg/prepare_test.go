package pg_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// pairs is items' (queue, partition) pairs as PreparePartitions takes them.
func pairs(items []pg.ProjectItem) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, it := range items {
			if !yield(it.Queue, it.Partition) {
				return
			}
		}
	}
}

// partitionExists reports whether queue's partition exists in PostgreSQL.
func partitionExists(t *testing.T, s *pg.Store, queue, partition string) bool {
	t.Helper()
	var ok bool
	err := s.Pool().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2)`, queue, partition).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPreparePartitionsCreatesBeforeProjection: PreparePartitions creates
// the pairs the cache lacks (each once, runs and repeats included), not
// those it holds; the projection batch of the same items then looks
// nothing up and goes the one round trip way (the looked-up offsets
// became its guesses), storing every item at its partition's next offset.
func TestPreparePartitionsCreatesBeforeProjection(t *testing.T) {
	t.Parallel()
	x := setupBrokers(t, nil)
	ctx := context.Background()
	x.projectA(t, at("old", "P", ""))
	items := []pg.ProjectItem{at("old", "P", ""), at("new1", "A", ""), at("new1", "A", ""), at("new1", "B", ""),
		at("new2", "P", ""), at("new1", "A", ""), at("old", "P", "")}
	n, err := x.a.PreparePartitions(ctx, pairs(items), 1)
	if err != nil || n != 3 {
		t.Fatalf("PreparePartitions = %d, %v; want 3 pairs created", n, err)
	}
	for _, qp := range [][2]string{{"new1", "A"}, {"new1", "B"}, {"new2", "P"}} {
		if !partitionExists(t, x.a, qp[0], qp[1]) {
			t.Errorf("%s/%s was not created", qp[0], qp[1])
		}
	}
	if n, err := x.a.PreparePartitions(ctx, pairs(items), 1); err != nil || n != 0 {
		t.Fatalf("PreparePartitions again = %d, %v; want 0 (all cached)", n, err)
	}
	lookups := pg.ProjectorLookups(x.a)
	predicted, _ := pg.PredictedBatches(x.a)
	out := x.projectA(t, items...)
	want := []int64{1, 0, 1, 0, 0, 2, 2}
	for i, o := range out {
		if o.Duplicate || o.Offset != want[i] {
			t.Errorf("item %d (%s/%s): %+v, want stored at offset %d", i, items[i].Queue, items[i].Partition, o, want[i])
		}
	}
	if d := pg.ProjectorLookups(x.a) - lookups; d != 0 {
		t.Errorf("the projection batch looked up %d pairs, want 0 (prepared)", d)
	}
	if p, _ := pg.PredictedBatches(x.a); p != predicted+1 {
		t.Errorf("predicted batches %d -> %d, want the batch predicted", predicted, p)
	}
}

// TestPreparePartitionsStaleAfterQueueDelete: a queue that another broker
// deletes between PreparePartitions and the projection leaves a stale id
// in the cache; the batch still stores its item (the queue recreated), as
// for any cached id.
func TestPreparePartitionsStaleAfterQueueDelete(t *testing.T) {
	t.Parallel()
	x := setupBrokers(t, nil)
	ctx := context.Background()
	items := []pg.ProjectItem{at("gone", "P", "k1")}
	if n, err := x.a.PreparePartitions(ctx, pairs(items), 1); err != nil || n != 1 {
		t.Fatalf("PreparePartitions = %d, %v; want 1", n, err)
	}
	if ok, err := x.b.DeleteQueue(ctx, "gone"); err != nil || !ok {
		t.Fatalf("DeleteQueue = %v, %v", ok, err)
	}
	out := x.projectA(t, items...)
	if out[0].Duplicate || out[0].Offset != 0 {
		t.Fatalf("outcome %+v, want stored at offset 0", out[0])
	}
	if !partitionExists(t, x.a, "gone", "P") {
		t.Fatal("the deleted queue was not created again")
	}
}

// TestPreparePartitionsWaitsForATurn: with every turn taken, a call waits
// until its ctx ends, creates nothing and returns ctx's error (the push
// then goes on, the projector creating the partition); once a turn is free
// it creates.
func TestPreparePartitionsWaitsForATurn(t *testing.T) {
	t.Parallel()
	x := setupBrokers(t, nil)
	items := []pg.ProjectItem{at("turns", "P", "")}
	release := pg.TakePrepareTurns(x.a)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	n, err := x.a.PreparePartitions(ctx, pairs(items), 1)
	cancel()
	if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PreparePartitions with no turn = %d, %v; want 0, deadline exceeded", n, err)
	}
	if partitionExists(t, x.a, "turns", "P") {
		t.Fatal("created without a turn")
	}
	release()
	if n, err := x.a.PreparePartitions(context.Background(), pairs(items), 1); err != nil || n != 1 {
		t.Fatalf("PreparePartitions = %d, %v; want 1", n, err)
	}
}

// TestPreparePartitionsBeforeSchema: before its schema is applied (the
// broker started with PostgreSQL away) a Store creates nothing and
// reports no error.
func TestPreparePartitionsBeforeSchema(t *testing.T) {
	t.Parallel()
	s := testenv.OpenStore(t, pg.Config{URL: testenv.NewDatabase(t), Logger: testenv.Logger})
	if n, err := s.PreparePartitions(context.Background(), pairs([]pg.ProjectItem{at("early", "P", "")}), 1); n != 0 || err != nil {
		t.Fatalf("PreparePartitions = %d, %v; want 0, nil", n, err)
	}
}

// TestPreparePartitionsCombined: concurrent calls (20, naming mostly the
// same 40 new queues) all succeed, and a projection batch of all their
// items looks nothing up.
func TestPreparePartitionsCombined(t *testing.T) {
	t.Parallel()
	x := setupBrokers(t, nil)
	const calls, each = 20, 50
	var all []pg.ProjectItem
	errs := make(chan error, calls)
	for c := range calls {
		items := make([]pg.ProjectItem, each)
		for i := range items {
			// 40 queues, each named by most calls, some twice by one.
			items[i] = at(fmt.Sprintf("comb-%d", (c+i)%40), "P", "")
		}
		all = append(all, items...)
		go func() {
			n, err := x.a.PreparePartitions(context.Background(), pairs(items), 1)
			if err == nil && n > 40 {
				err = fmt.Errorf("%d pairs missing, want at most 40", n)
			}
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	lookups := pg.ProjectorLookups(x.a)
	x.projectA(t, all...)
	if d := pg.ProjectorLookups(x.a) - lookups; d != 0 {
		t.Errorf("the projection batch looked up %d pairs, want 0", d)
	}
}

// TestPreparePartitionsFewLeftToProjector: a call with fewer missing
// pairs than minMissing creates nothing; the projection batch creates
// them, as before.
func TestPreparePartitionsFewLeftToProjector(t *testing.T) {
	t.Parallel()
	x := setupBrokers(t, nil)
	items := []pg.ProjectItem{at("few", "A", ""), at("few", "B", "")}
	if n, err := x.a.PreparePartitions(context.Background(), pairs(items), 3); n != 0 || err != nil {
		t.Fatalf("PreparePartitions = %d, %v; want 0, nil", n, err)
	}
	if partitionExists(t, x.a, "few", "A") {
		t.Fatal("created below minMissing")
	}
	lookups := pg.ProjectorLookups(x.a)
	x.projectA(t, items...)
	if d := pg.ProjectorLookups(x.a) - lookups; d != 2 {
		t.Errorf("the projection batch looked up %d pairs, want 2", d)
	}
}
