package pg_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestMain destroys the package's shared throwaway PostgreSQL afterwards.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// openStore opens a Store on a fresh database with the schema applied; it
// is closed when the test ends.
func openStore(t *testing.T) *pg.Store {
	t.Helper()
	s, err := pg.Open(pg.Config{URL: testenv.NewDatabase(t), Logger: testenv.Logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
