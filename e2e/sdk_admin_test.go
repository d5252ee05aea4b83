package e2e

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/broker"
)

// These tests pin the admin summary routes Queen's SDKs call (JS Admin.js,
// Go admin.go): queue depth per group, overview, namespaces, tasks, the
// partition list and the stats refresh (fastapi/admin.go, pg/admin.go).

type depthPart struct {
	Partition                  string
	Pending, Processing, Ready int64
}

type depthResp struct {
	Queue, Group                       string
	Pending, Processing, Ready         int64
	PartitionsPending, PartitionsReady int64
	Conflation                         bool
	EffectivePending, EffectiveReady   int64
	Partitions                         []depthPart
}

type msgCounts struct {
	Total, Pending, Processing int64
	Completed, DeadLetter      *int64
}

type labelRow struct {
	Namespace, Task    string
	Queues, Partitions int64
	Messages           msgCounts
}

func i64(v int64) *int64 { return &v }

// adminFixture fills a fresh database (setup gives each test its own):
//
//	billing.invoices  A: 7 messages (5, then 2 after "late" joined), B: 3
//	billing.refunds   R: 4, all consumed in queue mode
//	shipping.labels   S: 2, one dead-lettered by g2
//
// Queue mode on billing.invoices/A: 3 consumed (autoAck), 1 under a live
// lease. g1 consumed 2 of B. late joined with subscriptionMode=new by a pop
// of B (cursor at B's end, none on A) before the last 2 of A were pushed.
func adminFixture(t *testing.T, s *bundle) {
	t.Helper()
	pushN(t, s.base, "billing.invoices", "A", 1, 5)
	pushN(t, s.base, "billing.invoices", "B", 6, 8)
	pushN(t, s.base, "billing.refunds", "R", 1, 4)
	pushN(t, s.base, "shipping.labels", "S", 1, 2)
	popN := func(queue, partition, query string, want int) popResp {
		t.Helper()
		code, r := pop(t, s.base, popPath(queue, partition), query)
		if len(r.Messages) != want {
			t.Fatalf("pop %s/%s ?%s: %d with %d messages, want %d", queue, partition, query, code, len(r.Messages), want)
		}
		return r
	}
	popN("billing.invoices", "A", "batch=3&autoAck=true", 3)
	popN("billing.invoices", "A", "batch=1", 1) // leased, not acked
	popN("billing.invoices", "B", "consumerGroup=g1&batch=2&autoAck=true", 2)
	popN("billing.invoices", "B", "consumerGroup=late&subscriptionMode=new", 0)
	pushN(t, s.base, "billing.invoices", "A", 9, 10)
	popN("billing.refunds", "R", "batch=10&autoAck=true", 4)
	r := popN("shipping.labels", "S", "consumerGroup=g2&batch=1", 1)
	if a := ack(t, s.base, r.Messages[0], "dlq", "g2"); !a.Success || !a.DLQ {
		t.Fatalf("dlq ack: %+v", a)
	}
}

