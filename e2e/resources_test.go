package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// getJSON GETs u and, on 200, decodes the body into v; it returns the status.
func getJSON(t testing.TB, u string, v any) int {
	t.Helper()
	code, b := do(t, http.MethodGet, u, "", nil)
	if v != nil && code == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %s: %v", u, b, err)
		}
	}
	return code
}

// get returns the status and body of GET u.
func get(t testing.TB, u string) (int, string) {
	t.Helper()
	code, b := do(t, http.MethodGet, u, "", nil)
	return code, string(b)
}

// del returns the status and body of DELETE u.
func del(t testing.TB, u string) (int, string) {
	t.Helper()
	code, b := do(t, http.MethodDelete, u, "", nil)
	return code, string(b)
}

// TestCaseP06DedupOutlivesConsumptionAndRetention: window 60 s, completed
// retention 1 s. Push T, pop and ack it, push T again (duplicate naming
// the original); after the retention sweep removed the segment, T is still
// a duplicate, named by the all-zero UUID.
func TestCaseP06DedupOutlivesConsumptionAndRetention(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.RetentionInterval = 200 * time.Millisecond })
	configure(t, s.base, "q6", map[string]any{"dedupWindowSeconds": 60, "retentionEnabled": true, "completedRetentionSeconds": 1})
	first := push(t, s.base, body(item{"q6", "P", 1, "T"}))
	_, r := pop(t, s.base, popPath("q6", "P"), "")
	if a := ack(t, s.base, r.Messages[0], "completed", ""); !a.Success {
		t.Fatal("ack")
	}
	again := push(t, s.base, body(item{"q6", "P", 2, "T"}))
	wantStatuses(t, again, D)
	if again[0].MessageID != first[0].MessageID {
		t.Fatalf("duplicate names %s, want %s", again[0].MessageID, first[0].MessageID)
	}
	testenv.WaitFor(t, 15*time.Second, "retention removes the segment", func() bool {
		return len(readPartition(t, s.store, "q6", "P")) == 0
	})
	late := push(t, s.base, body(item{"q6", "P", 3, "T"}))
	wantStatuses(t, late, D)
	if late[0].MessageID != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("duplicate of a deleted original names %s", late[0].MessageID)
	}
}

