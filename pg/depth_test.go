package pg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/pg"
)

// worstByGroup is the worst depth as WorstQueueDepth computed it before
// it became one statement: QueueDepth for every group consuming the queue
// (a cursor on one of its partitions or subscription metadata), in name
// order, keeping per partition the first group with the largest pending;
// queue mode's depth when nobody consumes the queue.
func worstByGroup(t *testing.T, ctx context.Context, st *pg.Store, queue string) []pg.PartitionDepth {
	t.Helper()
	rows, err := st.Pool().Query(ctx, `SELECT c.consumer_group FROM queen.consumer_cursors c
		JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1
		UNION SELECT g.consumer_group FROM queen.consumer_groups g JOIN queen.queues q ON q.id = g.queue_id WHERE q.name = $1
		ORDER BY 1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) == 0 {
		groups = []string{pg.QueueModeGroup}
	}
	var worst []pg.PartitionDepth
	for _, g := range groups {
		d, err := st.QueueDepth(ctx, queue, g)
		if err != nil {
			t.Fatal(err)
		}
		if worst == nil {
			worst = d.Partitions
			continue
		}
		for i, p := range d.Partitions {
			if p.Pending > worst[i].Pending {
				worst[i] = p
			}
		}
	}
	return worst
}

// TestWorstQueueDepthMatchesPerGroup: WorstQueueDepth, one statement,
// answers what QueueDepth for every group gave (worstByGroup) on
// hand-made queues. Partitions p1-p3 hold offsets 0-9 in two segments
// (0-4 committed two hours ago, 5-9 one hour ago) unless a case says
// otherwise:
//
//	cursors   a at 5/2/9, b at 3 (tie with c, first by name)/7 leased to 8,
//	          c at 3 leased to 4 on p1 only: c (no metadata) starts p2 and
//	          p3 at 0, as b does p3; a tombstone at 8 on p1
//	retention p1 and p2 start at 5 (0-4 deleted): w at 3 and x at 0 leased
//	          to 6 tie at 5 on p1 (w first by name, processing 0); on p2 x
//	          ties with w, which has no cursor there and starts at 0
//	subs      n subscribed (new) 90 minutes ago starts p1 and p2 at 5, t
//	          (timestamp, in an hour) at 10; z at 7 on p1, n at 9 on p2
//	queuemode a queue-mode cursor at 4 leased to 6 on p1 only
//	nobody    no group: queue mode's depth, everything stored
//	caughtup  every group at 10, one leased past the end
func TestWorstQueueDepthMatchesPerGroup(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	queues := []string{"cursors", "retention", "subs", "queuemode", "nobody", "caughtup"}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range queues {
		exec(`INSERT INTO queen.queues (name) VALUES ($1)`, q)
		exec(`INSERT INTO queen.partitions (queue_id, name, next_offset)
			SELECT id, 'p' || i, 10 FROM queen.queues, generate_series(1, 3) i WHERE name = $1`, q)
		exec(`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body, created_at)
			SELECT p.id, s.base, s.base + 4, '\x00', now() - s.age FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id,
			(VALUES (0, interval '2 hours'), (5, interval '1 hour')) s(base, age) WHERE q.name = $1`, q)
	}
	cursor := func(queue, part, group string, offset int, leaseEnd int) {
		t.Helper()
		exec(`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, lease_id, lease_expires_at, lease_end)
			SELECT p.id, $3, $4, CASE WHEN $5::bigint >= 0 THEN gen_random_uuid() END,
				CASE WHEN $5::bigint >= 0 THEN now() + interval '1 hour' END, CASE WHEN $5::bigint >= 0 THEN $5::bigint END
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2`,
			queue, part, group, offset, leaseEnd)
	}
	subscribe := func(queue, group, mode, from string) {
		t.Helper()
		exec(`INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_mode, subscription_from)
			SELECT id, $2, $3, now() + $4::interval FROM queen.queues WHERE name = $1`, queue, group, mode, from)
	}
	cursor("cursors", "p1", "a", 5, -1)
	cursor("cursors", "p1", "b", 3, -1)
	cursor("cursors", "p1", "c", 3, 4)
	cursor("cursors", "p2", "a", 2, -1)
	cursor("cursors", "p2", "b", 7, 8)
	cursor("cursors", "p3", "a", 9, -1)
	exec(`INSERT INTO queen.tombstones (partition_id, msg_offset, transaction_id)
		SELECT p.id, 8, '\x00' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'cursors' AND p.name = 'p1'`)
	exec(`DELETE FROM queen.segments sg USING queen.partitions p, queen.queues q
		WHERE sg.partition_id = p.id AND p.queue_id = q.id AND q.name = 'retention' AND p.name IN ('p1', 'p2') AND sg.base_offset = 0`)
	cursor("retention", "p1", "w", 3, -1)
	cursor("retention", "p1", "x", 0, 6)
	cursor("retention", "p2", "x", 0, 6)
	subscribe("subs", "n", pg.SubscribeNew, "-90 minutes")
	subscribe("subs", "t", pg.SubscribeTimestamp, "1 hour")
	cursor("subs", "p1", "z", 7, -1)
	cursor("subs", "p2", "n", 9, -1)
	cursor("queuemode", "p1", pg.QueueModeGroup, 4, 6)
	for _, p := range []string{"p1", "p2", "p3"} {
		cursor("caughtup", p, "g1", 10, -1)
		cursor("caughtup", p, "g2", 10, 12)
	}
	want := map[string]string{
		"cursors":   "[{p1 6 0} {p2 10 0} {p3 10 0}]",
		"retention": "[{p1 5 0} {p2 5 0} {p3 10 0}]",
		"subs":      "[{p1 5 0} {p2 10 0} {p3 10 0}]",
		"queuemode": "[{p1 6 3} {p2 10 0} {p3 10 0}]",
		"nobody":    "[{p1 10 0} {p2 10 0} {p3 10 0}]",
		"caughtup":  "[{p1 0 0} {p2 0 0} {p3 0 0}]",
	}
	for _, q := range queues {
		t.Run(q, func(t *testing.T) {
			d, err := st.WorstQueueDepth(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got, ref := fmt.Sprint(d.Partitions), fmt.Sprint(worstByGroup(t, ctx, st, q))
			if got != ref {
				t.Errorf("WorstQueueDepth %s, per group %s", got, ref)
			}
			if got != want[q] {
				t.Errorf("WorstQueueDepth %s, want %s", got, want[q])
			}
			if d.Group != "" || d.Queue != q {
				t.Errorf("queue %q group %q, want %q and \"\"", d.Queue, d.Group, q)
			}
		})
	}
	if _, err := st.WorstQueueDepth(ctx, "missing"); err != pg.ErrQueueNotFound {
		t.Errorf("unknown queue: %v, want ErrQueueNotFound", err)
	}
}

// TestWorstQueueDepthOneStatement: the worst depth of a queue read by
// 1,500 groups, one statement, equals what QueueDepth once per group (what
// it used to do) finds. The times of both are logged, not asserted (speed
// is measured by the bench and docs/decisions.md, not by tests: 3,000
// groups on 20 partitions took 1.5-2.8 s the old way).
func TestWorstQueueDepthOneStatement(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('many')`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset) SELECT id, 'p' || i, 100 FROM queen.queues, generate_series(1, 2) i`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body) SELECT id, 0, 99, '\x00' FROM queen.partitions`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset)
			SELECT p.id, 'g' || lpad(g::text, 4, '0'), 10 + g % 80 FROM queen.partitions p, generate_series(1, 1500) g`,
		`ANALYZE`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	best := time.Duration(1 << 62)
	var got string
	for range 3 {
		start := time.Now()
		d, err := st.WorstQueueDepth(ctx, "many")
		if err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
		got = fmt.Sprint(d.Partitions)
	}
	start := time.Now()
	ref := fmt.Sprint(worstByGroup(t, ctx, st, "many"))
	loop := time.Since(start)
	if got != ref || got != "[{p1 90 0} {p2 90 0}]" {
		t.Errorf("WorstQueueDepth %s, per group %s, want [{p1 90 0} {p2 90 0}]", got, ref)
	}
	t.Logf("WorstQueueDepth %v (best of 3), QueueDepth per group %v", best, loop)
}

// TestGetQueueLagCapped: GetQueue's per-partition lag map lists the first
// lagGroups groups by name with a cursor there and says when it left some
// out; it used to list every group (3,000 groups on 20 partitions: 1.0 MB).
func TestGetQueueLagCapped(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('lags')`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset) SELECT id, 'p' || i, 20 FROM queen.queues, generate_series(1, 2) i`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body) SELECT id, 0, 19, '\x00' FROM queen.partitions`,
		// p1: g00-g11 at offsets 0-11 (lag 20-0 .. 20-11); p2: g00-g02.
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset)
			SELECT p.id, 'g' || lpad(g::text, 2, '0'), g FROM queen.partitions p, generate_series(0, 11) g
			WHERE p.name = 'p1' OR g < 3`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	lags := func(n int) string {
		t.Helper()
		d, err := st.GetQueue(ctx, "lags", n)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range d.Partitions {
			out = append(out, fmt.Sprintf("%s %v %v", p.Name, p.Lag, p.LagTruncated))
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "[p1 map[] true p2 map[] true]"},
		{2, "[p1 map[g00:20 g01:19] true p2 map[g00:20 g01:19] true]"},
		{3, "[p1 map[g00:20 g01:19 g02:18] true p2 map[g00:20 g01:19 g02:18] false]"},
		{10, "[p1 map[g00:20 g01:19 g02:18 g03:17 g04:16 g05:15 g06:14 g07:13 g08:12 g09:11] true p2 map[g00:20 g01:19 g02:18] false]"},
		{12, "[p1 map[g00:20 g01:19 g02:18 g03:17 g04:16 g05:15 g06:14 g07:13 g08:12 g09:11 g10:10 g11:9] false p2 map[g00:20 g01:19 g02:18] false]"},
		{100, "[p1 map[g00:20 g01:19 g02:18 g03:17 g04:16 g05:15 g06:14 g07:13 g08:12 g09:11 g10:10 g11:9] false p2 map[g00:20 g01:19 g02:18] false]"},
	} {
		if got := lags(c.n); got != c.want {
			t.Errorf("lagGroups %d:\n got %s\nwant %s", c.n, got, c.want)
		}
	}
}
