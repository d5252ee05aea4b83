package pg_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestMain destroys the package's shared throwaway PostgreSQL afterwards
// and then fails the run if any goroutine is left (the Listener's, a pool's).
func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

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