func TestRetentionAndDelayedProcessing(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.RetentionInterval = 200 * time.Millisecond })
	configure(t, s.base, "ret", map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushN(t, s.base, "ret", "P", 1, 3)
	testenv.WaitFor(t, 15*time.Second, "retention", func() bool { return len(readPartition(t, s.store, "ret", "P")) == 0 })
	if code, _ := pop(t, s.base, popPath("ret", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("pop after retention: %d", code)
	}
	pushN(t, s.base, "ret", "P", 4, 4) // the cursor skips the deleted offsets
	testenv.WaitFor(t, 5*time.Second, "message 4", func() bool {
		code, r := pop(t, s.base, popPath("ret", "P"), "autoAck=true")
		return code == 200 && r.Messages[0].TransactionID == "m-4"
	})

	// windowBuffer: a partition is served only once its newest message is
	// older than the window (debounce).
	configure(t, s.base, "win", map[string]any{"windowBuffer": 2})
	pushN(t, s.base, "win", "P", 1, 1)
	if code, _ := pop(t, s.base, popPath("win", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("windowBuffer: served inside the window: %d", code)
	}
	time.Sleep(2200 * time.Millisecond)
	if code, _ := pop(t, s.base, popPath("win", "P"), ""); code != 200 {
		t.Fatalf("windowBuffer: not served after the window: %d", code)
	}
	// maxWaitTimeSeconds evicts unconsumed messages without retentionEnabled.
	configure(t, s.base, "evict", map[string]any{"maxWaitTimeSeconds": 1})
	pushN(t, s.base, "evict", "P", 1, 2)
	testenv.WaitFor(t, 15*time.Second, "eviction", func() bool { return len(readPartition(t, s.store, "evict", "P")) == 0 })

	configure(t, s.base, "dly", map[string]any{"delayedProcessing": 2})
	pushN(t, s.base, "dly", "P", 1, 1)
	if code, _ := pop(t, s.base, popPath("dly", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("delayed message delivered early: %d", code)
	}
	time.Sleep(2200 * time.Millisecond)
	if code, _ := pop(t, s.base, popPath("dly", "P"), ""); code != 200 {
		t.Fatalf("delayed message not delivered after the delay: %d", code)
	}
}

func TestQueuesGroupsSeekAndDLQRoutes(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "rq", map[string]any{"retryLimit": 0})
	pushN(t, s.base, "rq", "A", 1, 5)
	pushN(t, s.base, "rq", "B", 6, 7)

	var list struct {
		Queues []struct {
			Name       string
			Partitions int
			Messages   struct{ Total, Pending int64 }
		}
	}
	if code := getJSON(t, s.base+"/api/v1/resources/queues", &list); code != 200 {
		t.Fatalf("list queues: %d", code)
	}
	found := false
	for _, q := range list.Queues {
		if q.Name == "rq" {
			found = q.Partitions == 3 && q.Messages.Total == 7 && q.Messages.Pending == 7 // A, B and Default
		}
	}
	if !found {
		t.Fatalf("queue list: %+v", list)
	}
	// g1 consumes A fully; g2 dead-letters the first message of B.
	for i := 0; i < 5; i++ {
		_, r := pop(t, s.base, popPath("rq", "A"), "consumerGroup=g1")
		ack(t, s.base, r.Messages[0], "completed", "g1")
	}
	_, r := pop(t, s.base, popPath("rq", "B"), "consumerGroup=g2")
	if a := ack(t, s.base, r.Messages[0], "failed", "g2"); !a.DLQ {
		t.Fatalf("retryLimit 0: the first failure goes to the DLQ: %+v", a)
	}
	var detail struct {
		Partitions []struct {
			Name  string
			Depth int64
			Lag   map[string]int64
		}
	}
	if code := getJSON(t, s.base+"/api/v1/resources/queues/rq", &detail); code != 200 {
		t.Fatal(code)
	}
	for _, p := range detail.Partitions {
		if p.Name == "A" && (p.Depth != 5 || p.Lag["g1"] != 0) {
			t.Fatalf("partition A: %+v", p)
		}
		if p.Name == "B" && p.Lag["g2"] != 1 {
			t.Fatalf("partition B: %+v", p)
		}
	}
	if code := getJSON(t, s.base+"/api/v1/resources/queues/nope", nil); code != 404 {
		t.Fatalf("missing queue: %d", code)
	}
	var dlq struct {
		Messages []struct {
			TransactionID string
			ConsumerGroup string
			Data          json.RawMessage
		}
	}
	getJSON(t, s.base+"/api/v1/dlq?queue=rq", &dlq)
	if len(dlq.Messages) != 1 || dlq.Messages[0].TransactionID != "m-6" || dlq.Messages[0].ConsumerGroup != "g2" || string(dlq.Messages[0].Data) != `{"n":6}` {
		t.Fatalf("dlq: %+v", dlq)
	}
	var groups []struct {
		Name, QueueName string
		TotalLag        int64
	}
	getJSON(t, s.base+"/api/v1/consumer-groups", &groups)
	if len(groups) < 2 {
		t.Fatalf("groups: %+v", groups)
	}
	var g1 map[string]struct{ Partitions []map[string]any }
	getJSON(t, s.base+"/api/v1/consumer-groups/g1", &g1)
	if len(g1["rq"].Partitions) != 1 {
		t.Fatalf("group g1: %+v", g1)
	}
	// Seek g1 back to the start of time: it reads A again.
	code, rb := post(t, s.base, "/api/v1/consumer-groups/g1/queues/rq/seek", []byte(`{"timestamp":"1970-01-01T00:00:00Z"}`))
	if code != 200 || !strings.Contains(string(rb), `"partitionsUpdated":1`) {
		t.Fatalf("seek: %d %s", code, rb)
	}
	_, r = pop(t, s.base, popPath("rq", "A"), "consumerGroup=g1&autoAck=true&batch=10")
	if len(r.Messages) != 5 {
		t.Fatalf("after seek: %d messages", len(r.Messages))
	}
	code, rb = post(t, s.base, "/api/v1/consumer-groups/g1/queues/rq/seek", []byte(`{"toEnd":true}`))
	if code != 200 {
		t.Fatalf("seek to end: %d %s", code, rb)
	}
	if code, _ := post(t, s.base, "/api/v1/consumer-groups/g1/queues/rq/seek", []byte(`{}`)); code != 400 {
		t.Fatalf("seek without target: %d", code)
	}
	// A zone that carries the time out of years 1..9999 is a 400 naming
	// the field and the range (it was answered with a five-digit year);
	// the last instant of 9999 is taken and written with four digits.
	for _, ts := range []string{"9999-12-31T23:59:59.999999999-14:00", "0001-01-01T00:00:00+14:00"} {
		code, rb := post(t, s.base, "/api/v1/consumer-groups/g1/queues/rq/seek", []byte(`{"timestamp":"`+ts+`"}`))
		if code != 400 || !strings.Contains(string(rb), `"timestamp must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z`) {
			t.Fatalf("seek to %s: %d %s, want 400 naming the range", ts, code, rb)
		}
		code, rb = post(t, s.base, "/api/v1/consumer-groups/g1/subscription", []byte(`{"subscriptionTimestamp":"`+ts+`"}`))
		if code != 400 || !strings.Contains(string(rb), `"subscriptionTimestamp must be a time from 0001-01-01T00:00:00Z`) {
			t.Fatalf("subscription at %s: %d %s, want 400 naming the range", ts, code, rb)
		}
	}
	code, rb = post(t, s.base, "/api/v1/consumer-groups/g1/queues/rq/seek", []byte(`{"timestamp":"9999-12-31T09:59:59.999999999-14:00"}`))
	if code != 200 || !strings.Contains(string(rb), `"targetTimestamp":"9999-12-31T23:59:59.999999999Z"`) {
		t.Fatalf("seek to the end of 9999: %d %s", code, rb)
	}
	// Deleting the group: it starts over by its subscription (all).
	if code, b := del(t, s.base+"/api/v1/consumer-groups/g1"); code != 200 || !strings.Contains(b, `"deletedPartitions":1`) {
		t.Fatalf("delete group: %d %s", code, b)
	}
	_, r = pop(t, s.base, popPath("rq", "A"), "consumerGroup=g1&autoAck=true&batch=10")
	if len(r.Messages) != 5 {
		t.Fatalf("deleted group starts over: %d messages", len(r.Messages))
	}
	if code, b := del(t, s.base+"/api/v1/resources/queues/rq"); code != 200 || !strings.Contains(b, `"existed":true`) {
		t.Fatalf("delete queue: %d %s", code, b)
	}
	if n := len(readQueue(t, s.store, "rq")); n != 0 {
		t.Fatalf("deleted queue still holds %d", n)
	}
	// No exact dedup entry outlives its partition (no foreign key); the
	// hash sidecar's rows span partitions and expire with their window,
	// and a deleted partition's keys never match a new partition.
	var orphans int
	if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.dedup d
		WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = d.partition_id)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("dedup entries without a partition after the queue delete: %d (%v)", orphans, err)
	}
	if code, b := del(t, s.base+"/api/v1/resources/queues/rq"); code != 200 || !strings.Contains(b, `"existed":false`) {
		t.Fatalf("delete a deleted queue: %d %s", code, b)
	}
	// Pushing to the deleted queue recreates it.
	// The deleted queue's transactionIds are new in the recreated queue.
	wantStatuses(t, push(t, s.base, body(item{"rq", "A", 1, "again"}, item{"rq", "A", 1, "m-1"}, item{"rq", "B", 1, "m-6"})), Q, Q, Q)
}

