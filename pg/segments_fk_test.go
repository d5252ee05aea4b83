package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// segmentsOf counts the segments of queue q's partitions and of the
// partitions ids (which may be gone).
func segmentsOf(t *testing.T, s *pg.Store, ids []uuid.UUID) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.segments WHERE partition_id = ANY($1::uuid[])`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func partitionIDsOf(t *testing.T, s *pg.Store, q string) []uuid.UUID {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, q)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestSegmentsGoWithTheirPartition: queen.segments has no foreign key to
// queen.partitions (its per-row check cost every batch); the statement
// trigger that replaces its ON DELETE CASCADE deletes a partition's
// segments whether the partition is deleted by DeleteQueue, by a queue
// row's delete cascading to it (what an older broker's queue delete does),
// or directly; other queues' segments stay.
func TestSegmentsGoWithTheirPartition(t *testing.T) {
	x := setupBrokers(t, nil)
	ctx := context.Background()
	for _, q := range []string{"gone1", "gone2", "gone3", "kept"} {
		x.projectA(t, at(q, "P", ""), at(q, "Q", ""), at(q, "P", ""))
	}
	var fks int
	if err := x.a.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'queen.segments'::regclass AND contype = 'f'`).Scan(&fks); err != nil {
		t.Fatal(err)
	}
	if fks != 0 {
		t.Fatalf("queen.segments has %d foreign keys, want none", fks)
	}
	kept := partitionIDsOf(t, x.a, "kept")
	deletes := map[string]func(ids []uuid.UUID){
		"gone1": func([]uuid.UUID) {
			if ok, err := x.b.DeleteQueue(ctx, "gone1"); err != nil || !ok {
				t.Fatalf("delete queue: %v, %v", ok, err)
			}
		},
		"gone2": func([]uuid.UUID) {
			if _, err := x.a.Pool().Exec(ctx, `DELETE FROM queen.queues WHERE name = 'gone2'`); err != nil {
				t.Fatal(err)
			}
		},
		"gone3": func(ids []uuid.UUID) {
			if _, err := x.a.Pool().Exec(ctx, `DELETE FROM queen.partitions WHERE id = $1`, ids[0]); err != nil {
				t.Fatal(err)
			}
		},
	}
	for q, del := range deletes {
		ids := partitionIDsOf(t, x.a, q)
		if n := segmentsOf(t, x.a, ids); n != 2 {
			t.Fatalf("%s: %d segments before the delete, want 2", q, n)
		}
		del(ids)
		want := 0
		if q == "gone3" {
			want = 1 // only one of its partitions was deleted
		}
		if n := segmentsOf(t, x.a, ids); n != want {
			t.Errorf("%s: %d segments left after the delete, want %d", q, n, want)
		}
	}
	if n := segmentsOf(t, x.a, kept); n != 2 {
		t.Errorf("another queue's delete took its segments: %d left, want 2", n)
	}
}

// TestSchemaDropsSegmentsForeignKey: a database made by an older version,
// whose queen.segments references queen.partitions, loses the key when the
// schema is applied, and its partitions' segments still go with them.
func TestSchemaDropsSegmentsForeignKey(t *testing.T) {
	url := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	// The older layout: the key with its cascade.
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE queen.segments ADD CONSTRAINT segments_partition_id_fkey
		FOREIGN KEY (partition_id) REFERENCES queen.partitions(id) ON DELETE CASCADE`); err != nil {
		t.Fatal(err)
	}
	s2 := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := s2.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	var fks int
	if err := s2.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'queen.segments'::regclass AND contype = 'f'`).Scan(&fks); err != nil {
		t.Fatal(err)
	}
	if fks != 0 {
		t.Fatalf("after the schema, queen.segments has %d foreign keys, want none", fks)
	}
}

// TestSegmentsQueueDeleteRacesProjection: without the foreign key, a
// queue delete and a projection batch racing for a partition still leave
// no segment whose partition is gone. A batch that locked the partition
// and wrote its segment first holds the delete until it commits, and the
// delete then takes the segment with the partition; batches projected
// while the queue is deleted again and again (predicted and the long way,
// the queue recreated by the next batch) leave none behind either.
func TestSegmentsQueueDeleteRacesProjection(t *testing.T) {
	x := setupBrokers(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orphans := func() int {
		t.Helper()
		var n int
		if err := x.a.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.segments s
			WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = s.partition_id)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The batch first: its transaction holds the partition row while the
	// delete waits behind it.
	x.projectA(t, at("race", "P", ""))
	ids := partitionIDsOf(t, x.a, "race")
	tx, err := x.a.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	body := pg.EncodeSegment(nil, []pg.Message{at("race", "P", "").Message})
	if _, err := tx.Exec(ctx, `SELECT queen.write_segments($1::uuid[], '{1}'::bigint[], '{1}'::integer[], NULL::boolean[], $2::bytea[])`,
		ids, [][]byte{body}); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := x.b.DeleteQueue(ctx, "race")
		deleted <- err
	}()
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the batch holding its partition: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if n := segmentsOf(t, x.a, ids); n != 0 {
		t.Fatalf("%d segments of the deleted partition left", n)
	}

	// Batches and deletes at once.
	stop := time.Now().Add(1500 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		for time.Now().Before(stop) {
			if _, err := x.b.DeleteQueue(ctx, "race"); err != nil {
				done <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		done <- nil
	}()
	for i := 0; time.Now().Before(stop); i++ {
		x.walA++
		items := []pg.ProjectItem{at("race", "P", ""), at("race", "Q", ""), at("race", "P", "")}
		if i%3 == 0 {
			items = append(items, at("race", "P", uuid.NewString()))
		}
		if _, err := x.a.Project(ctx, x.idA, pg.Checkpoint{Index: x.walA, HasCRC: true}, items); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := orphans(); n != 0 {
		t.Fatalf("%d segments of deleted partitions left", n)
	}
	stored(t, x.a, "race") // what is left is consistent
}
