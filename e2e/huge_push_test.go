package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// tinyItem is the smallest item a push body can hold: a one-byte queue
// name, no partition (Default), no transactionId (the broker mints one) and
// a one-byte payload.
const tinyItem = `{"queue":"h","payload":0}`

// tinyBody returns a push body of n tiny items.
func tinyBody(n int) []byte {
	var b bytes.Buffer
	b.Grow(len(`{"items":[]}`) + n*(len(tinyItem)+1))
	b.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tinyItem)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// tinyItemsFor is how many tiny items fit a body of limit bytes.
func tinyItemsFor(limit int) int { return (limit - len(`{"items":[]}`) + 1) / (len(tinyItem) + 1) }

// partitionState reads a partition's next offset and how many offsets its
// segments hold; ok is false while the partition does not exist. It also
// checks that the segments tile 0..next-1 without gap or overlap.
func partitionState(t testing.TB, s *pg.Store, queue, partition string) (next, stored, segments int64, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.Pool().QueryRow(ctx, `SELECT p.next_offset,
			coalesce((SELECT sum(last_offset - base_offset + 1) FROM queen.segments WHERE partition_id = p.id), 0),
			(SELECT count(*) FROM queen.segments WHERE partition_id = p.id)
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2`,
		queue, partition).Scan(&next, &stored, &segments)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, 0, false
		}
		t.Fatalf("partition state %s/%s: %v", queue, partition, err)
	}
	var gaps int64
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT s.base_offset, lag(s.last_offset) OVER (ORDER BY s.base_offset) AS prev
			FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = $2) g WHERE base_offset <> coalesce(prev + 1, 0)`, queue, partition).Scan(&gaps); err != nil {
		t.Fatalf("partition gaps %s/%s: %v", queue, partition, err)
	}
	if gaps != 0 {
		t.Fatalf("%s/%s: %d segments do not follow the one before (gap or overlap)", queue, partition, gaps)
	}
	return next, stored, segments, true
}

// TestProjectRecordInPieces: with MaxBatchItems 5, a push of 23 items is
// projected in pieces, one transaction each, and still gets its verdicts
// (queued, and duplicate for a transactionId repeated in a later piece,
// naming the original stored by an earlier piece); pushes before and after
// it are projected around it, every partition holds body order at dense
// offsets, and the checkpoint ends with no record in pieces.
func TestProjectRecordInPieces(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.Projector.MaxBatchItems = 5 })
	wantStatuses(t, push(t, s.base, body(item{"pc", "A", 0, "before"})), Q)
	var items []item
	var want []ingest.Status
	for i := 0; i < 23; i++ {
		part := "A"
		if i%3 == 2 {
			part = "B"
		}
		tx := fmt.Sprintf("t%d", i)
		st := Q
		switch i {
		case 13: // repeats item 1 (partition A, first piece): a duplicate
			tx, st = "t1", D
		case 14: // t1 again, but in partition B: its own key
			part, tx = "B", "t1"
		case 21: // repeats item 14 (B, the same piece's neighbourhood, later piece than 13)
			part, tx, st = "B", "t1", D
		}
		items = append(items, item{"pc", part, i, tx})
		want = append(want, st)
	}
	res := push(t, s.base, body(items...))
	wantStatuses(t, res, want...)
	if res[13].MessageID != res[1].MessageID || res[21].MessageID != res[14].MessageID {
		t.Fatalf("duplicates name %s and %s, want the originals %s and %s", res[13].MessageID, res[21].MessageID, res[1].MessageID, res[14].MessageID)
	}
	wantStatuses(t, push(t, s.base, body(item{"pc", "A", 100, "after1"}, item{"pc", "B", 101, "after2"})), Q, Q)

	var wantA, wantB []string
	wantA = append(wantA, "before")
	for i, it := range items {
		if want[i] == D {
			continue
		}
		if it.Partition == "A" {
			wantA = append(wantA, it.TransactionID)
		} else {
			wantB = append(wantB, it.TransactionID)
		}
	}
	wantA, wantB = append(wantA, "after1"), append(wantB, "after2")
	segs := int64(0)
	for _, c := range []struct {
		part string
		want []string
	}{{"A", wantA}, {"B", wantB}} {
		msgs := readPartition(t, s.store, "pc", c.part)
		if got := fmt.Sprint(txids(msgs)); got != fmt.Sprint(c.want) {
			t.Errorf("partition %s holds %s, want %s", c.part, got, c.want)
		}
		for i, m := range msgs {
			if m.Offset != int64(i) {
				t.Fatalf("partition %s: offset %d at position %d", c.part, m.Offset, i)
			}
		}
		_, _, n, _ := partitionState(t, s.store, "pc", c.part)
		segs += n
	}
	// 23 items in pieces of at most 5 make at least 5 transactions; each
	// writes a segment per partition it touches.
	if segs < 5+2 {
		t.Errorf("%d segments: the 23-item record was not projected in pieces", segs)
	}
	var partial *int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.Pool().QueryRow(ctx, `SELECT CASE WHEN partial_index = wal_index + 1 THEN partial_items END
		FROM queen.projector_checkpoints WHERE broker_id = $1`, s.b.ID).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	if partial != nil {
		t.Errorf("checkpoint still names %d items of a record in pieces", *partial)
	}
}

// steady pushes one item to queue every interval until ctx ends and
// records each verdict with its time.
type steady struct {
	queue    string
	interval time.Duration
	mu       sync.Mutex
	got      []steadyVerdict
}

type steadyVerdict struct {
	at     time.Time
	took   time.Duration
	status ingest.Status
}

func (s *steady) run(ctx context.Context, t *testing.T, base string) {
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		code, rb := post(t, base, "/api/v1/push", body(item{s.queue, "P", i, fmt.Sprintf("s%d", i)}))
		st := ingest.Status(fmt.Sprintf("http %d", code))
		if code == http.StatusCreated {
			switch {
			case bytes.Contains(rb, []byte(`"status":"queued"`)):
				st = Q
			case bytes.Contains(rb, []byte(`"status":"buffered"`)):
				st = B
			default:
				st = ingest.Status(rb)
			}
		}
		s.mu.Lock()
		s.got = append(s.got, steadyVerdict{at: start, took: time.Since(start), status: st})
		s.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(s.interval):
		}
	}
}

// between summarises the verdicts of pushes started in [from, to).
func (s *steady) between(from, to time.Time) (counts map[ingest.Status]int, slowest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts = map[ingest.Status]int{}
	for _, v := range s.got {
		if !v.at.Before(from) && v.at.Before(to) {
			counts[v.status]++
			slowest = max(slowest, v.took)
		}
	}
	return counts, slowest
}

// TestCaseHugePushOfTinyItems (issue: one push of a million tiny items
// stopped delivery for every queue): a push at the body limit made of the
// smallest items the format allows is stored, every item exactly once, in
// pieces; the projector is never wedged: a steady producer on another
// queue keeps getting answers throughout and queued ones again as soon as
// the big record is through. The test broker's body limit is 16 MiB (645k
// items, the density of the default 64 MiB limit, whose 2.6 M items take
// about a minute and 4 GB of heap on a 2-core box), 4 MiB (161k items, 17
// pieces) under -race, where parsing the body alone is several times
// slower; set QUEEN_TEST_FULL_BODY=1 for the default limit.
func TestCaseHugePushOfTinyItems(t *testing.T) {
	limit := 16 << 20
	if raceEnabled {
		limit = 4 << 20
	}
	if os.Getenv("QUEEN_TEST_FULL_BODY") == "1" {
		limit = 64 << 20
	}
	s := setup(t, func(c *broker.Config) { c.MaxBodyBytes, c.MaxPushItems = limit, -1 })
	configure(t, s.base, "h", map[string]any{"dedupWindowSeconds": 0}) // a repeat would be stored twice, not hidden
	wantStatuses(t, push(t, s.base, body(item{"other", "P", 0, "warm-up"})), Q)

	n := tinyItemsFor(limit)
	b := tinyBody(n)
	if len(b) > limit {
		t.Fatalf("body %d bytes over the %d limit", len(b), limit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &steady{queue: "other", interval: 100 * time.Millisecond}
	done := make(chan struct{})
	go func() { st.run(ctx, t, s.base); close(done) }()

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	started := time.Now()
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Post(s.base+"/api/v1/push", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("push of %d tiny items: %v", n, err)
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("push of %d tiny items: read the answer: %v", n, err)
	}
	code := resp.StatusCode
	answered := time.Now()
	if code != http.StatusCreated {
		t.Fatalf("push of %d tiny items (%d bytes): status %d %.200s", n, len(b), code, rb)
	}
	verdicts := bytes.Count(rb, []byte(`"status":`))
	queued, buffered := bytes.Count(rb, []byte(`"status":"queued"`)), bytes.Count(rb, []byte(`"status":"buffered"`))
	if verdicts != n || queued+buffered != n {
		t.Fatalf("%d verdicts (%d queued, %d buffered) for %d items", verdicts, queued, buffered, n)
	}
	rb = nil
	b = nil

	// Wait for every item, sampling the heap meanwhile (the test process is
	// the broker's too).
	var peak uint64
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		next, _, _, ok := partitionState(t, s.store, "h", ingest.DefaultPartition)
		if ok && next >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 minutes %d of %d items are projected (projector error: %v)", next, n, s.b.Projector.LastError())
		}
		time.Sleep(200 * time.Millisecond)
	}
	projected := time.Now()
	// The steady producer must get queued verdicts again right away.
	time.Sleep(time.Second)
	afterStart := time.Now()
	testenv.WaitFor(t, 30*time.Second, "queued verdicts after the big record", func() bool {
		c, _ := st.between(afterStart, time.Now())
		return c[Q] >= 5
	})
	cancel()
	<-done

	next, stored, segments, _ := partitionState(t, s.store, "h", ingest.DefaultPartition)
	if next != int64(n) || stored != int64(n) {
		t.Fatalf("partition h/Default: next offset %d, %d offsets stored, want %d", next, stored, n)
	}
	during, slowest := st.between(started, projected)
	after, _ := st.between(projected, time.Now())
	t.Logf("%d tiny items, %d MiB body: answered in %v (%d queued, %d buffered), all projected %v after the push began, in %d segments; heap in use peaked at %d MiB (%d MiB before)",
		n, limit>>20, answered.Sub(started).Round(time.Millisecond), queued, buffered, projected.Sub(started).Round(time.Millisecond),
		segments, peak>>20, before.HeapInuse>>20)
	t.Logf("steady producer meanwhile: %v (slowest answer %v); afterwards: %v", during, slowest.Round(time.Millisecond), after)
	for k := range during {
		if k != Q && k != B {
			t.Errorf("steady producer got %q while the big record projected", k)
		}
	}
	if during[Q]+during[B] == 0 {
		t.Errorf("steady producer got no answer while the big record projected")
	}
	if slowest > ingest.DefaultVerdictTimeout+5*time.Second {
		t.Errorf("a steady push took %v", slowest)
	}
	// Every item of the steady producer is stored once.
	seen := map[string]bool{}
	for _, m := range readPartition(t, s.store, "other", "P") {
		if seen[m.TransactionID] {
			t.Fatalf("other/P holds %s twice", m.TransactionID)
		}
		seen[m.TransactionID] = true
	}
}

// TestCaseQueueDeleteChurnKeepsOtherQueuesQueued (issue: during queue-delete
// churn the projector's "partition row missing" retries answered unrelated
// pushes buffered with PostgreSQL up): one client pushes to a queue and
// another deletes that queue over and over, while a steady producer pushes
// to another queue; every steady push is answered queued, the churning
// pushes never get a 5xx, and the projector never goes unhealthy.
func TestCaseQueueDeleteChurnKeepsOtherQueuesQueued(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	wantStatuses(t, push(t, s.base, body(item{"steady", "P", 0, "warm-up"})), Q)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	st := &steady{queue: "steady", interval: 20 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); st.run(ctx, t, s.base) }()
	var mu sync.Mutex
	churn := map[string]int{}
	count := func(k string) { mu.Lock(); churn[k]++; mu.Unlock() }
	go func() { // pushes to the churning queue: several partitions, repeated transactionIds
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			var items []item
			for p := 0; p < 5; p++ {
				items = append(items, item{"churn", fmt.Sprintf("p%d", p), i, fmt.Sprintf("c%d", i%3)})
			}
			code, rb := post(t, s.base, "/api/v1/push", body(items...))
			switch {
			case code != http.StatusCreated:
				count(fmt.Sprintf("push http %d: %.100s", code, rb))
			case bytes.Contains(rb, []byte(`"buffered"`)):
				count("push buffered")
			default:
				count("push answered")
			}
		}
	}()
	go func() { // deletes it
		defer wg.Done()
		for ctx.Err() == nil {
			req, _ := http.NewRequest(http.MethodDelete, s.base+"/api/v1/resources/queues/churn", nil)
			resp, err := testenv.Client.Do(req)
			if err != nil {
				count("delete: " + err.Error())
				continue
			}
			resp.Body.Close()
			count(fmt.Sprintf("delete http %d", resp.StatusCode))
		}
	}()
	unhealthy := 0
	for ctx.Err() == nil {
		if !s.b.Projector.Healthy() {
			unhealthy++
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	counts, slowest := st.between(time.Time{}, time.Now())
	t.Logf("steady producer: %v (slowest %v); churn: %v", counts, slowest.Round(time.Millisecond), churn)
	if counts[Q] == 0 || len(counts) != 1 {
		t.Errorf("steady producer on another queue got %v, want only queued", counts)
	}
	for k := range churn {
		if strings.HasPrefix(k, "push http") {
			t.Errorf("churn: %d × %s", churn[k], k)
		}
	}
	if churn["delete http 200"] < 20 || churn["push answered"] < 20 {
		t.Errorf("too little churn to mean anything: %v", churn)
	}
	if unhealthy > 0 {
		t.Errorf("the projector was unhealthy in %d samples (last error %v)", unhealthy, s.b.Projector.LastError())
	}
}

// pushTiny pushes n tiny items to queue h (dedup window 0, so that a
// record projected twice would store its items twice) and returns the
// message ids the broker answered, in body order.
// It pushes in the background; the ids come on the channel (nil after a
// failure, which is reported).
func pushTiny(t *testing.T, base string, n int) <-chan []string {
	t.Helper()
	configure(t, base, "h", map[string]any{"dedupWindowSeconds": 0})
	out := make(chan []string, 1)
	go func() {
		ids, err := func() ([]string, error) {
			resp, err := (&http.Client{Timeout: 5 * time.Minute}).Post(base+"/api/v1/push", "application/json", bytes.NewReader(tinyBody(n)))
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			var res []ingest.Result
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusCreated {
				return nil, fmt.Errorf("status %d: %v", resp.StatusCode, err)
			}
			if len(res) != n {
				return nil, fmt.Errorf("%d verdicts for %d items", len(res), n)
			}
			ids := make([]string, n)
			for i, r := range res {
				if r.Status != Q && r.Status != B {
					return nil, fmt.Errorf("item %d: %s", i, r.Status)
				}
				ids[i] = r.MessageID
			}
			return ids, nil
		}()
		if err != nil {
			t.Errorf("push of %d tiny items: %v", n, err)
		}
		out <- ids
	}()
	return out
}

// awaitIDs waits for pushTiny's answer.
func awaitIDs(t *testing.T, ch <-chan []string) []string {
	t.Helper()
	ids := <-ch
	if ids == nil {
		t.FailNow()
	}
	return ids
}

// waitPartial waits until the checkpoint says the record after it is
// projected in part (some pieces committed, not all) and returns how many
// of its items are.
func waitPartial(t *testing.T, s *pg.Store, n int) int64 {
	t.Helper()
	var items int64
	testenv.WaitFor(t, 60*time.Second, "a record projected in part", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var partial *int64
		err := s.Pool().QueryRow(ctx, `SELECT CASE WHEN partial_index = wal_index + 1 THEN partial_items END
			FROM queen.projector_checkpoints`).Scan(&partial)
		if err == nil && partial != nil {
			items = *partial
			return true
		}
		if next, _, _, ok := partitionState(t, s, "h", ingest.DefaultPartition); ok && next >= int64(n) {
			t.Fatalf("the record was projected whole before the fault could hit it")
		}
		return false
	})
	return items
}

// verifyTiny waits until the n items are projected and checks that h/Default
// holds exactly the answered ids, in body order, at offsets 0..n-1.
func verifyTiny(t *testing.T, s *pg.Store, ids []string) {
	t.Helper()
	n := len(ids)
	testenv.WaitFor(t, 3*time.Minute, "every item projected", func() bool {
		next, _, _, ok := partitionState(t, s, "h", ingest.DefaultPartition)
		return ok && next >= int64(n)
	})
	next, stored, segments, _ := partitionState(t, s, "h", ingest.DefaultPartition)
	if next != int64(n) || stored != int64(n) {
		t.Fatalf("h/Default: next offset %d, %d offsets stored, want %d", next, stored, n)
	}
	msgs := readPartition(t, s, "h", ingest.DefaultPartition)
	for i, m := range msgs {
		if m.ID.String() != ids[i] || m.Offset != int64(i) {
			t.Fatalf("offset %d holds %s at offset %d, want %s (stored %d)", i, m.ID, m.Offset, ids[i], len(msgs))
		}
	}
	t.Logf("%d items stored exactly once, in order, in %d segments", n, segments)
}

// TestFaultKill9MidRecord: the broker is SIGKILLed while a push of 400k
// tiny items is projected in pieces; restarted, it resumes inside the
// record from the checkpoint, and every item is stored exactly once.
func TestFaultKill9MidRecord(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabase(t)
	walDir := t.TempDir()
	port := freePort(t)
	p := startProc(t, url, walDir, port, "QUEEN_MAX_PUSH_ITEMS=0")
	s := openStore(t, url)
	const n = 400_000
	configure(t, p.base, "h", map[string]any{"dedupWindowSeconds": 0})
	go func() { // its answer may never come: the broker is killed meanwhile
		resp, err := (&http.Client{Timeout: 5 * time.Minute}).Post(p.base+"/api/v1/push", "application/json", bytes.NewReader(tinyBody(n)))
		if err == nil {
			resp.Body.Close()
		}
	}()
	done := waitPartial(t, s, n) // projected in part: the record is in the WAL
	p.kill9(t)
	t.Logf("killed with %d of %d items committed", done, n)
	p2 := startProc(t, url, walDir, port, "QUEEN_MAX_PUSH_ITEMS=0")
	testenv.WaitFor(t, 3*time.Minute, "every item projected", func() bool {
		next, _, _, ok := partitionState(t, s, "h", ingest.DefaultPartition)
		return ok && next >= n
	})
	next, stored, segments, _ := partitionState(t, s, "h", ingest.DefaultPartition)
	seen := make(map[uuid.UUID]bool, n)
	for i, m := range readPartition(t, s, "h", ingest.DefaultPartition) {
		if seen[m.ID] || m.Offset != int64(i) {
			t.Fatalf("offset %d: message %s (offset %d) stored twice or out of place", i, m.ID, m.Offset)
		}
		seen[m.ID] = true
	}
	if next != n || stored != n || len(seen) != n {
		t.Fatalf("h/Default: next offset %d, %d offsets stored, %d distinct messages, want %d", next, stored, len(seen), n)
	}
	t.Logf("%d items stored exactly once in %d segments", n, segments)
	p2.term(t)
}

// TestFaultDatabaseCrashMidRecord: PostgreSQL is shut down immediately
// (a crash) while a push of 400k tiny items (200k under -race) is projected
// in pieces; once it
// is back, the projector resumes from the checkpoint it committed, and
// every item is stored exactly once.
func TestFaultDatabaseCrashMidRecord(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", func(c *broker.Config) { c.MaxPushItems = -1 })
	s := openStore(t, url)
	n := 400_000
	if raceEnabled {
		n = 200_000
	}
	ch := pushTiny(t, "http://"+b.Addr(), n)
	done := waitPartial(t, s, n)
	if err := c.Stop(context.Background(), "immediate"); err != nil {
		t.Fatal(err)
	}
	t.Logf("crashed with %d of %d items committed", done, n)
	time.Sleep(time.Second)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	verifyTiny(t, s, awaitIDs(t, ch))
}

// TestPushItemLimit: a push of more than QUEEN_MAX_PUSH_ITEMS items is
// refused with 400 and a JSON error naming the limit, and nothing is
// stored; a push of exactly the limit is accepted.
func TestPushItemLimit(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.MaxPushItems = 1000 })
	code, rb := post(t, s.base, "/api/v1/push", tinyBody(1001))
	if code != http.StatusBadRequest || !bytes.Contains(rb, []byte(`"error":"the push has 1001 items; at most 1000 are accepted per request (QUEEN_MAX_PUSH_ITEMS)"`)) {
		t.Fatalf("push of 1001 items over a limit of 1000: %d %s", code, rb)
	}
	if _, _, _, ok := partitionState(t, s.store, "h", ingest.DefaultPartition); ok {
		t.Fatalf("the refused push created its partition")
	}
	res := push(t, s.base, tinyBody(1000))
	if len(res) != 1000 || res[0].Status != Q {
		t.Fatalf("push of 1000 items: %d verdicts, first %s", len(res), res[0].Status)
	}
	// The default applies when unset.
	d := setup(t, nil)
	n := ingest.DefaultMaxPushItems + 1
	if code, rb := post(t, d.base, "/api/v1/push", tinyBody(n)); code != http.StatusBadRequest {
		t.Fatalf("push of %d items with the default limit: %d %.200s", n, code, rb)
	}
}