// TestCaseC03DeletedGroupAfterRestart: a deleted group does not come back
// with its old cursor after a broker restart.
func TestCaseC03DeletedGroupAfterRestart(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabase(t)
	walDir := t.TempDir()
	b := testenv.StartBroker(t, url, walDir, nil)
	base := "http://" + b.Addr()
	pushN(t, base, "qr", "P", 1, 10)
	if code, _ := pop(t, base, popPath("qr", "P"), "consumerGroup=gone&subscriptionMode=new"); code != http.StatusNoContent {
		t.Fatalf("new-mode group saw history: %d", code)
	}
	pushN(t, base, "qr", "P", 11, 12)
	_, r := pop(t, base, popPath("qr", "P"), "consumerGroup=gone&autoAck=true&batch=100")
	if len(r.Messages) != 2 {
		t.Fatalf("new-mode group: %d", len(r.Messages))
	}
	del(t, base+"/api/v1/consumer-groups/gone")
	b2 := testenv.StartBroker(t, url, t.TempDir(), nil)
	_, r = pop(t, "http://"+b2.Addr(), popPath("qr", "P"), "consumerGroup=gone&subscriptionFrom=1970-01-01T00:00:00Z&autoAck=true&batch=100")
	if len(r.Messages) != 12 {
		t.Fatalf("re-created group after restart: %d messages, want all 12", len(r.Messages))
	}
}