// TestAdminQueueDepth: GET /api/v1/resources/queues/:q/depth per group:
// without a group the worst group per partition (as Queen answers); queue
// mode (cursor, live lease, a partition never popped counts whole), a named group with subscription "all" (no cursor = from
// the start), a "new" group (no cursor = from its join time), a group never
// seen; unknown queue 404, bad group name 400.
func TestAdminQueueDepth(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	adminFixture(t, s)
	base := s.base + "/api/v1/resources/queues/billing.invoices/depth"
	for _, c := range []struct {
		query string
		want  depthResp
	}{
		// No group: per partition the worst group (A: g1's 7, B: queue mode's 3).
		{"", depthResp{Queue: "billing.invoices", Group: "", Pending: 10, Ready: 10,
			PartitionsPending: 2, PartitionsReady: 2, EffectivePending: 10, EffectiveReady: 10,
			Partitions: []depthPart{{"A", 7, 0, 7}, {"B", 3, 0, 3}}}},
		{"?group=__QUEUE_MODE__", depthResp{Queue: "billing.invoices", Group: "__QUEUE_MODE__", Pending: 7, Processing: 1, Ready: 6,
			PartitionsPending: 2, PartitionsReady: 2, EffectivePending: 7, EffectiveReady: 6,
			Partitions: []depthPart{{"A", 4, 1, 3}, {"B", 3, 0, 3}}}},
		{"?group=g1", depthResp{Queue: "billing.invoices", Group: "g1", Pending: 8, Ready: 8,
			PartitionsPending: 2, PartitionsReady: 2, EffectivePending: 8, EffectiveReady: 8,
			Partitions: []depthPart{{"A", 7, 0, 7}, {"B", 1, 0, 1}}}},
		{"?group=late", depthResp{Queue: "billing.invoices", Group: "late", Pending: 2, Ready: 2,
			PartitionsPending: 1, PartitionsReady: 1, EffectivePending: 2, EffectiveReady: 2,
			Partitions: []depthPart{{"A", 2, 0, 2}, {"B", 0, 0, 0}}}},
		{"?group=nobody", depthResp{Queue: "billing.invoices", Group: "nobody", Pending: 10, Ready: 10,
			PartitionsPending: 2, PartitionsReady: 2, EffectivePending: 10, EffectiveReady: 10,
			Partitions: []depthPart{{"A", 7, 0, 7}, {"B", 3, 0, 3}}}},
	} {
		var got depthResp
		if code := getJSON(t, base+c.query, &got); code != http.StatusOK || !reflect.DeepEqual(got, c.want) {
			t.Errorf("depth%s: %d\n got %+v\nwant %+v", c.query, code, got, c.want)
		}
	}
	// A queue without partitions yet (configure only) has an empty list.
	configure(t, s.base, "empty.q", nil)
	var empty struct{ Partitions []depthPart }
	if code := getJSON(t, s.base+"/api/v1/resources/queues/empty.q/depth", &empty); code != 200 || empty.Partitions == nil {
		t.Errorf("depth of a queue without messages: %d %+v", code, empty)
	}
	if code, b := get(t, s.base+"/api/v1/resources/queues/nope/depth"); code != http.StatusNotFound || b != `{"error":"Queue not found"}` {
		t.Errorf("unknown queue: %d %s", code, b)
	}
	if code, b := get(t, base+"?group=bad%01name"); code != http.StatusBadRequest || !strings.Contains(b, `"error"`) {
		t.Errorf("invalid group: %d %s", code, b)
	}
}

// TestAdminOverviewNamespacesTasks: the system totals and the
// per-namespace and per-task rollups count exactly what adminFixture did.
func TestAdminOverviewNamespacesTasks(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	adminFixture(t, s)

	var ov struct {
		Queues, Partitions, Namespaces, Tasks, ConsumerGroups int64
		Messages                                              msgCounts
		Timestamp                                             string
		StatsAge                                              *int64
	}
	if code := getJSON(t, s.base+"/api/v1/resources/overview", &ov); code != 200 {
		t.Fatalf("overview: %d", code)
	}
	// 16 stored; queue-mode pending: invoices 7 (1 leased), refunds 0,
	// labels 2; completed = 16 - 9; one dead letter; groups g1, g2, late.
	wantMsgs := msgCounts{Total: 16, Pending: 9, Processing: 1, Completed: i64(7), DeadLetter: i64(1)}
	if ov.Queues != 3 || ov.Partitions != 4 || ov.Namespaces != 2 || ov.Tasks != 3 || ov.ConsumerGroups != 3 ||
		!reflect.DeepEqual(ov.Messages, wantMsgs) || ov.StatsAge == nil || *ov.StatsAge != 0 {
		t.Errorf("overview: %+v (messages %+v)", ov, ov.Messages)
	}
	if ts, err := time.Parse(time.RFC3339Nano, ov.Timestamp); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("overview timestamp %q: %v", ov.Timestamp, err)
	}

	var ns struct{ Namespaces []labelRow }
	if code := getJSON(t, s.base+"/api/v1/resources/namespaces", &ns); code != 200 {
		t.Fatalf("namespaces: %d", code)
	}
	wantNS := []labelRow{
		{Namespace: "billing", Queues: 2, Partitions: 3, Messages: msgCounts{Total: 14, Pending: 7, Processing: 1}},
		{Namespace: "shipping", Queues: 1, Partitions: 1, Messages: msgCounts{Total: 2, Pending: 2}},
	}
	if !reflect.DeepEqual(ns.Namespaces, wantNS) {
		t.Errorf("namespaces:\n got %+v\nwant %+v", ns.Namespaces, wantNS)
	}

	var ts struct{ Tasks []labelRow }
	if code := getJSON(t, s.base+"/api/v1/resources/tasks", &ts); code != 200 {
		t.Fatalf("tasks: %d", code)
	}
	wantTasks := []labelRow{
		{Task: "invoices", Queues: 1, Partitions: 2, Messages: msgCounts{Total: 10, Pending: 7, Processing: 1}},
		{Task: "labels", Queues: 1, Partitions: 1, Messages: msgCounts{Total: 2, Pending: 2}},
		{Task: "refunds", Queues: 1, Partitions: 1, Messages: msgCounts{Total: 4}},
	}
	if !reflect.DeepEqual(ts.Tasks, wantTasks) {
		t.Errorf("tasks:\n got %+v\nwant %+v", ts.Tasks, wantTasks)
	}

	// A queue named without "." has task "": it counts as a namespace and
	// not as a task; an empty database answers empty lists, not null.
	pushN(t, s.base, "solo", "P", 1, 1)
	code, b := get(t, s.base+"/api/v1/resources/tasks")
	if code != 200 || strings.Contains(b, `"task":""`) {
		t.Errorf("tasks with a task-less queue: %d %s", code, b)
	}
	s2 := setup(t, nil)
	for _, path := range []string{"namespaces", "tasks"} {
		if code, b := get(t, s2.base+"/api/v1/resources/"+path); code != 200 || b != `{"`+path+`":[]}` {
			t.Errorf("%s of an empty broker: %d %s", path, code, b)
		}
	}
}

