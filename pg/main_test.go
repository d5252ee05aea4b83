package pg_test

import (
	"os"
	"testing"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestMain destroys the package's shared throwaway PostgreSQL afterwards
// and then fails the run if any goroutine is left (the Listener's, a pool's).
func TestMain(m *testing.M) { os.Exit(testenv.MainLeakChecked(m)) }

// openStore opens a Store on a fresh database with the schema applied; it
// is closed when the test ends.
func openStore(t testing.TB) *pg.Store {
	t.Helper()
	s, _ := testenv.OpenSchemaStore(t)
	return s
}