// TestDedupSweep: sidecar entries are deleted once their window and the
// grace have passed, while the broker keeps projecting.
func TestDedupSweep(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.Projector.DedupGrace = 100 * time.Millisecond })
	configure(t, s.base, "sw", map[string]any{"dedupWindowSeconds": 1})
	configure(t, s.base, "keep", nil) // default window: its entries stay
	// Two pushes, so two projection batches: a sidecar row expires with the
	// longest window of its batch's queues.
	push(t, s.base, body(item{"sw", "P", 1, "T"}))
	push(t, s.base, body(item{"keep", "P", 1, "T"}))
	count := func(queue string) int {
		var n int
		if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.dedup_batches d
			WHERE EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			              WHERE q.name = $1 AND p.id = ANY(d.partition_ids))`, queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, 10*time.Second, "sweep", func() bool { return count("sw") == 0 })
	if count("keep") != 1 {
		t.Fatalf("an entry inside its window was swept")
	}
	wantStatuses(t, push(t, s.base, body(item{"sw", "P", 1, "T"}, item{"keep", "P", 1, "T"})), Q, D)
}

// TestQueueDeleteUnderLoadLeavesNoSidecarOrphans deletes a queue five
// times while producers keep pushing into it: the exact dedup entries (no
// foreign key) never outlive their partition, and once the queue is gone
// its transactionIds are new to the queue a push recreates (the hash
// sidecar's rows still naming deleted partitions expire with their window).
func TestQueueDeleteUnderLoadLeavesNoSidecarOrphans(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{queue: "dq", partitions: 4, perPush: 20, producers: 3, bases: []string{s.base}}
	done := make(chan struct{})
	go func() { l.run(ctx, t); close(done) }()
	for i := 0; i < 5; i++ {
		time.Sleep(300 * time.Millisecond)
		if code, b := del(t, s.base+"/api/v1/resources/queues/dq"); code != 200 {
			t.Fatalf("delete queue: %d %s", code, b)
		}
	}
	cancel()
	<-done
	testenv.WaitFor(t, 20*time.Second, "drain", func() bool { return s.b.Projector.Backlog() == 0 })
	if code, b := del(t, s.base+"/api/v1/resources/queues/dq"); code != 200 {
		t.Fatalf("delete queue: %d %s", code, b)
	}
	var orphans, entries int
	if err := s.store.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM queen.dedup d WHERE NOT EXISTS
		(SELECT 1 FROM queen.partitions p WHERE p.id = d.partition_id)), (SELECT count(*) FROM queen.dedup_batches)`).Scan(&orphans, &entries); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || entries == 0 {
		t.Fatalf("%d exact dedup entries have no partition; %d sidecar rows", orphans, entries)
	}
	var again []item
	for p := 0; p < l.producers; p++ {
		for seq := 0; seq < 4; seq++ {
			again = append(again, item{"dq", fmt.Sprintf("p%d", (p+seq)%l.partitions), 1, fmt.Sprintf("%d-%d", p, seq)})
		}
	}
	for i, r := range push(t, s.base, body(again...)) {
		if r.Status != Q {
			t.Fatalf("%s in the recreated queue: %s", again[i].TransactionID, r.Status)
		}
	}
	t.Logf("verdicts %v, %d sidecar entries", l.counts(), entries)
}

