package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/testenv"
)

// configureNS creates queue with a namespace and task.
func configureNS(t testing.TB, base, queue, namespace, task string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"queue": queue, "namespace": namespace, "task": task})
	if code, rb := post(t, base, "/api/v1/configure", b); code != http.StatusOK {
		t.Fatalf("configure %s: %d %s", queue, code, rb)
	}
}

// storedCount is how many messages queue holds in PostgreSQL.
func storedCount(t testing.TB, s *bundle, queue string) int { return len(readQueue(t, s.store, queue)) }

type statusCounts struct {
	Total, Pending, Processing, Completed, Failed, DeadLetter int64
}

type statusQueuesResp struct {
	Queues []struct {
		ID, Name, Namespace, Task, CreatedAt string
		Partitions                           int
		Messages                             statusCounts
	}
	Pagination struct{ Limit, Offset int }
}

func statusQueueNames(r statusQueuesResp) string {
	var n []string
	for _, q := range r.Queues {
		n = append(n, q.Name)
	}
	return strings.Join(n, ",")
}

// TestStatusRoutes pushes to three queues (two in one namespace), pops and
// acks some, and checks every status route's shape and numbers.
func TestStatusRoutes(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configureNS(t, s.base, "st-a", "shop", "bill")
	configureNS(t, s.base, "st-b", "shop", "")
	configureNS(t, s.base, "st-c", "other", "")
	pushN(t, s.base, "st-a", "P1", 1, 5)
	pushN(t, s.base, "st-b", "P1", 1, 3)
	testenv.WaitFor(t, 10*time.Second, "projected", func() bool {
		return storedCount(t, s, "st-a") == 5 && storedCount(t, s, "st-b") == 3
	})
	// Pop two of st-a under one lease, ack the first: cursor 1, lease over
	// offset 1.
	code, r := pop(t, s.base, popPath("st-a", "P1"), "batch=2")
	if code != 200 || len(r.Messages) != 2 {
		t.Fatalf("pop: %d %+v", code, r)
	}
	if a := ack(t, s.base, r.Messages[0], "completed", ""); !a.Success {
		t.Fatalf("ack: %+v", a)
	}

	t.Run("queues", func(t *testing.T) {
		var q statusQueuesResp
		if code := getJSON(t, s.base+"/api/v1/status/queues", &q); code != 200 {
			t.Fatalf("status/queues: %d", code)
		}
		if got := statusQueueNames(q); got != "st-c,st-b,st-a" { // newest first
			t.Fatalf("queues %s", got)
		}
		a := q.Queues[2]
		// Partitions: /configure creates Default beside the pushed P1.
		if a.Namespace != "shop" || a.Task != "bill" || a.Partitions != 2 ||
			a.Messages != (statusCounts{Total: 5, Pending: 4, Processing: 1, Completed: 1}) {
			t.Fatalf("st-a: %+v", a)
		}
		if q.Pagination.Limit != 100 || q.Pagination.Offset != 0 {
			t.Fatalf("pagination %+v", q.Pagination)
		}
		getJSON(t, s.base+"/api/v1/status/queues?namespace=shop", &q)
		if got := statusQueueNames(q); got != "st-b,st-a" {
			t.Fatalf("namespace shop: %s", got)
		}
		getJSON(t, s.base+"/api/v1/status/queues?task=bill", &q)
		if got := statusQueueNames(q); got != "st-a" {
			t.Fatalf("task bill: %s", got)
		}
		getJSON(t, s.base+"/api/v1/status/queues?limit=1&offset=1", &q)
		if got := statusQueueNames(q); got != "st-b" || q.Pagination.Limit != 1 || q.Pagination.Offset != 1 {
			t.Fatalf("page: %s %+v", got, q.Pagination)
		}
	})

	t.Run("queue detail", func(t *testing.T) {
		var d struct {
			Queue struct {
				Name, Namespace, Task string
				Config                map[string]any
			}
			Partitions []struct {
				ID, Name                    string
				Messages, Stats             statusCounts
				Cursor                      struct{ TotalConsumed int64 }
				LastActivity, OldestMessage *string
				NewestMessage               *string
			}
			Totals struct {
				Messages statusCounts
				Total    int64
			}
		}
		if code := getJSON(t, s.base+"/api/v1/status/queues/st-a", &d); code != 200 {
			t.Fatalf("status/queues/st-a: %d", code)
		}
		want := statusCounts{Total: 5, Pending: 4, Processing: 1, Completed: 1}
		if d.Queue.Name != "st-a" || d.Queue.Namespace != "shop" || d.Queue.Config["leaseTime"] != float64(300) ||
			len(d.Partitions) != 2 || d.Totals.Messages != want || d.Totals.Total != 5 {
			t.Fatalf("detail: %+v", d)
		}
		for _, k := range []string{"dlqAfterMaxRetries", "maxQueueSize", "deadLetterQueue", "dedupWindowSeconds"} {
			if _, ok := d.Queue.Config[k]; !ok {
				t.Errorf("config lacks %s: %v", k, d.Queue.Config)
			}
		}
		def, p1 := d.Partitions[0], d.Partitions[1] // by name
		if def.Name != "Default" || def.Messages != (statusCounts{}) || def.OldestMessage != nil || def.NewestMessage != nil {
			t.Fatalf("Default partition: %+v", def)
		}
		if p1.Name != "P1" || p1.Messages != want || p1.Stats != want || p1.Cursor.TotalConsumed != 1 ||
			p1.LastActivity == nil || p1.OldestMessage == nil || p1.NewestMessage == nil {
			t.Fatalf("P1: %+v", p1)
		}
		if code, b := get(t, s.base+"/api/v1/status/queues/nope"); code != 404 || !strings.Contains(b, "Queue not found") {
			t.Fatalf("unknown queue: %d %s", code, b)
		}
	})

	t.Run("queue messages", func(t *testing.T) {
		var ms []struct {
			ID, TransactionID, PartitionID, QueuePath, Queue, Partition, Status, CreatedAt string
			Offset                                                                         int64
		}
		if code := getJSON(t, s.base+"/api/v1/status/queues/st-a/messages", &ms); code != 200 {
			t.Fatalf("messages: %d", code)
		}
		var got []string
		for _, m := range ms {
			got = append(got, fmt.Sprintf("%d:%s", m.Offset, m.Status))
		}
		if strings.Join(got, " ") != "4:pending 3:pending 2:pending 1:processing 0:completed" ||
			ms[0].QueuePath != "st-a/P1" || ms[0].Queue != "st-a" {
			t.Fatalf("messages %v %+v", got, ms[0])
		}
		getJSON(t, s.base+"/api/v1/status/queues/st-a/messages?limit=2&offset=1", &ms)
		if len(ms) != 2 || ms[0].Offset != 3 || ms[1].Offset != 2 {
			t.Fatalf("page %+v", ms)
		}
		if code, _ := get(t, s.base+"/api/v1/status/queues/nope/messages"); code != 404 {
			t.Fatalf("unknown queue: %d", code)
		}
	})

	type throughput struct {
		Timestamp         string
		Ingested          int64
		Processed         int64
		IngestedPerSecond float64
	}
	type statusResp struct {
		TimeRange     struct{ From, To string }
		BucketMinutes int
		PointCount    int
		Throughput    []throughput
		Queues        []struct {
			Name          string
			Partitions    int
			TotalConsumed int64
		}
		Messages statusCounts
		Leases   struct {
			Active, PartitionsWithLeases, TotalBatchSize, TotalAcked int64
		}
		DeadLetterQueue struct {
			TotalMessages, AffectedPartitions int64
			TopErrors                         []struct {
				Error string
				Count int64
			}
		}
		StatsAge int
	}
	ingested := func(r statusResp) int64 {
		var n int64
		for _, p := range r.Throughput {
			n += p.Ingested
		}
		return n
	}

	t.Run("status", func(t *testing.T) {
		var st statusResp
		if code := getJSON(t, s.base+"/api/v1/status", &st); code != 200 {
			t.Fatalf("status: %d", code)
		}
		if st.BucketMinutes != 1 || st.PointCount != len(st.Throughput) || st.PointCount < 60 || st.PointCount > 62 {
			t.Fatalf("buckets: %d minutes, %d points (%d)", st.BucketMinutes, st.PointCount, len(st.Throughput))
		}
		if ingested(st) != 8 {
			t.Fatalf("ingested %d, want 8: %+v", ingested(st), st.Throughput)
		}
		if st.Throughput[0].Timestamp <= st.Throughput[len(st.Throughput)-1].Timestamp {
			t.Fatalf("throughput not newest first: %s .. %s", st.Throughput[0].Timestamp, st.Throughput[len(st.Throughput)-1].Timestamp)
		}
		if st.Messages != (statusCounts{Total: 8, Pending: 7, Processing: 1, Completed: 1}) {
			t.Fatalf("messages %+v", st.Messages)
		}
		if st.Leases.Active != 1 || st.Leases.PartitionsWithLeases != 1 || st.Leases.TotalBatchSize != 1 {
			t.Fatalf("leases %+v", st.Leases)
		}
		names := map[string]int64{}
		for _, q := range st.Queues {
			names[q.Name] = q.TotalConsumed
		}
		if len(names) != 2 || names["st-a"] != 1 || names["st-b"] != 0 {
			t.Fatalf("queues %+v", st.Queues)
		}
		// Across 1970 the minute buckets round down as after it, newest
		// first: 23:58 is there and none is out of order.
		if code := getJSON(t, s.base+"/api/v1/status?from=1969-12-31T23:58:30Z&to=1970-01-01T00:00:30Z", &st); code != 200 {
			t.Fatalf("status across 1970: %d", code)
		}
		var stamps []string
		for _, p := range st.Throughput {
			stamps = append(stamps, p.Timestamp)
		}
		if got := strings.Join(stamps, ","); got != "1970-01-01T00:00:00Z,1969-12-31T23:59:00Z,1969-12-31T23:58:00Z" {
			t.Fatalf("status across 1970: %s", got)
		}
		getJSON(t, s.base+"/api/v1/status?queue=st-b", &st)
		if ingested(st) != 3 || st.Messages.Total != 3 || len(st.Queues) != 1 {
			t.Fatalf("queue st-b: ingested %d, %+v", ingested(st), st.Messages)
		}
		getJSON(t, s.base+"/api/v1/status?namespace=shop&from="+url.QueryEscape(time.Now().Add(-3*time.Hour).UTC().Format(time.RFC3339)), &st)
		if ingested(st) != 8 || st.BucketMinutes != 5 {
			t.Fatalf("3 h of shop: ingested %d, bucket %d", ingested(st), st.BucketMinutes)
		}
		for _, q := range []string{"from=yesterday", "to=x", "queue=%00"} {
			if code, b := get(t, s.base+"/api/v1/status?"+q); code != 400 || !strings.Contains(b, `"error"`) {
				t.Fatalf("%s: %d %s", q, code, b)
			}
		}
	})

	t.Run("analytics", func(t *testing.T) {
		var an struct {
			DataPoints []struct {
				Timestamp string
				Messages  int64
			}
			Interval, From, To string
		}
		if code := getJSON(t, s.base+"/api/v1/status/analytics", &an); code != 200 {
			t.Fatalf("analytics: %d", code)
		}
		var n int64
		for _, p := range an.DataPoints {
			n += p.Messages
		}
		if an.Interval != "hour" || len(an.DataPoints) < 24 || len(an.DataPoints) > 26 || n != 8 {
			t.Fatalf("analytics: %s, %d points, %d messages", an.Interval, len(an.DataPoints), n)
		}
		getJSON(t, s.base+"/api/v1/status/analytics?interval=minute&task=bill&from="+
			url.QueryEscape(time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339)), &an)
		n = 0
		for _, p := range an.DataPoints {
			n += p.Messages
		}
		if an.Interval != "minute" || len(an.DataPoints) < 10 || len(an.DataPoints) > 12 || n != 5 {
			t.Fatalf("minute analytics: %s, %d points, %d messages", an.Interval, len(an.DataPoints), n)
		}
		if code, b := get(t, s.base+"/api/v1/status/analytics?interval=week"); code != http.StatusBadRequest ||
			b != `{"error":"interval must be minute, hour or day"}` {
			t.Fatalf("interval=week: %d %s, want 400 naming the intervals", code, b)
		}
		// A range of millennia is refused at once, not answered with
		// millions of points.
		if code, b := get(t, s.base+"/api/v1/status?from=0001-01-01&to=9999-12-31"); code != http.StatusBadRequest ||
			b != `{"error":"range too long: at most 10000 points of 360 minutes"}` {
			t.Fatalf("status over millennia: %d %s, want 400", code, b)
		}
		// Buckets before 1970 round down as after it: 22:30..00:30 across
		// the epoch is the 22:00, 23:00 and 00:00 hours (22:00 was
		// dropped).
		if code := getJSON(t, s.base+"/api/v1/status/analytics?interval=hour&from=1969-12-31T22:30:00Z&to=1970-01-01T00:30:00Z", &an); code != 200 {
			t.Fatalf("analytics across 1970: %d", code)
		}
		var stamps []string
		for _, p := range an.DataPoints {
			stamps = append(stamps, p.Timestamp)
		}
		if got := strings.Join(stamps, ","); got != "1969-12-31T22:00:00.000Z,1969-12-31T23:00:00.000Z,1970-01-01T00:00:00.000Z" {
			t.Fatalf("analytics across 1970: %s", got)
		}
		// A to that its zone carries past 9999 is a 400 naming to and the
		// range (it was answered as a five-digit year); the last instant
		// of 9999 is written with four digits.
		if code, b := get(t, s.base+"/api/v1/status/analytics?to="+url.QueryEscape("9999-12-31T23:59:59.999999999-14:00")); code != http.StatusBadRequest ||
			!strings.Contains(b, `"to must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z`) {
			t.Fatalf("to past 9999: %d %s, want 400 naming the range", code, b)
		}
		if code, b := get(t, s.base+"/api/v1/status/analytics?from="+url.QueryEscape("0001-01-01T00:00:00+14:00")); code != http.StatusBadRequest ||
			!strings.Contains(b, `"from must be a time from 0001-01-01T00:00:00Z`) {
			t.Fatalf("from before year 1: %d %s, want 400 naming the range", code, b)
		}
		if code := getJSON(t, s.base+"/api/v1/status/analytics?from=9999-12-31T23:00:00Z&to="+url.QueryEscape("9999-12-31T09:59:59.999999999-14:00"), &an); code != 200 ||
			an.To != "9999-12-31T23:59:59.999Z" || len(an.DataPoints) != 1 {
			t.Fatalf("analytics to the end of 9999: %d %+v", code, an)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		if a := ack(t, s.base, r.Messages[1], "dlq", ""); !a.Success || !a.DLQ {
			t.Fatalf("dlq ack: %+v", a)
		}
		var st statusResp
		getJSON(t, s.base+"/api/v1/status", &st)
		if st.Messages.DeadLetter != 1 || st.DeadLetterQueue.TotalMessages != 1 || st.DeadLetterQueue.AffectedPartitions != 1 ||
			len(st.DeadLetterQueue.TopErrors) != 1 || st.DeadLetterQueue.TopErrors[0].Count != 1 || st.Leases.Active != 0 {
			t.Fatalf("dead letters: %+v leases %+v", st.DeadLetterQueue, st.Leases)
		}
		getJSON(t, s.base+"/api/v1/status?namespace=other", &st)
		if st.DeadLetterQueue.TotalMessages != 0 || st.Messages.Total != 0 {
			t.Fatalf("other namespace: %+v", st.DeadLetterQueue)
		}
	})

	t.Run("analytics routes", func(t *testing.T) {
		var sm struct {
			Replicas []struct {
				Hostname   string
				Port       int
				TimeSeries []struct {
					SampleCount int
					Metrics     struct {
						Database struct {
							PoolSize struct{ Last float64 } `json:"pool_size"`
						}
						Memory struct {
							RSS struct{ Last float64 } `json:"rss_bytes"`
						}
					}
				}
			}
			ReplicaCount, PointCount int
		}
		if code := getJSON(t, s.base+"/api/v1/analytics/system-metrics", &sm); code != 200 {
			t.Fatalf("system-metrics: %d", code)
		}
		if sm.ReplicaCount != 1 || len(sm.Replicas) != 1 || sm.PointCount != 1 || len(sm.Replicas[0].TimeSeries) != 1 ||
			sm.Replicas[0].Port == 0 || sm.Replicas[0].TimeSeries[0].Metrics.Database.PoolSize.Last < 1 ||
			sm.Replicas[0].TimeSeries[0].Metrics.Memory.RSS.Last < 1<<20 {
			t.Fatalf("system-metrics: %+v", sm)
		}
		getJSON(t, s.base+"/api/v1/analytics/system-metrics?to="+url.QueryEscape(time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339)), &sm)
		if sm.PointCount != 0 {
			t.Fatalf("a past range has no sample: %+v", sm)
		}
		var ps struct {
			Database      string
			DatabaseCache struct{ Database string }
			TableSizes    []struct {
				Table          string
				TotalSizeBytes int64
			}
			BufferUsage []any
		}
		if code := getJSON(t, s.base+"/api/v1/analytics/postgres-stats", &ps); code != 200 {
			t.Fatalf("postgres-stats: %d", code)
		}
		tables := map[string]int64{}
		for _, ts := range ps.TableSizes {
			tables[ts.Table] = ts.TotalSizeBytes
		}
		if ps.Database == "" || ps.DatabaseCache.Database != ps.Database || tables["segments"] <= 0 || ps.BufferUsage == nil {
			t.Fatalf("postgres-stats: %+v", ps)
		}
		code, b := get(t, s.base+"/api/v1/analytics/retention")
		if code != 200 || !strings.Contains(b, `"series":[]`) || !strings.Contains(b, `"totalMsgs":0`) {
			t.Fatalf("retention: %d %s", code, b)
		}
		// Not recorded here: Queen's envelope with empty series.
		for path, want := range map[string]string{
			"worker-metrics": `"timeSeries":[]`, "queue-ops": `"series":[]`, "queue-parked-replicas": `"replicas":[]`,
		} {
			code, b := get(t, s.base+"/api/v1/analytics/"+path)
			if code != 200 || !strings.Contains(b, want) || !strings.Contains(b, `"pointCount":0`) || !strings.Contains(b, `"timeRange"`) {
				t.Fatalf("%s: %d %s", path, code, b)
			}
		}
		if code, b := get(t, s.base+"/api/v1/analytics/queue-lag"); code != 200 || b != "[]" {
			t.Fatalf("queue-lag: %d %s", code, b)
		}
		if code, _ := get(t, s.base+"/api/v1/analytics/queue-ops?from=bad"); code != 400 {
			t.Fatalf("queue-ops bad from: %d", code)
		}
	})

	t.Run("buffers", func(t *testing.T) {
		type buffers struct {
			Pending, Records, Failed int64
			Items                    *int64
			DBHealthy, Paused        bool
			OldestAgeSeconds         *float64
			OldestAcceptedAt         *string
			Checkpoint, WALIndex     uint64
		}
		var bs buffers
		if code := getJSON(t, s.base+"/api/v1/status/buffers", &bs); code != 200 {
			t.Fatalf("buffers: %d", code)
		}
		if bs.Records != 0 || bs.Items == nil || *bs.Items != 0 || !bs.DBHealthy || bs.OldestAgeSeconds != nil {
			t.Fatalf("idle buffers: %+v", bs)
		}
		setMaintenance(t, s.base, true)
		before := time.Now()
		wantStatuses(t, push(t, s.base, body(item{"st-c", "P", 1, ""}, item{"st-c", "P", 2, ""})), B, B)
		wantStatuses(t, push(t, s.base, body(item{"st-c", "P", 3, ""})), B)
		getJSON(t, s.base+"/api/v1/status/buffers", &bs)
		if bs.Records != 2 || bs.Pending != 2 || bs.Items == nil || *bs.Items != 3 || !bs.Paused ||
			bs.OldestAgeSeconds == nil || *bs.OldestAgeSeconds > time.Since(before).Seconds()+1 || bs.OldestAcceptedAt == nil ||
			bs.WALIndex != bs.Checkpoint+2 {
			t.Fatalf("maintenance buffers: %+v", bs)
		}
		setMaintenance(t, s.base, false)
		testenv.WaitFor(t, 10*time.Second, "drained", func() bool {
			getJSON(t, s.base+"/api/v1/status/buffers", &bs)
			return bs.Records == 0
		})
		if storedCount(t, s, "st-c") != 3 || bs.OldestAgeSeconds != nil {
			t.Fatalf("after drain: %+v", bs)
		}
	})
}

