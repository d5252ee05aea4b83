package pg_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// newPartitionItems returns one item for each of n partitions named
// prefix0..prefix(n-1) of queue.
func newPartitionItems(queue, prefix string, n int) []pg.ProjectItem {
	items := make([]pg.ProjectItem, n)
	now := time.Now().UnixMicro()
	for i := range items {
		id := uuid.Must(uuid.NewV7())
		items[i] = pg.ProjectItem{Queue: queue, Partition: fmt.Sprintf("%s%d", prefix, i), AcceptedAtMicros: now,
			Message: pg.Message{ID: id, TransactionID: id.String(), CreatedAtMicros: now, Payload: []byte("0")}}
	}
	return items
}

// nestedPlans runs sql on its own connection with auto_explain logging
// the plan of every statement, nested ones (inside SQL functions) included,
// and returns those plans as the server reported them.
func nestedPlans(t *testing.T, url, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans strings.Builder
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans.WriteString(n.Message + "\n")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, set := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
		"SET auto_explain.log_nested_statements = on", "SET client_min_messages = log"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatalf("%s: %v", set, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return plans.String()
}

// TestPartitionLookupScalesWithPartitions (issue: creating 1,000 partitions
// in a queue holding 56k took 1.5-2.1 s, 0.13 s in a fresh queue; the
// lookup read the queue's partitions for every key): in a queue of a
// million partitions, with the table's statistics stale (as while it
// grows) and fresh, every partition statement of the projector (lookup,
// creation, lock, offset update) is one index probe per key, and
// projecting 1,000 items to 1,000 new partitions there takes about as long
// as in a fresh queue.
func TestPartitionLookupScalesWithPartitions(t *testing.T) {
	s, url := testenv.OpenSchemaStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	big := 1_000_000
	if testing.Short() {
		big = 100_000
	}
	started := time.Now()
	for _, sql := range []string{
		`ALTER TABLE queen.partitions SET (autovacuum_enabled = false)`, // statistics stay those of the empty table
		`INSERT INTO queen.queues (name) VALUES ('big'), ('fresh')`,
		fmt.Sprintf(`INSERT INTO queen.partitions (queue_id, name)
			SELECT q.id, 'p' || g FROM queen.queues q, generate_series(1, %d) g WHERE q.name = 'big'`, big),
	} {
		if _, err := s.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Logf("%d partitions built in %v", big, time.Since(started).Round(time.Millisecond))

	queues, names, fresh := make([]string, 1000), make([]string, 1000), make([]string, 1000)
	for i := range queues {
		queues[i], names[i], fresh[i] = "big", fmt.Sprintf("p%d", i*(big/1000)+1), fmt.Sprintf("new%d", i)
	}
	var ids []uuid.UUID
	rows, err := s.Pool().Query(ctx, `SELECT id FROM queen.partition_ids($1, $2)`, queues, names)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil || len(ids) != 1000 {
		t.Fatalf("looked up %d of 1000 partitions: %v", len(ids), err)
	}
	nexts := make([]int64, len(ids))
	counts, offsets, lens := make([]int32, len(ids)), make([]int32, len(ids)), make([]int32, len(ids))
	var pack []byte
	for i := range ids {
		counts[i], offsets[i], lens[i] = 1, int32(len(pack)), 4
		pack = append(pack, "body"...)
	}
	for _, stats := range []string{"stale", "analyzed"} {
		if stats == "analyzed" {
			if _, err := s.Pool().Exec(ctx, `ANALYZE queen.queues; ANALYZE queen.partitions`); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name, sql string
			args      []any
			want      []string
		}{
			{"lookup", `SELECT queue, partition, id FROM queen.partition_ids($1, $2)`, []any{queues, names},
				[]string{"Index Cond: (name = k.q)", "Index Cond: ((queue_id = q.id) AND (name = k.p))"}},
			{"lookup with state", `SELECT queue, partition, id, next_offset, encryption_enabled FROM queen.partition_states($1, $2)`, []any{queues, names},
				[]string{"Index Cond: (name = k.q)", "Index Cond: ((queue_id = q.id) AND (name = k.p))"}},
			{"creation", `SELECT queen.create_partitions($1, $2)`, []any{queues, fresh}, []string{"Index Cond: (name = k.q)"}},
			{"lock", `SELECT * FROM queen.lock_partitions($1)`, []any{ids}, []string{"Index Scan using partitions_pkey on partitions p"}},
			{"offset update", `SELECT queen.advance_partitions($1, $2)`, []any{ids, nexts}, []string{"Index Cond: (id = v.id)"}},
			// The segment store: the offset update probes each partition
			// in id order from the sorted arrays, and neither statement
			// copies the arrays into a Function Scan's tuplestore.
			{"segment store", `SELECT queen.store_segments_packed($1, $2, $3, NULL, NULL, $4, $5, $6)`, []any{ids, nexts, counts, offsets, lens, pack},
				[]string{"Index Cond: (id = v.id)", "Sort Key: (unnest(", "Insert on segments", "ProjectSet"}},
		} {
			plans := nestedPlans(t, url, c.sql, c.args...)
			bad := strings.Contains(plans, "Seq Scan on partitions") || strings.Contains(plans, "Seq Scan on queues") ||
				strings.Contains(plans, "Rows Removed by") || strings.Contains(plans, "Hash Join") ||
				(c.name == "segment store" && (strings.Contains(plans, "Function Scan on v") || strings.Contains(plans, "Function Scan on u")))
			for _, w := range c.want {
				bad = bad || !strings.Contains(plans, w)
			}
			if bad {
				t.Errorf("%s, statistics %s: not one index probe per key (want %q):\n%s", c.name, stats, c.want, plans)
			}
		}
	}

	// Creating 1,000 new partitions through Project, in the big queue and
	// in a fresh one. A generous factor: the box may be loaded.
	timeIt := func(queue, prefix string) time.Duration {
		items := newPartitionItems(queue, prefix, 1000)
		start := time.Now()
		out, err := s.Project(ctx, uuid.New(), pg.Checkpoint{Index: 1}, items)
		if err != nil {
			t.Fatalf("project to %s: %v", queue, err)
		}
		if len(out) != len(items) {
			t.Fatalf("%d outcomes for %d items", len(out), len(items))
		}
		return time.Since(start)
	}
	inFresh := timeIt("fresh", "n")
	inBig := timeIt("big", "n")
	t.Logf("1,000 new partitions: fresh queue %v, queue of %d partitions %v", inFresh, big, inBig)
	if inBig > 5*inFresh+time.Second {
		t.Errorf("1,000 new partitions took %v in a queue of %d partitions, %v in a fresh one", inBig, big, inFresh)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'big'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != big+1000 {
		t.Errorf("big queue has %d partitions, want %d", n, big+1000)
	}
}
