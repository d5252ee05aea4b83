package projector_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/queenmq/queen-go/internal/logbuf"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// hintedWAL returns a WAL of several sealed segments holding n records and
// a checkpoint hint file naming its last record.
func hintedWAL(t *testing.T, n int) (*wal.Log, string) {
	t.Helper()
	w := openWAL(t, wal.Options{SegmentSize: 4 << 10, NoSync: true})
	for i := 0; i < n; i++ {
		if _, err := w.Append(record("h", fmt.Sprintf("r%d-", i), 20), nil); err != nil {
			t.Fatal(err)
		}
	}
	hint := filepath.Join(t.TempDir(), "checkpoint.hint")
	if err := os.WriteFile(hint, strconv.AppendUint(nil, w.DurableIndex(), 10), 0o640); err != nil {
		t.Fatal(err)
	}
	return w, hint
}

// TestHintNeverTruncates: with PostgreSQL away, a checkpoint hint naming
// every record is reported (Checkpoint, unconfirmed) but deletes no WAL
// segment, however often maintenance runs with no retention, and is not
// rewritten.
func TestHintNeverTruncates(t *testing.T) {
	w, hint := hintedWAL(t, 40)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=1", ln.Addr())
	ln.Close()
	store := openStore(t, away)
	p := projector.New(projector.Config{BrokerID: uuid.New(), CheckpointHint: hint, WALRetention: -1,
		MaintainInterval: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: testenv.Logger},
		w, store, ingest.NewRegistry())
	if p.Checkpoint() != w.DurableIndex() || p.CheckpointConfirmed() {
		t.Fatalf("checkpoint %d (confirmed %v), want the hint's %d unconfirmed", p.Checkpoint(), p.CheckpointConfirmed(), w.DurableIndex())
	}
	before, _ := os.ReadFile(hint)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // dozens of maintenance ticks
	p.Stop()
	if first := w.FirstIndex(); first != 1 {
		t.Fatalf("WAL starts at record %d after maintenance with only a hint: segments were truncated", first)
	}
	if after, _ := os.ReadFile(hint); !bytes.Equal(before, after) {
		t.Fatalf("hint rewritten from %q to %q without PostgreSQL", before, after)
	}
}

// TestHintIsNotACommit: a broker whose hint is ahead of a database that
// has no checkpoint for it (a new database, or one restored from a backup)
// re-projects without the "behind" warning, which is for commits this run
// saw (docs/failover.md), and its checkpoint, confirmed, is the database's.
func TestHintIsNotACommit(t *testing.T) {
	w, hint := hintedWAL(t, 5)
	var logs logbuf.Buffer
	store := openStore(t, testenv.NewDatabase(t))
	p := projector.New(projector.Config{BrokerID: uuid.New(), CheckpointHint: hint,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		w, store, ingest.NewRegistry())
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	testenv.WaitFor(t, 30*time.Second, "every record projected", func() bool {
		return p.CheckpointConfirmed() && p.Checkpoint() == w.DurableIndex() && p.Backlog() == 0
	})
	if out := logs.String(); strings.Contains(out, "is behind") {
		t.Fatalf("a hint was taken for a commit:\n%s", out)
	}
}
