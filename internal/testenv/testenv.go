// Package testenv gives tests a real PostgreSQL and in-process brokers.
//
// Databases: when TEST_DATABASE_URL is set (scripts/test.sh sets it), it is
// the admin connection used to create one fresh database per test;
// otherwise one throwaway cluster per test binary is started on first use
// (pgcluster) and destroyed by Main. Fault tests that must stop or kill
// PostgreSQL start their own cluster with OwnCluster.
package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/pgcluster"
	"github.com/queenmq/queen-go/pg"
)

var (
	mu      sync.Mutex
	shared  *pgcluster.Cluster
	adminDB string
	dbSeq   atomic.Int64
)

// Main runs the tests and destroys the shared cluster afterwards. Use it as
// TestMain's body: os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	if shared != nil {
		shared.Destroy()
		shared = nil
	}
	mu.Unlock()
	return code
}

// IgnoreServers is the goleak option that ignores the goroutines waiting
// for throwaway PostgreSQL servers (pgcluster.ServerWaiter): a test's own
// leak check needs it, since the shared server may start inside that test.
var IgnoreServers = goleak.IgnoreAnyFunction(pgcluster.ServerWaiter)

// MainLeakChecked is Main, and then fails the run (exit code 1) if any
// goroutine is left once the tests passed (goleak): for packages whose
// services start goroutines. Use it as TestMain's body.
func MainLeakChecked(m *testing.M) int {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// OpenStore opens a pg.Store with cfg and closes it when the test ends.
// It does not apply the schema (see OpenSchemaStore).
func OpenStore(t testing.TB, cfg pg.Config) *pg.Store {
	t.Helper()
	s, err := pg.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// OpenSchemaStore opens a pg.Store on a fresh database (NewDatabase) with
// the schema applied, closed when the test ends, and returns the
// database's URL too.
func OpenSchemaStore(t testing.TB) (*pg.Store, string) {
	t.Helper()
	url := NewDatabase(t)
	s := OpenStore(t, pg.Config{URL: url, Logger: Logger})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return s, url
}

func adminURL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if adminDB != "" {
		return adminDB
	}
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		adminDB = u
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	shared = c
	adminDB = c.URL("postgres")
	return adminDB
}

// NewDatabase creates a fresh database for this test and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return createDatabase(t, adminURL(t))
}

func createDatabase(t testing.TB, admin string) string {
	t.Helper()
	return replaceDB(admin, createDatabaseName(t, admin))
}

// createDatabaseName creates a fresh database through the admin URL and
// returns its name.
func createDatabaseName(t testing.TB, admin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect admin db: %v", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("queen_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return name
}

// replaceDB swaps the database name in a postgres:// URL.
func replaceDB(u, name string) string {
	q := ""
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u, q = u[:i], u[i:]
	}
	if i := strings.LastIndexByte(u, '/'); i > len("postgres://") {
		return u[:i+1] + name + q
	}
	return u + "/" + name + q
}

// OwnCluster starts a PostgreSQL cluster that only this test uses (so it
// may stop or kill it) and returns it with the URL of a fresh database.
func OwnCluster(t testing.TB) (*pgcluster.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(c.Destroy)
	return c, createDatabase(t, c.URL("postgres"))
}

// OwnStandbyPair starts a primary and an asynchronous streaming standby of
// it that only this test uses (pgcluster.StartPrimary, StartStandby),
// creates a fresh database on the primary, waits until the standby has
// replayed it, and returns both clusters with the database's connection
// string naming both hosts, primary first, with
// target_session_attrs=read-write (pgcluster.FailoverDSN).
func OwnStandbyPair(t testing.TB) (primary, standby *pgcluster.Cluster, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgcluster.StartPrimary(ctx)
	if err != nil {
		t.Fatalf("start PostgreSQL primary: %v", err)
	}
	t.Cleanup(primary.Destroy)
	standby, err = primary.StartStandby(ctx)
	if err != nil {
		t.Fatalf("start PostgreSQL standby: %v", err)
	}
	t.Cleanup(standby.Destroy)
	name := createDatabaseName(t, primary.URL("postgres"))
	if err := primary.WaitReplicated(ctx); err != nil {
		t.Fatalf("standby: %v", err)
	}
	return primary, standby, pgcluster.FailoverDSN(name, primary, standby)
}

// StartBroker starts an in-process broker on a free loopback port with the
// given PostgreSQL URL; walDir "" means a new temporary directory. mod, if
// not nil, adjusts the config. The broker is stopped at cleanup.
func StartBroker(t testing.TB, pgURL, walDir string, mod func(*broker.Config)) *broker.Broker {
	t.Helper()
	if walDir == "" {
		walDir = t.TempDir()
	}
	cfg := broker.Config{Addr: "127.0.0.1:0", PGURL: pgURL, WALDir: walDir, MaxBodyBytes: 64 << 20}
	cfg.Projector.MaintainInterval = 200 * time.Millisecond
	cfg.Projector.BackoffMax = 200 * time.Millisecond
	cfg.Logger = Logger
	if mod != nil {
		mod(&cfg)
	}
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

// WaitFor polls cond every 20 ms until it is true or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logger is the brokers' logger in tests: warnings and errors to stderr
// (set QUEEN_TEST_LOG=debug for everything).
var Logger = func() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("QUEEN_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}()

// Client is a shared HTTP client for tests.
var Client = &http.Client{Timeout: 30 * time.Second}