// TestQueuesListPages: GET /api/v1/resources/queues answers one page of
// the queues by name, the default limit's when the query names none (120
// queues here, over the default of 100; unpaged, 20,000 queues answered
// 4.3 MB), with total (every queue) and pagination {limit, offset} beside
// Queen's queues. Pages are disjoint and one after another are every
// queue, each with its own counts; a bad limit or offset is a 400 naming
// it.
func TestQueuesListPages(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const queues = 120
	var items []string
	for i := range queues {
		items = append(items, fmt.Sprintf(`{"queue":"lq%03d","partition":"P","payload":%d}`, i, i))
	}
	if code, b := post(t, s.base, "/api/v1/push", []byte(`{"items":[`+strings.Join(items, ",")+`]}`)); code != 201 {
		t.Fatalf("push: %d %s", code, b)
	}
	type page struct {
		Queues []struct {
			Name       string
			Partitions int
			Messages   struct{ Total, Pending int64 }
		}
		Total      int
		Pagination struct{ Limit, Offset int }
	}
	list := func(query string) page {
		t.Helper()
		var p page
		if code := getJSON(t, s.base+"/api/v1/resources/queues?"+query, &p); code != 200 {
			t.Fatalf("queues?%s: %d", query, code)
		}
		return p
	}
	deadline := time.Now().Add(15 * time.Second)
	for list("").Total != queues {
		if time.Now().After(deadline) {
			t.Fatalf("queues never reached %d: %+v", queues, list(""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	names := func(p page) []string {
		var out []string
		for _, q := range p.Queues {
			out = append(out, q.Name)
			if q.Partitions != 1 || q.Messages.Total != 1 || q.Messages.Pending != 1 {
				t.Fatalf("%s: %+v", q.Name, q)
			}
		}
		return out
	}
	var want []string
	for i := range queues {
		want = append(want, fmt.Sprintf("lq%03d", i))
	}
	all := list("limit=1000")
	if fmt.Sprint(names(all)) != fmt.Sprint(want) || all.Pagination.Limit != 1000 {
		t.Fatalf("limit=1000: %v %+v", names(all), all.Pagination)
	}
	if first := list(""); fmt.Sprint(names(first)) != fmt.Sprint(want[:fastapi.DefaultQueuesLimit]) ||
		first.Pagination.Limit != fastapi.DefaultQueuesLimit || first.Pagination.Offset != 0 {
		t.Fatalf("no limit: %d queues, pagination %+v; want the first %d", len(first.Queues), first.Pagination, fastapi.DefaultQueuesLimit)
	}
	for _, limit := range []int{1, 30, 120} {
		var got []string
		for offset := 0; ; offset += limit {
			p := list(fmt.Sprintf("limit=%d&offset=%d", limit, offset))
			if p.Total != queues || p.Pagination.Offset != offset {
				t.Fatalf("limit %d offset %d: total %d, pagination %+v", limit, offset, p.Total, p.Pagination)
			}
			got = append(got, names(p)...)
			if len(p.Queues) < limit {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pages of %d, one after another:\n got %v\nwant %v", limit, got, want)
		}
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=abc", "offset=-1", "offset=2147483648"} {
		code, b := get(t, s.base+"/api/v1/resources/queues?"+q)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(b), &e) != nil || !strings.HasPrefix(e.Error, q[:strings.IndexByte(q, '=')]+" must be") {
			t.Errorf("%s: %d %s, want 400 naming the parameter", q, code, b)
		}
	}
}
