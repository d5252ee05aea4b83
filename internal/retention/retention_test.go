package retention_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/queenmq/queen-go/internal/logbuf"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/queenmq/queen-go/internal/retention"
	"github.com/queenmq/queen-go/internal/startstop"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestMain destroys the shared throwaway PostgreSQL afterwards and fails
// the run if any goroutine is left.
func TestMain(m *testing.M) { os.Exit(testenv.MainLeakChecked(m)) }

// openStore opens a pg.Store on url, closed when the test ends; a short
// connect timeout keeps tests with PostgreSQL stopped quick.
func openStore(t *testing.T, url string) *pg.Store {
	t.Helper()
	return testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger, ConnectTimeout: 500 * time.Millisecond})
}

// TestDeletesExpiredSegments: with retentionSeconds 1, the segments of
// three partitions are deleted one interval after they expired; with a
// batch of one segment the run repeats its pass until nothing is left.
func TestDeletesExpiredSegments(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := store.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	none := "" // no namespace, no task
	if _, err := store.ConfigureQueue(ctx, "ret", &none, &none, "Default", pg.QueueOptions{RetentionEnabled: true, RetentionSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ConfigureQueue(ctx, "keep", &none, &none, "Default", pg.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	var items []pg.ProjectItem
	for _, q := range []string{"ret", "keep"} {
		for _, p := range []string{"A", "B", "C"} {
			id, _ := uuid.NewV7()
			items = append(items, pg.ProjectItem{Queue: q, Partition: p, AcceptedAtMicros: now,
				Message: pg.Message{ID: id, TransactionID: id.String(), CreatedAtMicros: now, Payload: []byte(`1`)}})
		}
	}
	if _, err := store.Project(ctx, uuid.New(), pg.Checkpoint{Index: 1}, items); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		n := 0
		for _, p := range []string{"A", "B", "C"} {
			msgs, err := store.ReadPartition(ctx, q, p)
			if err != nil {
				t.Fatal(err)
			}
			n += len(msgs)
		}
		return n
	}
	if n := count("ret"); n != 3 {
		t.Fatalf("before retention: %d messages, want 3", n)
	}
	svc := retention.New(retention.Config{Interval: 100 * time.Millisecond, Batch: 1, Logger: testenv.Logger}, store)
	t.Cleanup(svc.Stop)
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "retention to delete the expired segments", func() bool { return count("ret") == 0 })
	if n := count("keep"); n != 3 {
		t.Fatalf("a queue without retention lost messages: %d left, want 3", n)
	}
	svc.Stop()
	svc.Stop()
	store.Close()
}

func TestLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	svc := retention.New(retention.Config{Interval: 5 * time.Millisecond, Logger: testenv.Logger}, store)
	svc.Stop() // before Start: a no-op
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start: %v, want startstop.ErrStarted", err)
	}
	time.Sleep(50 * time.Millisecond) // some passes
	svc.Stop()
	svc.Stop()
	store.Close()
}

// TestPostgresAway: with no PostgreSQL at the address, each run fails,
// logged at debug (a retry during an outage: docs/operations.md, "Logs"),
// the loop keeps going, and Stop ends it promptly.
func TestPostgresAway(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", ln.Addr())
	ln.Close()
	store := openStore(t, url)
	var logs logbuf.Buffer
	svc := retention.New(retention.Config{Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, store)
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "two failed runs", func() bool {
		return strings.Count(logs.String(), `level=DEBUG msg="retention pass failed"`) >= 2
	})
	stopped := time.Now()
	svc.Stop()
	if d := time.Since(stopped); d > 2*time.Second {
		t.Fatalf("Stop took %v", d)
	}
	store.Close()
}
