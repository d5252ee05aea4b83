package pg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestSchemaReapplyWaitsForNoWriter: applying the schema to a database
// that has it (every broker start) takes no table lock that conflicts with
// writes: with a transaction holding ROW EXCLUSIVE on every table of the
// queen schema (what in-flight batches, pops and acks hold), a second
// Store's EnsureSchema, its lock_timeout 1 s, succeeds. (CREATE INDEX IF
// NOT EXISTS, ADD COLUMN IF NOT EXISTS, DROP CONSTRAINT IF EXISTS, CREATE
// OR REPLACE TRIGGER and SET COMPRESSION all take their lock before they
// find nothing to do.)
func TestSchemaReapplyWaitsForNoWriter(t *testing.T) {
	t.Parallel()
	s, url := testenv.OpenSchemaStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables, err := s.Pool().Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND c.relkind = 'r' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(tables, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("only %d tables in the queen schema: %v", len(names), names)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(names, ", ")+` IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	st2 := testenv.OpenStore(t, pg.Config{URL: url + sep + "lock_timeout=1000", Logger: testenv.Logger})
	if err := st2.EnsureSchema(ctx); err != nil {
		t.Fatalf("the schema applied again beside writers on every table: %v", err)
	}
}
