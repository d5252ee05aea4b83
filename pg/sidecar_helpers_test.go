package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/queenmq/queen-go/pg"
)

// insertSidecarRow writes one queen.dedup_batches row by hand: partition
// pid with base offset base, the key hashes keys, expiring in an hour.
func insertSidecarRow(t testing.TB, s *pg.Store, pid uuid.UUID, base int64, keys []int64) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), `INSERT INTO queen.dedup_batches (expires_at, partition_ids, base_offsets, key_hashes)
		VALUES (now() + interval '1 hour', $1, $2, $3)`, []uuid.UUID{pid}, []int64{base}, keys); err != nil {
		t.Fatal(err)
	}
}

// probeBases runs queen.dedup_batch_probe(hashes) and returns the first
// base offset of each row it returns, ascending (a row returned twice
// shows twice).
func probeBases(t testing.TB, s *pg.Store, hashes []int64) []int64 {
	t.Helper()
	r, err := s.Pool().Query(context.Background(), `SELECT base_offsets[1] FROM queen.dedup_batch_probe($1::bigint[]) ORDER BY 1`, hashes)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(r, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return got
}
