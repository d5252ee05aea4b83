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

	qs, total, err := st.ListQueues(ctx, pg.QueueFilter{Limit: 100})
	if err != nil || len(qs) != 1 || total != 1 {
		t.Fatalf("ListQueues = %+v, %v", qs, err)
	}
	if q := qs[0]; q.Partitions != 3 || q.Total != 3 || q.Pending != 3 || q.Processing != 0 {
		t.Errorf("ListQueues: partitions %d total %d pending %d processing %d, want 3 3 3 0",
			q.Partitions, q.Total, q.Pending, q.Processing)
	}

	d, err := st.GetQueue(ctx, "ret", 10)
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

	gs, err := st.ListGroups(ctx, pg.GroupFilter{Limit: 100})
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

	lagging, err := st.LaggingPartitions(ctx, pg.LaggingFilter{Limit: 100})
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

// TestLaggingPartitionsPages: LaggingPartitions answers one page of the
// lagging cursors, largest time lag first and, among cursors that last
// moved at the same moment, by group, queue and partition name; pages of
// any size taken one after another are disjoint and together are the
// whole list, in its order, whichever cursors the page query must skip
// because their messages past the cursor are all deleted. Queue lq holds
// partitions p1-p4 with offsets 0-9 in one segment each; cursors at
// offset 5 (lag 5):
//
//	g00-g49 on p1-p3, last moved g minutes ago (three ties a group)
//	deleted on p4, moved 25.5 minutes ago, offsets 5-9 deleted (lag 0)
//	caught  on p1-p3 at offset 10, moved an hour ago (lag 0)
//	recent  on p1, moved now
func TestLaggingPartitionsPages(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('lq')`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset)
			SELECT q.id, 'p' || i, 10 FROM queen.queues q, generate_series(1, 4) i`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body) SELECT id, 0, 9, '\x00' FROM queen.partitions`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT p.id, 'g' || lpad(g::text, 2, '0'), 5, now() - g * interval '1 minute'
			FROM queen.partitions p, generate_series(0, 49) g WHERE p.name <> 'p4'`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT id, 'deleted', 5, now() - interval '25.5 minutes' FROM queen.partitions WHERE name = 'p4'`,
		`INSERT INTO queen.tombstones (partition_id, msg_offset, transaction_id)
			SELECT p.id, o, '\x00' FROM queen.partitions p, generate_series(5, 9) o WHERE p.name = 'p4'`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT id, 'caught', 10, now() - interval '1 hour' FROM queen.partitions WHERE name <> 'p4'`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT id, 'recent', 5, now() FROM queen.partitions WHERE name = 'p1'`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// want lists the g cursors of groups g49 down to g<from>, partitions
	// in name order.
	want := func(from int) []string {
		var w []string
		for g := 49; g >= from; g-- {
			for _, p := range []string{"p1", "p2", "p3"} {
				w = append(w, fmt.Sprintf("g%02d/lq/%s", g, p))
			}
		}
		return w
	}
	list := func(f pg.LaggingFilter) []string {
		t.Helper()
		ls, err := st.LaggingPartitions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) > f.Limit {
			t.Fatalf("%+v: %d rows, over the limit", f, len(ls))
		}
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.Group + "/" + l.Queue + "/" + l.Partition
			g := 0
			if _, err := fmt.Sscanf(l.Group, "g%d", &g); err != nil && l.Group != "recent" {
				t.Fatalf("%+v: row %s listed", f, out[i])
			}
			if l.OffsetLag != 5 || l.TimeLagSeconds < int64(g*60) || l.TimeLagSeconds > int64(g*60+60) ||
				l.OldestUnconsumed == nil || l.LeaseID != nil {
				t.Errorf("%s: lag %d, time lag %d s, oldest %v, lease %v; want 5, %d s, a time, none",
					out[i], l.OffsetLag, l.TimeLagSeconds, l.OldestUnconsumed, l.LeaseID, g*60)
			}
		}
		return out
	}
	whole := list(pg.LaggingFilter{MinLagSeconds: 60, Limit: 1000})
	if fmt.Sprint(whole) != fmt.Sprint(want(1)) {
		t.Fatalf("one page of 1000:\n got %v\nwant %v", whole, want(1))
	}
	if got := list(pg.LaggingFilter{MinLagSeconds: 0, Limit: 1000}); len(got) != 151 || got[150] != "recent/lq/p1" {
		t.Errorf("minimum 0: %d rows ending %v, want the 150 g cursors and recent's", len(got), got[len(got)-1:])
	}
	// 10.5 minutes: g11 and older.
	if got := list(pg.LaggingFilter{MinLagSeconds: 630, Limit: 1000}); fmt.Sprint(got) != fmt.Sprint(want(11)) {
		t.Errorf("minimum 630 s:\n got %v\nwant %v", got, want(11))
	}
	for _, limit := range []int{1, 7, 100, 147} {
		var pages []string
		for offset := 0; ; offset += limit {
			page := list(pg.LaggingFilter{MinLagSeconds: 60, Limit: limit, Offset: offset})
			if offset == 0 && len(page) != limit {
				t.Fatalf("limit %d: first page of %d", limit, len(page))
			}
			pages = append(pages, page...)
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(pages) != fmt.Sprint(whole) {
			t.Errorf("pages of %d, one after another:\n got %v\nwant %v", limit, pages, whole)
		}
	}
	if got := list(pg.LaggingFilter{MinLagSeconds: 60, Limit: 10, Offset: 1 << 30}); len(got) != 0 {
		t.Errorf("offset past the end: %v", got)
	}
}

// TestListGroupsPages: ListGroups answers one page of the (group, queue)
// entries, by group name then queue name; pages of any size taken one
// after another are disjoint and together are the whole list, in its
// order, with each entry's lag summed over its own cursors only; the
// queue filter keeps that queue's entries. Queues la and lb hold
// partitions p1-p3 with offsets 0-9 in one segment each:
//
//	g00-g39 on la p1-p3 at offset 5 (lag 15 in 3 partitions), g00 with
//	        subscription metadata (mode new) on la
//	g00-g39 on lb p1 at offset 10 (caught up: lag 0)
//	g40     on lb p2 at offset 0, a live lease (lag 10, one member)
func TestListGroupsPages(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('la'), ('lb')`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset)
			SELECT q.id, 'p' || i, 10 FROM queen.queues q, generate_series(1, 3) i`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body) SELECT id, 0, 9, '\x00' FROM queen.partitions`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT p.id, 'g' || lpad(g::text, 2, '0'), 5, now() - interval '1 minute'
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id, generate_series(0, 39) g WHERE q.name = 'la'`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, last_consumed_at)
			SELECT p.id, 'g' || lpad(g::text, 2, '0'), 10, now()
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id, generate_series(0, 39) g
			WHERE q.name = 'lb' AND p.name = 'p1'`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, lease_id, lease_expires_at)
			SELECT p.id, 'g40', 0, gen_random_uuid(), now() + interval '1 hour'
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'lb' AND p.name = 'p2'`,
		`INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_mode, subscription_from)
			SELECT id, 'g00', 'new', now() FROM queen.queues WHERE name = 'la'`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var want []string
	for g := 0; g < 40; g++ {
		want = append(want, fmt.Sprintf("g%02d/la", g), fmt.Sprintf("g%02d/lb", g))
	}
	want = append(want, "g40/lb")
	list := func(f pg.GroupFilter) []string {
		t.Helper()
		gs, err := st.ListGroups(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) > f.Limit {
			t.Fatalf("%+v: %d entries, over the limit", f, len(gs))
		}
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = g.Name + "/" + g.Queue
			got := fmt.Sprintf("lag %d in %d, members %d, mode %q", g.TotalLag, g.PartitionsWithLag, g.Members, g.SubscriptionMode)
			want := "lag 0 in 0, members 0, mode \"\""
			switch {
			case out[i] == "g00/la":
				want = "lag 15 in 3, members 0, mode \"new\""
			case g.Queue == "la":
				want = "lag 15 in 3, members 0, mode \"\""
			case out[i] == "g40/lb":
				want = "lag 10 in 1, members 1, mode \"\""
			}
			if got != want {
				t.Errorf("%s: %s, want %s", out[i], got, want)
			}
		}
		return out
	}
	whole := list(pg.GroupFilter{Limit: 1000})
	if fmt.Sprint(whole) != fmt.Sprint(want) {
		t.Fatalf("one page of 1000:\n got %v\nwant %v", whole, want)
	}
	for _, limit := range []int{1, 7, 40, 81} {
		var pages []string
		seen := map[string]bool{}
		for offset := 0; ; offset += limit {
			page := list(pg.GroupFilter{Limit: limit, Offset: offset})
			if offset == 0 && len(page) != limit {
				t.Fatalf("limit %d: first page of %d", limit, len(page))
			}
			for _, k := range page {
				if seen[k] {
					t.Fatalf("limit %d: %s on two pages", limit, k)
				}
				seen[k] = true
			}
			pages = append(pages, page...)
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(pages) != fmt.Sprint(whole) {
			t.Errorf("pages of %d, one after another:\n got %v\nwant %v", limit, pages, whole)
		}
	}
	if got := list(pg.GroupFilter{Queue: "lb", Limit: 5, Offset: 38}); fmt.Sprint(got) != "[g38/lb g39/lb g40/lb]" {
		t.Errorf("queue lb from 38: %v", got)
	}
	if got := list(pg.GroupFilter{Queue: "nope", Limit: 5}); len(got) != 0 {
		t.Errorf("unknown queue: %v", got)
	}
	if got := list(pg.GroupFilter{Limit: 10, Offset: 1 << 30}); len(got) != 0 {
		t.Errorf("offset past the end: %v", got)
	}
}

// TestListQueuesPages: ListQueues answers one page of the queues, by
// name, with the number of queues in all; pages of any size taken one
// after another are disjoint and together are every queue, each with its
// own counts. Queues q00-q24, q<i> with i+1 partitions of 10 messages
// each, cursor (queue mode) at 4 on each.
func TestListQueuesPages(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) SELECT 'q' || lpad(i::text, 2, '0') FROM generate_series(0, 24) i`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset)
			SELECT q.id, 'p' || j, 10 FROM queen.queues q, generate_series(0, 24) j WHERE j <= substr(q.name, 2)::int`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body) SELECT id, 0, 9, '\x00' FROM queen.partitions`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset) SELECT id, '` + pg.QueueModeGroup + `', 4 FROM queen.partitions`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	list := func(f pg.QueueFilter) []string {
		t.Helper()
		qs, total, err := st.ListQueues(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if total != 25 || len(qs) > f.Limit {
			t.Fatalf("%+v: %d queues of %d, want at most the limit of 25", f, len(qs), total)
		}
		out := make([]string, len(qs))
		for i, q := range qs {
			out[i] = q.Name
			var n int
			fmt.Sscanf(q.Name, "q%d", &n)
			if q.Partitions != n+1 || q.Total != int64(10*(n+1)) || q.Pending != int64(6*(n+1)) {
				t.Errorf("%s: %d partitions, total %d, pending %d; want %d, %d, %d", q.Name, q.Partitions, q.Total, q.Pending,
					n+1, 10*(n+1), 6*(n+1))
			}
		}
		return out
	}
	whole := list(pg.QueueFilter{Limit: 1000})
	var want []string
	for i := range 25 {
		want = append(want, fmt.Sprintf("q%02d", i))
	}
	if fmt.Sprint(whole) != fmt.Sprint(want) {
		t.Fatalf("one page of 1000:\n got %v\nwant %v", whole, want)
	}
	for _, limit := range []int{1, 7, 25} {
		var pages []string
		for offset := 0; ; offset += limit {
			page := list(pg.QueueFilter{Limit: limit, Offset: offset})
			if offset == 0 && len(page) != limit {
				t.Fatalf("limit %d: first page of %d", limit, len(page))
			}
			pages = append(pages, page...)
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(pages) != fmt.Sprint(whole) {
			t.Errorf("pages of %d, one after another:\n got %v\nwant %v", limit, pages, whole)
		}
	}
	if got := list(pg.QueueFilter{Limit: 10, Offset: 1 << 30}); len(got) != 0 {
		t.Errorf("offset past the end: %v", got)
	}
}