type partitionRow struct {
	ID, Queue, Name, Namespace, Task, CreatedAt string
	LastMessageAt                               *string
	NextOffset                                  int64
	Messages                                    msgCounts
}

type partitionsResp struct {
	Partitions []partitionRow
	Total      int64
	Pagination struct{ Limit, Offset int }
}

// TestAdminPartitions: GET /api/v1/resources/partitions lists every
// partition (or one queue's) by queue and name, with queue-mode counts and
// dead letters, paged with a total; unknown queue 404.
func TestAdminPartitions(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	adminFixture(t, s)
	key := func(p partitionRow) string { return p.Queue + "/" + p.Name }

	var all partitionsResp
	if code := getJSON(t, s.base+"/api/v1/resources/partitions", &all); code != 200 {
		t.Fatalf("partitions: %d", code)
	}
	type counts struct {
		next int64
		m    msgCounts
	}
	want := map[string]counts{
		"billing.invoices/A": {7, msgCounts{Total: 7, Pending: 4, Processing: 1, DeadLetter: i64(0)}},
		"billing.invoices/B": {3, msgCounts{Total: 3, Pending: 3, DeadLetter: i64(0)}},
		"billing.refunds/R":  {4, msgCounts{Total: 4, DeadLetter: i64(0)}},
		"shipping.labels/S":  {2, msgCounts{Total: 2, Pending: 2, DeadLetter: i64(1)}},
	}
	order := []string{"billing.invoices/A", "billing.invoices/B", "billing.refunds/R", "shipping.labels/S"}
	if all.Total != 4 || len(all.Partitions) != 4 || all.Pagination.Limit != 100 || all.Pagination.Offset != 0 {
		t.Fatalf("partitions: %+v", all)
	}
	for i, p := range all.Partitions {
		w := want[key(p)]
		if key(p) != order[i] || p.NextOffset != w.next || !reflect.DeepEqual(p.Messages, w.m) ||
			len(p.ID) != 36 || p.LastMessageAt == nil || p.CreatedAt == "" {
			t.Errorf("partition %d: %+v (messages %+v), want %s %+v", i, p, p.Messages, order[i], w)
		}
	}
	if p := all.Partitions[0]; p.Namespace != "billing" || p.Task != "invoices" {
		t.Errorf("labels of %s: %q %q", key(p), p.Namespace, p.Task)
	}

	var one partitionsResp
	getJSON(t, s.base+"/api/v1/resources/partitions?queue=billing.invoices", &one)
	if one.Total != 2 || len(one.Partitions) != 2 || key(one.Partitions[1]) != "billing.invoices/B" {
		t.Errorf("partitions of one queue: %+v", one)
	}
	var page partitionsResp
	getJSON(t, s.base+"/api/v1/resources/partitions?limit=2&offset=1", &page)
	if page.Total != 4 || len(page.Partitions) != 2 || key(page.Partitions[0]) != "billing.invoices/B" ||
		key(page.Partitions[1]) != "billing.refunds/R" || page.Pagination.Limit != 2 || page.Pagination.Offset != 1 {
		t.Errorf("page: %+v", page)
	}
	var past partitionsResp
	getJSON(t, s.base+"/api/v1/resources/partitions?offset=10", &past)
	if past.Total != 4 || past.Partitions == nil || len(past.Partitions) != 0 {
		t.Errorf("past the end: %+v", past)
	}
	if code, b := get(t, s.base+"/api/v1/resources/partitions?queue=nope"); code != http.StatusNotFound || b != `{"error":"Queue not found"}` {
		t.Errorf("unknown queue: %d %s", code, b)
	}
}

