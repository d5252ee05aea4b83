package pg_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/queenmq/queen-go/pg"
)

// TestCountsAfterRetention: messages retention deleted are counted by no
// route, whether a group's cursor is below them or the group has none.
// Queue ret (retention on) holds, before the retention pass:
//
//	P: offsets 0-1 (old segment), 2-4 (new segment)
//	Q: offsets 0-1 (old segment)
//
// queue mode leases P's offset 0 (cursor 0); group g has read P's offset 0
// (cursor 1) and leases Q's offset 0 (cursor 0). The pass deletes the two
// old segments: P keeps 2-4, Q nothing, and both live leases cover only
// deleted offsets. Every figure below is worked out by hand from that.
func TestCountsAfterRetention(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	opts := pg.DefaultQueueOptions()
	opts.RetentionEnabled, opts.RetentionSeconds = true, 3600
	if _, err := st.Configure(ctx, "ret", "", "", "Default", opts); err != nil {
		t.Fatal(err)
	}
	store(t, ctx, st, "ret", "P", 2)
	store(t, ctx, st, "ret", "Q", 2)
	// The segments stored so far are two hours old: past the retention.
	if _, err := st.Pool().Exec(ctx, `UPDATE queen.segments SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	store(t, ctx, st, "ret", "P", 3)
	pop := func(partition, group string, autoAck bool) int {
		t.Helper()
		res, err := st.Pop(ctx, pg.PopRequest{Queue: "ret", Partition: partition, Group: group, Batch: 1, AutoAck: autoAck})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Messages)
	}
	if pop("P", pg.QueueModeGroup, false) != 1 || pop("P", "g", true) != 1 || pop("Q", "g", false) != 1 {
		t.Fatal("pops before the retention pass delivered nothing")
	}
	if n, err := st.RetentionPass(ctx, 1000); err != nil || n != 2 {
		t.Fatalf("RetentionPass = %d, %v; want the two old segments", n, err)
	}
	// A group that arrives after the pass finds nothing (204).
	if n := pop("Q", "fresh", false); n != 0 {
		t.Fatalf("pop of fresh delivered %d deleted messages", n)
	}
	const qm = pg.QueueModeGroup

	qs, err := st.ListQueues(ctx)
	if err != nil || len(qs) != 1 {
		t.Fatalf("ListQueues = %+v, %v", qs, err)
	}
	if q := qs[0]; q.Partitions != 3 || q.Total != 3 || q.Pending != 3 || q.Processing != 0 {
		t.Errorf("ListQueues: partitions %d total %d pending %d processing %d, want 3 3 3 0",
			q.Partitions, q.Total, q.Pending, q.Processing)
	}

	d, err := st.GetQueue(ctx, "ret")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range d.Partitions {
		got[p.Name] = fmt.Sprintf("depth %d pending %d processing %d completed %d lag %v",
			p.Depth, p.Pending, p.Processing, p.Completed(), p.Lag)
	}
	want := map[string]string{
		"Default": "depth 0 pending 0 processing 0 completed 0 lag map[]",
		"P":       fmt.Sprintf("depth 3 pending 3 processing 0 completed 0 lag %v", map[string]int64{qm: 3, "g": 3}),
		"Q":       fmt.Sprintf("depth 0 pending 0 processing 0 completed 0 lag %v", map[string]int64{"g": 0, "fresh": 0}),
	}
	if d.Total != 3 || d.Pending != 3 || d.Processing != 0 {
		t.Errorf("GetQueue totals: total %d pending %d processing %d, want 3 3 0", d.Total, d.Pending, d.Processing)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		// fresh's pop may or may not have left a cursor; with one, its lag is 0.
		delete(want, "Q")
		q := got["Q"]
		delete(got, "Q")
		if fmt.Sprint(got) != fmt.Sprint(want) || (q != "depth 0 pending 0 processing 0 completed 0 lag map[g:0]" &&
			q != "depth 0 pending 0 processing 0 completed 0 lag map[fresh:0 g:0]") {
			t.Errorf("GetQueue partitions: %v Q: %s\nwant %v", got, q, want)
		}
	}

	gs, err := st.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	for _, g := range gs {
		groups = append(groups, fmt.Sprintf("%s: lag %d in %d, members %d", g.Name, g.TotalLag, g.PartitionsWithLag, g.Members))
	}
	sort.Strings(groups)
	wantGroups := "[__QUEUE_MODE__: lag 3 in 1, members 1 g: lag 3 in 1, members 1]"
	if fmt.Sprint(groups) != wantGroups && fmt.Sprint(groups) != "[__QUEUE_MODE__: lag 3 in 1, members 1 fresh: lag 0 in 0, members 0 g: lag 3 in 1, members 1]" {
		t.Errorf("ListGroups: %v\nwant %s", groups, wantGroups)
	}

	gp, err := st.GetGroup(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	var lags []string
	for _, p := range gp {
		lags = append(lags, fmt.Sprintf("%s:%d", p.Partition, p.OffsetLag))
	}
	if fmt.Sprint(lags) != "[P:3 Q:0]" {
		t.Errorf("GetGroup(g) offset lags %v, want [P:3 Q:0]", lags)
	}

	lagging, err := st.LaggingPartitions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range lagging {
		rows = append(rows, fmt.Sprintf("%s/%s:%d", l.Group, l.Partition, l.OffsetLag))
	}
	sort.Strings(rows)
	if fmt.Sprint(rows) != "[__QUEUE_MODE__/P:3 g/P:3]" {
		t.Errorf("LaggingPartitions: %v, want [__QUEUE_MODE__/P:3 g/P:3]", rows)
	}

	o, err := st.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Messages != (pg.MessageCounts{Total: 3, Pending: 3, Processing: 0}) {
		t.Errorf("Overview messages %+v, want total 3 pending 3 processing 0", o.Messages)
	}
	qd, err := st.QueueDepth(ctx, "ret", qm)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(qd.Partitions) != "[{Default 0 0} {P 3 0} {Q 0 0}]" {
		t.Errorf("QueueDepth(queue mode) %v, want [{Default 0 0} {P 3 0} {Q 0 0}]", qd.Partitions)
	}
	l, err := pg.NewStatus(st).Leases(ctx)
	if err != nil || l.Active != 2 || l.BatchSize != 0 {
		t.Errorf("Leases = %+v, %v; want 2 active covering no stored message", l, err)
	}
}
