package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// setupStatus opens a store on a fresh database with the schema applied
// and a context that ends with the test (at most a minute).
func setupStatus(t *testing.T) (*pg.Store, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return openStore(t), ctx
}

// store writes n messages to queue/partition in one transaction.
func store(t *testing.T, ctx context.Context, st *pg.Store, queue, partition string, n int) {
	t.Helper()
	var items []pg.ProjectItem
	now := time.Now().UnixMicro()
	for i := 0; i < n; i++ {
		items = append(items, pg.ProjectItem{Queue: queue, Partition: partition, AcceptedAtMicros: now,
			Message: pg.Message{ID: uuid.Must(uuid.NewV7()), TransactionID: fmt.Sprintf("%s-%d-%d", partition, now, i),
				CreatedAtMicros: now, Payload: []byte(`1`)}})
	}
	if _, err := st.Transaction(ctx, items, nil); err != nil {
		t.Fatal(err)
	}
}

// TestFilteredPopRoundRobin: consecutive pops of a namespace take its
// queues in turn, skip a queue whose partition is leased, never touch
// another namespace, and answer empty when nothing is deliverable.
func TestFilteredPopRoundRobin(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []struct{ name, ns string }{{"a", "n"}, {"b", "n"}, {"c", "n"}, {"x", "other"}} {
		if _, err := st.Configure(ctx, q.name, q.ns, "", "Default", pg.DefaultQueueOptions()); err != nil {
			t.Fatal(err)
		}
		store(t, ctx, st, q.name, "P", 2)
	}
	fp := pg.NewFilteredPop(st, nil)
	if names, err := fp.MatchingQueues(ctx, "n", ""); err != nil || fmt.Sprint(names) != "[a b c]" {
		t.Fatalf("MatchingQueues = %v, %v", names, err)
	}
	req := pg.FilteredPopRequest{Namespace: "n", PopRequest: pg.PopRequest{Group: pg.QueueModeGroup, Batch: 1, AutoAck: true}}
	var got []string
	for i := 0; i < 6; i++ {
		res, err := fp.Pop(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != 1 {
			t.Fatalf("pop %d delivered %d", i, len(res.Messages))
		}
		got = append(got, res.Messages[0].Queue)
	}
	// Three queues in turn, twice (the starting queue depends on the
	// counter, the order does not).
	for i := 3; i < 6; i++ {
		if got[i] != got[i-3] || got[i] == got[i-1] {
			t.Fatalf("not round robin: %v", got)
		}
	}
	res, err := fp.Pop(ctx, req)
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("drained namespace delivered %v (%v)", res, err)
	}
	// A leased partition is not a candidate: with a's partition leased by
	// one pop, the next pops serve b then nothing.
	store(t, ctx, st, "a", "P", 1)
	store(t, ctx, st, "b", "P", 1)
	lease := req
	lease.AutoAck = false
	first, err := fp.Pop(ctx, lease)
	if err != nil || len(first.Messages) != 1 {
		t.Fatalf("leased pop: %v %v", first, err)
	}
	second, err := fp.Pop(ctx, lease)
	if err != nil || len(second.Messages) != 1 || second.Messages[0].Queue == first.Messages[0].Queue {
		t.Fatalf("second pop: %v %v", second, err)
	}
	if third, err := fp.Pop(ctx, lease); err != nil || len(third.Messages) != 0 {
		t.Fatalf("both leased, yet delivered: %v %v", third, err)
	}
	if n := len(readAll(t, ctx, st, "x")); n != 2 {
		t.Fatalf("other namespace's queue: %d stored", n)
	}
}

// TestFilteredPopSkipsExpiredQueues: queues whose messages retention
// deleted (their segments gone here) are not candidates of a filtered pop,
// for a group that never read them either: with more of them than a pop
// tries (MaxFilteredTries), a new group's first pop still delivers from the
// one queue that has messages.
func TestFilteredPopSkipsExpiredQueues(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for i := range pg.MaxFilteredTries + 4 {
		q := fmt.Sprintf("s%02d", i)
		if _, err := st.Configure(ctx, q, "ns", "", "Default", pg.DefaultQueueOptions()); err != nil {
			t.Fatal(err)
		}
		store(t, ctx, st, q, "P", 2)
	}
	if _, err := st.Pool().Exec(ctx, `DELETE FROM queen.segments`); err != nil { // retention, of everything so far
		t.Fatal(err)
	}
	if _, err := st.Configure(ctx, "zz", "ns", "", "Default", pg.DefaultQueueOptions()); err != nil {
		t.Fatal(err)
	}
	store(t, ctx, st, "zz", "P", 1)
	res, err := pg.NewFilteredPop(st, nil).Pop(ctx, pg.FilteredPopRequest{Namespace: "ns",
		PopRequest: pg.PopRequest{Group: "fresh", Batch: 1, AutoAck: true}})
	if err != nil || len(res.Messages) != 1 || res.Messages[0].Queue != "zz" {
		t.Fatalf("a new group's pop of the namespace: %+v, %v; want zz's message", res, err)
	}
}

