package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestMessageDeleteCounts: a deleted message is counted by no route. Ten
// messages in two partitions of queue tc (A: m-1..m-6 at offsets 0..5, B:
// m-7..m-10 at 0..3), consumed as:
//
//	queue mode  A: m-1 m-2 acked, m-3 m-4 leased; B: never popped
//	g           A: m-1..m-3 acked, m-4 m-5 leased; B: m-7 acked
//	h           A: m-1..m-5 acked
//
// then m-2 (below every cursor), m-4 (inside two live leases), m-6 (past
// every cursor; the only message h has left) and m-9 (B, past g's cursor)
// are deleted: 6 messages remain. Every figure below is worked out by hand
// from that table.
func TestMessageDeleteCounts(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configureNS(t, s.base, "tc", "ns1", "tk1")
	pushN(t, s.base, "tc", "A", 1, 6)
	pushN(t, s.base, "tc", "B", 7, 10)
	popN := func(partition, query string, want int) {
		t.Helper()
		code, r := pop(t, s.base, popPath("tc", partition), query)
		if len(r.Messages) != want {
			t.Fatalf("pop %s ?%s: %d with %d messages, want %d", partition, query, code, len(r.Messages), want)
		}
	}
	popN("A", "batch=2&autoAck=true", 2)
	popN("A", "batch=2", 2)
	popN("A", "consumerGroup=g&batch=3&autoAck=true", 3)
	popN("A", "consumerGroup=g&batch=2", 2)
	popN("B", "consumerGroup=g&batch=1&autoAck=true", 1)
	popN("A", "consumerGroup=h&batch=5&autoAck=true", 5)
	pids := map[string]string{}
	for _, m := range readQueue(t, s.store, "tc") {
		pids[m.Partition] = m.PartitionID.String()
	}
	for _, d := range []struct{ partition, txid string }{{"A", "m-2"}, {"A", "m-4"}, {"A", "m-6"}, {"B", "m-9"}} {
		if code, b := del(t, s.base+"/api/v1/messages/"+pids[d.partition]+"/"+d.txid); code != 200 ||
			!strings.Contains(b, `"success":true`) {
			t.Fatalf("delete %s/%s: %d %s", d.partition, d.txid, code, b)
		}
	}
	const qm = "__QUEUE_MODE__"
	type counts struct{ Total, Pending, Processing, Completed int64 }
	want := counts{Total: 6, Pending: 5, Processing: 1, Completed: 1} // queue mode, whole queue

	t.Run("messages", func(t *testing.T) {
		if n := len(listMessages(t, s.base, "queue=tc").Messages); n != 6 {
			t.Errorf("GET /api/v1/messages lists %d, want 6", n)
		}
	})
	t.Run("queues", func(t *testing.T) {
		var r struct {
			Queues []struct {
				Name     string
				Messages counts
			}
		}
		getJSON(t, s.base+"/api/v1/resources/queues", &r)
		if len(r.Queues) != 1 || r.Queues[0].Messages != (counts{6, 5, 1, 0}) {
			t.Errorf("queues: %+v", r)
		}
	})
	t.Run("queue detail", func(t *testing.T) {
		var r struct {
			Partitions []struct {
				Name  string
				Depth int64
				Lag   map[string]int64
				Stats counts
			}
			Totals counts
		}
		getJSON(t, s.base+"/api/v1/resources/queues/tc", &r)
		got := map[string]string{}
		for _, p := range r.Partitions {
			got[p.Name] = fmt.Sprintf("depth %d lag %v stats %+v", p.Depth, p.Lag, p.Stats)
		}
		wantParts := map[string]string{
			"A":       fmt.Sprintf("depth 3 lag %v stats %+v", map[string]int64{qm: 2, "g": 1, "h": 0}, counts{3, 2, 1, 1}),
			"B":       fmt.Sprintf("depth 3 lag %v stats %+v", map[string]int64{"g": 2}, counts{3, 3, 0, 0}),
			"Default": fmt.Sprintf("depth 0 lag %v stats %+v", map[string]int64{}, counts{}),
		}
		if fmt.Sprint(got) != fmt.Sprint(wantParts) || r.Totals != (counts{6, 5, 1, 0}) {
			t.Errorf("queue detail: %v totals %+v\nwant %v totals %+v", got, r.Totals, wantParts, counts{6, 5, 1, 0})
		}
	})
	t.Run("depth", func(t *testing.T) {
		for _, c := range []struct {
			query, want string
		}{
			// Queue mode: A m-3 m-5 pending, m-3 under the lease; B all three left.
			{"?group=" + qm, "pending 5 processing 1 [A:2/1 B:3/0 Default:0/0]"},
			// g: A m-5 (leased); B m-8 m-10.
			{"?group=g", "pending 3 processing 1 [A:1/1 B:2/0 Default:0/0]"},
			// h: A nothing left; B never popped: m-7 m-8 m-10.
			{"?group=h", "pending 3 processing 0 [A:0/0 B:3/0 Default:0/0]"},
			// Worst group per partition: queue mode on A, queue mode or h on B.
			{"", "pending 5 processing 1 [A:2/1 B:3/0 Default:0/0]"},
		} {
			var d depthResp
			if code := getJSON(t, s.base+"/api/v1/resources/queues/tc/depth"+c.query, &d); code != 200 {
				t.Fatalf("depth%s: %d", c.query, code)
			}
			var parts []string
			for _, p := range d.Partitions {
				parts = append(parts, fmt.Sprintf("%s:%d/%d", p.Partition, p.Pending, p.Processing))
			}
			if got := fmt.Sprintf("pending %d processing %d %v", d.Pending, d.Processing, parts); got != c.want ||
				d.Ready != d.Pending-d.Processing {
				t.Errorf("depth%s: %s ready %d, want %s", c.query, got, d.Ready, c.want)
			}
		}
	})
	t.Run("overview", func(t *testing.T) {
		var o struct{ Messages counts }
		getJSON(t, s.base+"/api/v1/resources/overview", &o)
		if o.Messages != want {
			t.Errorf("overview messages %+v, want %+v", o.Messages, want)
		}
	})
	t.Run("namespaces and tasks", func(t *testing.T) {
		var ns struct{ Namespaces []labelRow }
		var ts struct{ Tasks []labelRow }
		getJSON(t, s.base+"/api/v1/resources/namespaces", &ns)
		getJSON(t, s.base+"/api/v1/resources/tasks", &ts)
		wantM := msgCounts{Total: 6, Pending: 5, Processing: 1}
		if len(ns.Namespaces) != 1 || ns.Namespaces[0].Messages != wantM {
			t.Errorf("namespaces: %+v", ns)
		}
		if len(ts.Tasks) != 1 || ts.Tasks[0].Messages != wantM {
			t.Errorf("tasks: %+v", ts)
		}
	})
	t.Run("partitions", func(t *testing.T) {
		var r struct {
			Partitions []struct {
				Name     string
				Messages counts
			}
		}
		getJSON(t, s.base+"/api/v1/resources/partitions?queue=tc", &r)
		got := map[string]counts{}
		for _, p := range r.Partitions {
			got[p.Name] = p.Messages
		}
		if fmt.Sprint(got) != fmt.Sprint(map[string]counts{"A": {3, 2, 1, 0}, "B": {3, 3, 0, 0}, "Default": {}}) {
			t.Errorf("partitions: %+v", got)
		}
	})
	t.Run("consumer groups", func(t *testing.T) {
		var gs []struct {
			Name              string
			PartitionsWithLag int64
			TotalLag          int64
		}
		getJSON(t, s.base+"/api/v1/consumer-groups", &gs)
		var got []string
		for _, g := range gs {
			got = append(got, fmt.Sprintf("%s:%d/%d", g.Name, g.TotalLag, g.PartitionsWithLag))
		}
		sort.Strings(got)
		if fmt.Sprint(got) != "[__QUEUE_MODE__:2/1 g:3/2 h:0/0]" {
			t.Errorf("consumer groups (lag/partitions with lag): %v", got)
		}
		for group, wantLag := range map[string]string{"g": "[A:1 B:2]", "h": "[A:0]", qm: "[A:2]"} {
			var r map[string]struct {
				Partitions []struct {
					Partition string
					OffsetLag int64
				}
			}
			getJSON(t, s.base+"/api/v1/consumer-groups/"+group, &r)
			var lags []string
			for _, p := range r["tc"].Partitions {
				lags = append(lags, fmt.Sprintf("%s:%d", p.Partition, p.OffsetLag))
			}
			if fmt.Sprint(lags) != wantLag {
				t.Errorf("consumer group %s offset lags %v, want %s", group, lags, wantLag)
			}
		}
		var lagging []struct {
			ConsumerGroup string `json:"consumer_group"`
			PartitionName string `json:"partition_name"`
			OffsetLag     int64  `json:"offset_lag"`
		}
		getJSON(t, s.base+"/api/v1/consumer-groups/lagging?minLagSeconds=0", &lagging)
		var rows []string
		for _, l := range lagging {
			rows = append(rows, fmt.Sprintf("%s/%s:%d", l.ConsumerGroup, l.PartitionName, l.OffsetLag))
		}
		sort.Strings(rows)
		if fmt.Sprint(rows) != "[__QUEUE_MODE__/A:2 g/A:1 g/B:2]" {
			t.Errorf("lagging: %v (h, whose only message left was deleted, must not lag)", rows)
		}
	})
	t.Run("status", func(t *testing.T) {
		var st struct {
			Throughput []struct{ Ingested int64 }
			Messages   counts
			Leases     struct{ Active, TotalBatchSize int64 }
		}
		getJSON(t, s.base+"/api/v1/status", &st)
		var ingested int64
		for _, b := range st.Throughput {
			ingested += b.Ingested
		}
		// Live leases: queue mode's and g's on A, each two offsets, one deleted.
		if st.Messages != want || ingested != 6 || st.Leases.Active != 2 || st.Leases.TotalBatchSize != 2 {
			t.Errorf("status: messages %+v ingested %d leases %+v", st.Messages, ingested, st.Leases)
		}
		var qs struct {
			Queues []struct {
				Name     string
				Messages counts
			}
		}
		getJSON(t, s.base+"/api/v1/status/queues", &qs)
		if len(qs.Queues) != 1 || qs.Queues[0].Messages != want {
			t.Errorf("status queues: %+v", qs)
		}
		var d struct {
			Partitions []struct {
				Name     string
				Messages counts
			}
			Totals counts
		}
		getJSON(t, s.base+"/api/v1/status/queues/tc", &d)
		got := map[string]counts{}
		for _, p := range d.Partitions {
			got[p.Name] = p.Messages
		}
		if fmt.Sprint(got) != fmt.Sprint(map[string]counts{"A": {3, 2, 1, 1}, "B": {3, 3, 0, 0}, "Default": {}}) ||
			d.Totals != want {
			t.Errorf("status queue: %v totals %+v", got, d.Totals)
		}
		var an struct{ DataPoints []struct{ Messages int64 } }
		from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		if code := getJSON(t, s.base+"/api/v1/status/analytics?interval=minute&from="+from, &an); code != http.StatusOK {
			t.Fatalf("analytics: %d", code)
		}
		var stored int64
		for _, p := range an.DataPoints {
			stored += p.Messages
		}
		if stored != 6 {
			t.Errorf("analytics counts %d stored messages, want 6", stored)
		}
	})
}
