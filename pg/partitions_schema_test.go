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
	url := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
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