// nsPop pops GET /api/v1/pop with query.
func nsPop(t testing.TB, base, query string) (int, popResp) {
	t.Helper()
	return pop(t, base, "/api/v1/pop", query)
}

// TestNamespacePop: messages of two queues of one namespace are all
// delivered by pops of the namespace, alternating between the queues, in
// per-partition order, under leases that ack; a third namespace's queue is
// never touched; task filters; named groups; a waiting pop is woken by a
// push to any queue of the namespace.
func TestNamespacePop(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configureNS(t, s.base, "nsq-1", "ns1", "t1")
	configureNS(t, s.base, "nsq-2", "ns1", "t2")
	configureNS(t, s.base, "nsq-3", "ns2", "t1")
	pushN(t, s.base, "nsq-1", "P", 1, 4)
	pushN(t, s.base, "nsq-2", "P", 1, 3)
	pushN(t, s.base, "nsq-2", "Q", 1, 1)
	pushN(t, s.base, "nsq-3", "P", 1, 2)
	testenv.WaitFor(t, 10*time.Second, "projected", func() bool {
		return storedCount(t, s, "nsq-1") == 4 && storedCount(t, s, "nsq-2") == 4 && storedCount(t, s, "nsq-3") == 2
	})

	for _, q := range []string{"", "namespace=", "namespace=%01", "task=%00"} {
		if code, _ := nsPop(t, s.base, q); code != 400 {
			t.Fatalf("%q: %d, want 400", q, code)
		}
	}

	// Queue mode, batch 1, ack each: 8 deliveries, alternating queues while
	// both have messages.
	var order []string
	perPartition := map[string][]int64{}
	for i := 0; i < 8; i++ {
		code, r := nsPop(t, s.base, "namespace=ns1")
		if code != 200 || len(r.Messages) != 1 {
			t.Fatalf("pop %d: %d %+v", i, code, r)
		}
		m := r.Messages[0]
		if r.Queue != m.Queue || m.LeaseID == "" || m.ConsumerGroup != "__QUEUE_MODE__" {
			t.Fatalf("pop %d: %+v", i, r)
		}
		order = append(order, m.Queue)
		perPartition[m.Queue+"/"+m.Partition] = append(perPartition[m.Queue+"/"+m.Partition], m.Offset)
		if a := ack(t, s.base, m, "completed", ""); !a.Success || !a.LeaseReleased {
			t.Fatalf("ack %d: %+v", i, a)
		}
	}
	if order[0] == order[1] || order[2] == order[3] {
		t.Fatalf("no rotation between the namespace's queues: %v", order)
	}
	for p, offs := range perPartition {
		if !sort.SliceIsSorted(offs, func(i, j int) bool { return offs[i] < offs[j] }) || offs[0] != 0 {
			t.Fatalf("%s delivered out of order: %v", p, offs)
		}
	}
	if len(perPartition["nsq-1/P"]) != 4 || len(perPartition["nsq-2/P"]) != 3 || len(perPartition["nsq-2/Q"]) != 1 {
		t.Fatalf("deliveries %v", perPartition)
	}
	if code, _ := nsPop(t, s.base, "namespace=ns1"); code != http.StatusNoContent {
		t.Fatalf("namespace drained: %d", code)
	}
	if n := storedCount(t, s, "nsq-3"); n != 2 {
		t.Fatalf("nsq-3 lost messages: %d", n)
	}

	t.Run("task and lease", func(t *testing.T) {
		// task t1 spans ns1 (drained) and ns2: only nsq-3 delivers. A batch
		// pop leases both messages; a second pop finds the partition leased.
		code, r := nsPop(t, s.base, "task=t1&batch=10")
		if code != 200 || r.Queue != "nsq-3" || len(r.Messages) != 2 || r.Messages[0].Offset != 0 || r.Messages[1].Offset != 1 {
			t.Fatalf("task pop: %d %+v", code, r)
		}
		if code, _ := nsPop(t, s.base, "task=t1"); code != http.StatusNoContent {
			t.Fatalf("leased partition delivered again: %d", code)
		}
		for _, m := range r.Messages {
			if a := ack(t, s.base, m, "completed", ""); !a.Success {
				t.Fatalf("ack: %+v", a)
			}
		}
		if code, _ := nsPop(t, s.base, "namespace=ns2&task=t1"); code != http.StatusNoContent {
			t.Fatalf("after acks: %d", code)
		}
	})

	t.Run("consumer group", func(t *testing.T) {
		// A named group reads the namespace from the start with autoAck.
		got := map[string]int{}
		for {
			code, r := nsPop(t, s.base, "namespace=ns1&consumerGroup=g1&autoAck=true&batch=3")
			if code == http.StatusNoContent {
				break
			}
			if code != 200 || r.ConsumerGroup != "g1" || r.LeaseID != "" {
				t.Fatalf("group pop: %d %+v", code, r)
			}
			got[r.Queue] += len(r.Messages)
		}
		if got["nsq-1"] != 4 || got["nsq-2"] != 4 || len(got) != 2 {
			t.Fatalf("group g1 got %v", got)
		}
	})

	t.Run("wait", func(t *testing.T) {
		var wg sync.WaitGroup
		var code int
		var r popResp
		var took time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, r = nsPop(t, s.base, "namespace=ns1&wait=true&timeout=20000")
			took = time.Since(start)
		}()
		time.Sleep(300 * time.Millisecond) // let the pop park
		pushN(t, s.base, "nsq-2", "P", 9, 9)
		wg.Wait()
		if code != 200 || r.Queue != "nsq-2" || len(r.Messages) != 1 || took > 4*time.Second {
			t.Fatalf("woken pop: %d %+v after %v", code, r, took)
		}
		start := time.Now()
		if code, _ := nsPop(t, s.base, "namespace=ns1&wait=true&timeout=500"); code != http.StatusNoContent ||
			time.Since(start) < 400*time.Millisecond {
			t.Fatalf("empty wait: %d after %v", code, time.Since(start))
		}
	})
}