// TestAdminCountsAfterRetention: messages retention deleted before anyone
// read them are neither stored nor pending: depth and the partition list
// count from the first stored offset, not from offset 0.
func TestAdminCountsAfterRetention(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.RetentionInterval = 100 * time.Millisecond })
	configure(t, s.base, "ret", map[string]any{"retentionEnabled": true, "retentionSeconds": 2})
	pushN(t, s.base, "ret", "P", 1, 3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.segments sg
			JOIN queen.partitions p ON p.id = sg.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = 'ret'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention left %d segments", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pushN(t, s.base, "ret", "P", 4, 5)
	var d depthResp
	getJSON(t, s.base+"/api/v1/resources/queues/ret/depth", &d)
	if d.Pending != 2 || len(d.Partitions) != 2 { // P and configure's Default
		t.Errorf("depth after retention: %+v", d)
	}
	var ps partitionsResp
	getJSON(t, s.base+"/api/v1/resources/partitions?queue=ret", &ps)
	for _, p := range ps.Partitions {
		if p.Name == "P" && (p.NextOffset != 5 || p.Messages.Total != 2 || p.Messages.Pending != 2) {
			t.Errorf("partition P after retention: %+v", p)
		}
	}
}

// TestAdminStatsRefresh: POST /api/v1/stats/refresh answers success for
// the Go SDK's empty body, null and the JS SDK's {}, 400 for a body that is
// not a JSON object; it needs the admin role (the policy's default for an
// unlisted POST), while the summary GETs need read.
func TestAdminStatsRefresh(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	for _, b := range []string{"", "null", "{}", ` {"any":1} `} {
		code, rb := post(t, s.base, "/api/v1/stats/refresh", []byte(b))
		var r struct{ Success bool }
		if code != 200 || json.Unmarshal(rb, &r) != nil || !r.Success {
			t.Errorf("refresh with body %q: %d %s", b, code, rb)
		}
	}
	for _, b := range []string{"[1]", "{", `"x"`} {
		if code, rb := post(t, s.base, "/api/v1/stats/refresh", []byte(b)); code != http.StatusBadRequest || !strings.Contains(string(rb), `"error"`) {
			t.Errorf("refresh with body %q: %d %s, want 400", b, code, rb)
		}
	}

	a := authSetup(t, nil)
	reader := token(t, "r", []string{"read-only"}, "valid")
	rw := token(t, "rw", []string{"read-write"}, "valid")
	admin := token(t, "a", []string{"admin"}, "valid")
	for _, c := range []struct {
		method, path, tok string
		want              int
	}{
		{"POST", "/api/v1/stats/refresh", reader, http.StatusForbidden},
		{"POST", "/api/v1/stats/refresh", rw, http.StatusForbidden},
		{"POST", "/api/v1/stats/refresh", admin, http.StatusOK},
		{"GET", "/api/v1/resources/overview", reader, http.StatusOK},
		{"GET", "/api/v1/resources/namespaces", reader, http.StatusOK},
		{"GET", "/api/v1/resources/tasks", reader, http.StatusOK},
		{"GET", "/api/v1/resources/partitions", reader, http.StatusOK},
		{"GET", "/api/v1/resources/queues/nope/depth", reader, http.StatusNotFound},
	} {
		if code, b := do(t, c.method, a.base+c.path, c.tok, nil); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, b, c.want)
		}
	}
}
