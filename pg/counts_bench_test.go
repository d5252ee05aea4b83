package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// BenchmarkCounts times the message-count reads over 5000 partitions of
// one queue (10 segments of 100 messages each, a queue-mode cursor under a
// live lease and a named group's cursor per partition), without
// tombstones and with one deleted message per partition past the cursors:
// what the tombstone subtraction costs (docs/streams.md).
func BenchmarkCounts(b *testing.B) {
	ctx := context.Background()
	st := openStore(b)
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('bench')`,
		`INSERT INTO queen.partitions (queue_id, name, next_offset)
			SELECT q.id, 'p' || i, 1000 FROM queen.queues q, generate_series(1, 5000) i`,
		`INSERT INTO queen.segments (partition_id, base_offset, last_offset, body)
			SELECT p.id, s * 100, s * 100 + 99, '\x00' FROM queen.partitions p, generate_series(0, 9) s`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset, lease_id, lease_expires_at, lease_end)
			SELECT id, '__QUEUE_MODE__', 500, gen_random_uuid(), now() + interval '1 hour', 509 FROM queen.partitions`,
		`INSERT INTO queen.consumer_cursors (partition_id, consumer_group, cursor_offset) SELECT id, 'g', 700 FROM queen.partitions`,
		`ANALYZE`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	status := pg.NewStatus(st)
	reads := []struct {
		name string
		read func() error
	}{
		{"Overview", func() error { _, err := st.Overview(ctx); return err }},
		{"ListPartitions", func() error {
			_, _, err := st.ListPartitions(ctx, pg.PartitionFilter{Limit: 100})
			return err
		}},
		{"QueueDepth", func() error { _, err := st.QueueDepth(ctx, "bench", "g"); return err }},
		{"ListQueues", func() error { _, _, err := st.ListQueues(ctx, pg.QueueFilter{Limit: 100}); return err }},
		{"GetQueue", func() error { _, err := st.GetQueue(ctx, "bench", 10); return err }},
		{"ListGroups", func() error { _, err := st.ListGroups(ctx, pg.GroupFilter{Limit: 100}); return err }},
		{"Lagging", func() error { _, err := st.LaggingPartitions(ctx, pg.LaggingFilter{Limit: 100}); return err }},
		{"StatusLeases", func() error { _, err := status.Leases(ctx); return err }},
		{"StoredPerBucket", func() error {
			_, err := status.StoredPerBucket(ctx, pg.StatusFilter{}, time.Now().Add(-time.Hour), time.Now(), time.Minute)
			return err
		}},
	}
	run := func(tag string) {
		for _, r := range reads {
			b.Run(tag+"/"+r.name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if err := r.read(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	run("none")
	if _, err := st.Pool().Exec(ctx, `INSERT INTO queen.tombstones (partition_id, msg_offset, transaction_id)
		SELECT id, 900, '\x00' FROM queen.partitions`); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `ANALYZE queen.tombstones`); err != nil {
		b.Fatal(err)
	}
	run("onePerPartition")
}