// TestManyNamespaceWaiters: 20 long-polls of one namespace, more than
// watch its wake-ups (the others park): one message wakes one of them
// promptly and no other; six more messages over three queues of the
// namespace reach six more, each once, handed on from claim to claim;
// the rest answer 204 at their timeout.
func TestManyNamespaceWaiters(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	for _, q := range []string{"mw-1", "mw-2", "mw-3"} {
		configureNS(t, s.base, q, "mwns", "")
	}
	type got struct {
		txid string
		code int
	}
	const waiters = 20
	out := make(chan got, waiters)
	for range waiters {
		go func() {
			code, r := nsPop(t, s.base, "namespace=mwns&wait=true&timeout=6000&autoAck=true")
			tx := ""
			if len(r.Messages) == 1 {
				tx = r.Messages[0].TransactionID
			}
			out <- got{tx, code}
		}()
	}
	time.Sleep(700 * time.Millisecond) // all waiting
	start := time.Now()
	pushN(t, s.base, "mw-1", "A", 1, 1)
	if r := <-out; r.code != 200 || r.txid != "m-1" || time.Since(start) > 3*time.Second {
		t.Fatalf("after one push: %+v after %v", r, time.Since(start))
	}
	select {
	case r := <-out:
		t.Fatalf("a second answer to one message: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	var items []item
	for i := 2; i <= 7; i++ {
		items = append(items, item{fmt.Sprintf("mw-%d", 1+i%3), fmt.Sprintf("P%d", i), i, fmt.Sprintf("m-%d", i)})
	}
	start = time.Now()
	push(t, s.base, body(items...))
	seen := map[string]bool{}
	for range 6 {
		select {
		case r := <-out:
			if r.code != 200 || r.txid == "" || seen[r.txid] {
				t.Fatalf("after six pushes: %+v (seen %v)", r, seen)
			}
			seen[r.txid] = true
		case <-time.After(3 * time.Second):
			t.Fatalf("six messages: only %v after %v", seen, time.Since(start))
		}
	}
	for range waiters - 7 {
		if r := <-out; r.code != 204 {
			t.Fatalf("a waiter with nothing to deliver: %+v", r)
		}
	}
}