func readAll(t *testing.T, ctx context.Context, st *pg.Store, queue string) []pg.StoredMessage {
	t.Helper()
	m, err := st.ReadQueue(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestStatusCounts: Status.Queues and QueueDetail count stored, pending,
// processing and completed messages in queue mode, and StoredPerBucket
// counts what the segments hold.
func TestStatusCounts(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	if _, err := st.Configure(ctx, "q", "ns", "tk", "Default", pg.DefaultQueueOptions()); err != nil {
		t.Fatal(err)
	}
	store(t, ctx, st, "q", "P", 4)
	res, err := st.Pop(ctx, pg.PopRequest{Queue: "q", Group: pg.QueueModeGroup, Batch: 2})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %v %v", res, err)
	}
	s := pg.NewStatus(st)
	qs, err := s.Queues(ctx, pg.StatusFilter{Namespace: "ns"}, 10, 0)
	if err != nil || len(qs) != 1 {
		t.Fatalf("Queues = %v, %v", qs, err)
	}
	if q := qs[0]; q.Total != 4 || q.Pending != 4 || q.Active != 2 || q.Completed() != 0 || q.Partitions != 2 {
		t.Fatalf("queue counts %+v", q)
	}
	if qs, _ := s.Queues(ctx, pg.StatusFilter{Task: "nope"}, 10, 0); len(qs) != 0 {
		t.Fatalf("task filter: %v", qs)
	}
	d, err := s.QueueDetail(ctx, "q")
	if err != nil || len(d.Partitions) != 2 || d.Partitions[1].Name != "P" || d.Partitions[1].Active != 2 || d.Partitions[1].Oldest == nil {
		t.Fatalf("QueueDetail = %+v, %v", d, err)
	}
	if _, err := s.QueueDetail(ctx, "none"); !errors.Is(err, pg.ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	l, err := s.Leases(ctx)
	if err != nil || l.Active != 1 || l.BatchSize != 2 {
		t.Fatalf("Leases = %+v, %v", l, err)
	}
	bs, err := s.StoredPerBucket(ctx, pg.StatusFilter{Queue: "q"}, time.Now().Add(-time.Hour), time.Now().Add(time.Minute), time.Minute)
	if err != nil || len(bs) != 1 || bs[0].Messages != 4 {
		t.Fatalf("StoredPerBucket = %v, %v", bs, err)
	}
	if p := s.Pool(); p.Max != pg.DefaultPoolSize { // openStore takes the default
		t.Fatalf("Pool = %+v", p)
	}
}

// TestFilteredPopSharesLookups: a filtered pop that asks while a
// candidates query of its namespace, task and group runs waits for that
// one and pops from its answer, when the query began at a wake generation
// at least the pop's; one begun before a wake-up the pop has seen is not
// shared (its snapshot may miss what that wake-up announced), and a
// shared query that failed makes the pop run its own.
func TestFilteredPopSharesLookups(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{"a", "b"} {
		if _, err := st.Configure(ctx, q, "sh", "", "Default", pg.DefaultQueueOptions()); err != nil {
			t.Fatal(err)
		}
		store(t, ctx, st, q, "P", 4)
	}
	var gen atomic.Uint64
	gen.Store(5)
	fp := pg.NewFilteredPop(st, gen.Load)
	req := pg.FilteredPopRequest{Namespace: "sh", PopRequest: pg.PopRequest{Group: pg.QueueModeGroup, Batch: 1, AutoAck: true}}
	type popped struct {
		res *pg.PopResult
		err error
	}
	pop := func() <-chan popped {
		ch := make(chan popped, 1)
		go func() {
			res, err := fp.Pop(ctx, req)
			ch <- popped{res, err}
		}()
		return ch
	}
	// Shared: the pop waits for the running query and takes its answer
	// (only b, though a has messages too).
	for range 3 {
		end := fp.PlantLookup("sh", "", pg.QueueModeGroup, 5)
		got := pop()
		select {
		case p := <-got:
			t.Fatalf("the pop did not wait for the running look-up: %+v, %v", p.res, p.err)
		case <-time.After(200 * time.Millisecond):
		}
		end([]string{"b"}, nil)
		p := <-got
		if p.err != nil || len(p.res.Messages) != 1 || p.res.Messages[0].Queue != "b" {
			t.Fatalf("shared look-up: %+v, %v; want one message of b", p.res, p.err)
		}
	}
	// Begun before a wake-up the pop has seen: not shared.
	end := fp.PlantLookup("sh", "", pg.QueueModeGroup, 5)
	gen.Store(6)
	select {
	case p := <-pop():
		if p.err != nil || len(p.res.Messages) != 1 {
			t.Fatalf("own look-up: %+v, %v; want one message", p.res, p.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pop waited for a look-up begun before its wake generation")
	}
	end(nil, nil)
	// A shared look-up that failed: the pop runs its own.
	end = fp.PlantLookup("sh", "", pg.QueueModeGroup, 6)
	got := pop()
	time.Sleep(100 * time.Millisecond)
	end(nil, context.DeadlineExceeded)
	if p := <-got; p.err != nil || len(p.res.Messages) != 1 {
		t.Fatalf("after a failed shared look-up: %+v, %v; want one message", p.res, p.err)
	}
}
