package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestSchemaPartitionsFillfactor: queen.partitions leaves room on its
// pages for HOT offset updates (fillfactor 50), also in a database made by
// an older version, whose table has the default fill, once the schema is
// applied; applying it again leaves the setting as it is.
func TestSchemaPartitionsFillfactor(t *testing.T) {
	s, url := testenv.OpenSchemaStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := func(s *pg.Store) string {
		t.Helper()
		var o string
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class
			WHERE oid = 'queen.partitions'::regclass`).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if got := opts(s); got != "fillfactor=50" {
		t.Fatalf("new database: reloptions %q, want fillfactor=50", got)
	}
	// The older layout: the default fill.
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE queen.partitions RESET (fillfactor)`); err != nil {
		t.Fatal(err)
	}
	if got := opts(s); got != "" {
		t.Fatalf("after RESET: reloptions %q", got)
	}
	for range 2 {
		s2 := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
		if err := s2.EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
		if got := opts(s2); got != "fillfactor=50" {
			t.Fatalf("upgraded database: reloptions %q, want fillfactor=50", got)
		}
	}
}

// TestSchemaDedupStorageExternal: queen.dedup_batches stores key_hashes
// and partition_ids EXTERNAL (no compression attempt), also in a database
// made by an older version (both EXTENDED) once the schema is applied
// again; a sidecar row written before the change (compressed or not) is
// still found by the probe, and applying the schema again changes nothing.
func TestSchemaDedupStorageExternal(t *testing.T) {
	s, url := testenv.OpenSchemaStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	storage := func(s *pg.Store) string {
		t.Helper()
		var o string
		if err := s.Pool().QueryRow(ctx, `SELECT string_agg(attname || '=' || attstorage::text, ',' ORDER BY attname) FROM pg_attribute
			WHERE attrelid = 'queen.dedup_batches'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	const want = "base_offsets=x,expires_at=p,key_hashes=e,layout=p,partition_ids=e"
	if got := storage(s); got != want {
		t.Fatalf("new database: storage %q, want %q", got, want)
	}
	// The older layout: both EXTENDED, and a row written under it (large
	// enough to be toasted; its base offsets compress).
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE queen.dedup_batches ALTER COLUMN key_hashes SET STORAGE EXTENDED,
		ALTER COLUMN partition_ids SET STORAGE EXTENDED`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO queen.dedup_batches (expires_at, partition_ids, base_offsets, key_hashes)
		SELECT now() + interval '1 hour', array_agg(gen_random_uuid()), array_agg(0::bigint), array_agg(g::bigint * 7 + 3)
		FROM generate_series(1, 600) g`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s2 := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
		if err := s2.EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
		if got := storage(s2); got != want {
			t.Fatalf("upgraded database: storage %q, want %q", got, want)
		}
		var n int
		if err := s2.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.dedup_batch_probe(ARRAY[10, 4203, 1]::bigint[])`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("upgraded database: probe of the old row's keys found %d rows, want 1", n)
		}
	}
}
