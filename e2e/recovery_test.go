package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// TestRestoreFromOlderBackup is the disaster recovery of docs/operations.md,
// "Backup and restore of PostgreSQL": the database is backed up (pg_dump),
// more pushes are stored, then the database is dropped and restored from that
// older backup. The broker, started again on its own WAL directory, resumes
// from the checkpoint the backup holds and re-projects what the backup lacks:
// every message is stored exactly once, in push order, at dense offsets and
// under the ids its verdict named, and dedup still knows the re-projected
// messages.
func TestRestoreFromOlderBackup(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	pcfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := pcfg.Database
	walDir := t.TempDir()
	keep := func(cfg *broker.Config) { cfg.Projector.WALRetention = time.Hour }
	const parts, perPush = 4, 8
	ids := map[string]string{} // transactionId → message id from its verdict
	order := map[string][]string{}
	seq := 0
	pushRound := func(base string, pushes int) {
		t.Helper()
		for i := 0; i < pushes; i++ {
			var items []item
			for k := 0; k < perPush; k++ {
				p := fmt.Sprintf("p%d", seq%parts)
				tx := fmt.Sprintf("0-%d", seq)
				items = append(items, item{"dr", p, map[string]int{"s": seq}, tx})
				order[p] = append(order[p], tx)
				seq++
			}
			res := push(t, base, body(items...))
			for _, r := range res {
				if r.Status != Q {
					t.Fatalf("push: %s is %s, want queued", r.TransactionID, r.Status)
				}
				ids[r.TransactionID] = r.MessageID
			}
		}
	}

	b1 := testenv.StartBroker(t, url, walDir, keep)
	pushRound("http://"+b1.Addr(), 5) // A: in the backup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dump, err := c.Dump(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	inBackup := seq
	pushRound("http://"+b1.Addr(), 5) // B: only in the WAL once the backup is restored
	if err := b1.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	if err := c.Restore(ctx, db, dump); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, url)
	if n := len(readQueue(t, s, "dr")); n != inBackup {
		t.Fatalf("restored database holds %d messages, want the backup's %d", n, inBackup)
	}

	b2 := testenv.StartBroker(t, url, walDir, keep)
	testenv.WaitFor(t, 30*time.Second, "re-projection of what the backup lacks", func() bool {
		return len(readQueue(t, s, "dr")) >= seq
	})
	for p, want := range order {
		msgs := readPartition(t, s, "dr", p)
		if got := txids(msgs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("partition %s holds %v, want %v", p, got, want)
		}
		for i, m := range msgs {
			if m.Offset != int64(i) {
				t.Errorf("partition %s: message %d at offset %d", p, i, m.Offset)
			}
			if m.ID.String() != ids[m.TransactionID] {
				t.Errorf("%s stored as %s, its verdict said %s", m.TransactionID, m.ID, ids[m.TransactionID])
			}
		}
	}

	// After recovery: a repeat of a re-projected message is a duplicate
	// naming the original; a new message follows at the next offset.
	last := fmt.Sprintf("0-%d", seq-1)
	res := push(t, "http://"+b2.Addr(), body(item{"dr", "p3", "again", last}, item{"dr", "p3", "new", "after"}))
	wantStatuses(t, res, ingest.StatusDuplicate, Q)
	if res[0].MessageID != ids[last] {
		t.Errorf("duplicate names %s, want the original %s", res[0].MessageID, ids[last])
	}
	msgs := readPartition(t, s, "dr", "p3")
	if m := msgs[len(msgs)-1]; m.TransactionID != "after" || m.Offset != int64(len(order["p3"])) {
		t.Errorf("new message stored as %s at offset %d, want after at %d", m.TransactionID, m.Offset, len(order["p3"]))
	}
}

// TestStaleWALDirectoryIsRefused: the broker's WAL directory is replaced by
// an older copy of itself (same broker id) while PostgreSQL keeps the newer
// checkpoint. The projector must neither skip nor repeat records: it stops,
// /health answers 503 naming the projector, pushes are kept in the WAL as
// buffered, and nothing reaches PostgreSQL. That holds on the first start
// (the WAL ends before the checkpoint) and after the stale WAL has grown
// past the checkpoint (the record at the checkpoint's index is another
// one). The documented remedy, deleting the broker's checkpoint row,
// re-projects the stale WAL: what the database has is a duplicate, the
// rest is stored once.
func TestStaleWALDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	_, url := testenv.OwnCluster(t)
	walDir, old := t.TempDir(), filepath.Join(t.TempDir(), "wal-copy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openStore(t, url)
	pushOne := func(base, tx string, want ingest.Status) {
		t.Helper()
		wantStatuses(t, push(t, base, body(item{"stale", "P", tx, tx})), want)
	}
	stored := func() string { return fmt.Sprint(txids(readPartition(t, s, "stale", "P"))) }

	b := testenv.StartBroker(t, url, walDir, nil)
	for _, tx := range []string{"a1", "a2", "a3"} {
		pushOne("http://"+b.Addr(), tx, Q)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", walDir, old).CombinedOutput(); err != nil {
		t.Fatalf("copy WAL: %v %s", err, out)
	}
	b = testenv.StartBroker(t, url, walDir, nil)
	for _, tx := range []string{"b1", "b2", "b3"} {
		pushOne("http://"+b.Addr(), tx, Q)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	const want = "[a1 a2 a3 b1 b2 b3]"

	refused := func(b *broker.Broker) {
		t.Helper()
		base := "http://" + b.Addr()
		testenv.WaitFor(t, 10*time.Second, "the projector to refuse the stale WAL", func() bool {
			return b.Projector.Stopped() != nil
		})
		code, rb := get(t, base+"/health")
		if code != 503 || !strings.Contains(rb, "WAL and database disagree") {
			t.Fatalf("/health: %d %s", code, rb)
		}
	}
	b = testenv.StartBroker(t, url, old, nil)
	refused(b)
	for _, tx := range []string{"c1", "c2", "c3", "c4"} { // the stale WAL grows past the checkpoint
		pushOne("http://"+b.Addr(), tx, B)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = testenv.StartBroker(t, url, old, nil)
	refused(b)
	time.Sleep(500 * time.Millisecond)
	if got := stored(); got != want {
		t.Fatalf("database holds %s while the WAL is refused, want %s", got, want)
	}
	// `queen wal status` tells the operator the same, beside the running
	// broker; on the WAL the checkpoint came from it reports no problem.
	status := func(dir string) (string, error) {
		cmd := exec.Command(brokerBinary(t), "wal", "status", dir)
		cmd.Env = append(os.Environ(), "QUEEN_PG_URL="+url)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := status(old); err == nil || !strings.Contains(out, "WAL and database disagree") || !strings.Contains(out, b.ID.String()) {
		t.Errorf("wal status on the stale WAL: %v\n%s", err, out)
	}
	if out, err := status(walDir); err != nil || !strings.Contains(out, "state       ok") || !strings.Contains(out, "(0 records not yet in PostgreSQL)") {
		t.Errorf("wal status on the WAL of the checkpoint: %v\n%s", err, out)
	}

	// Remedy (docs/operations.md, "WAL and database disagree"): forget this broker's checkpoint; the projector
	// re-projects its whole WAL under the dedup window.
	if _, err := s.Pool().Exec(ctx, "DELETE FROM queen.projector_checkpoints WHERE broker_id = $1", b.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "re-projection after the remedy", func() bool {
		return b.Projector.Stopped() == nil && b.Projector.Backlog() == 0
	})
	if got := stored(); got != "[a1 a2 a3 b1 b2 b3 c1 c2 c3 c4]" {
		t.Fatalf("after the remedy the partition holds %s", got)
	}
}

// TestWALByteCap: with QUEEN_WAL_MAX_BYTES set and PostgreSQL away, pushes
// are buffered until the WAL's segment files reach the cap; after that they
// answer failed, naming the cap, and nothing of them is ever stored,
// while the disk keeps its room. Once PostgreSQL is back every buffered
// item is stored, the projected segments are truncated ahead of their
// retention as soon as the projector has caught up (the WAL is above 3/4
// of its cap), and the next push is queued.
func TestWALByteCap(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	const limit = 256 << 10
	b := testenv.StartBroker(t, url, "", func(cfg *broker.Config) {
		cfg.WAL.MaxBytes = limit
		cfg.WAL.SegmentSize = 16 << 10
		cfg.Projector.WALRetention = time.Hour
		cfg.Projector.MaintainInterval = time.Hour // truncation by the tick would hide the catch-up's
	})
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{"cap", "P", "first", "first"})), Q)
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 1000)
	var buffered, failed []string
	for i := 0; len(failed) < 20; i++ {
		if i > 1000 {
			t.Fatal("no failed verdict below the cap")
		}
		var items []item
		for k := 0; k < 10; k++ {
			items = append(items, item{"cap", "P", payload, fmt.Sprintf("%d-%d", i, k)})
		}
		for _, r := range push(t, base, body(items...)) {
			switch r.Status {
			case B:
				if len(failed) > 0 {
					t.Fatalf("%s buffered after failed verdicts began", r.TransactionID)
				}
				buffered = append(buffered, r.TransactionID)
			case ingest.StatusFailed:
				if !strings.Contains(r.Error, "QUEEN_WAL_MAX_BYTES") {
					t.Fatalf("%s failed with error %q, want the byte cap named", r.TransactionID, r.Error)
				}
				failed = append(failed, r.TransactionID)
			default:
				t.Fatalf("%s: %s with PostgreSQL away", r.TransactionID, r.Status)
			}
		}
		if size := b.WAL.Size(); size > limit {
			t.Fatalf("WAL holds %d bytes, cap %d", size, limit)
		}
	}
	if len(buffered) < 100 {
		t.Fatalf("only %d items buffered under a %d-byte cap", len(buffered), limit)
	}
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, url)
	testenv.WaitFor(t, 30*time.Second, "the buffered items in PostgreSQL", func() bool {
		return len(readPartition(t, s, "cap", "P")) >= 1+len(buffered)
	})
	want := append([]string{"first"}, buffered...)
	if got := txids(readPartition(t, s, "cap", "P")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("partition holds %d items, want the first and the %d buffered ones in order", len(got), len(buffered))
	}
	// Caught up, the projector makes room itself: no push has to be
	// refused at the cap first (the maintenance tick is 30 s away).
	testenv.WaitFor(t, 10*time.Second, "the WAL truncated below 3/4 of its cap after catching up", func() bool {
		return b.WAL.Size() <= limit/4*3
	})
	wantStatuses(t, push(t, base, body(item{"cap", "Q", payload, ""})), Q)
	for _, id := range failed {
		for _, m := range readPartition(t, s, "cap", "P") {
			if m.TransactionID == id {
				t.Fatalf("%s answered failed but stored", id)
			}
		}
	}
}

// TestCorruptSealedSegmentSkip: a byte of a sealed WAL segment holding
// buffered records is flipped while the broker is down. On restart the
// projector stores what verifies before it and stops there (it never
// skips by itself); /health says so, and `queen wal status` names the
// unreadable records and prints the checkpoint update that gives them up.
// Running that update (beside the running broker: the projector re-reads
// its checkpoint before each retry) lets projection go on: every record
// outside the unreadable run is stored once, in order, none inside it.
func TestCorruptSealedSegmentSkip(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	walDir := t.TempDir()
	small := func(cfg *broker.Config) { cfg.WAL.SegmentSize = 4096 }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := testenv.StartBroker(t, url, walDir, small)
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{"bad", "P", "c0", "c0"})), Q) // WAL index 1
	if err := c.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	const n = 30
	payload := strings.Repeat("y", 500)
	for i := 1; i <= n; i++ { // WAL index i+1 holds c<i>
		wantStatuses(t, push(t, base, body(item{"bad", "P", payload, fmt.Sprintf("c%d", i)})), B)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(walDir, "wal", "[0-9]*"))
	if len(segs) < 3 {
		t.Fatalf("want at least 3 segments, have %d", len(segs))
	}
	data, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(segs[1], data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	b = testenv.StartBroker(t, url, walDir, small)
	testenv.WaitFor(t, 20*time.Second, "the projector to stop at the corrupt record", func() bool {
		return b.Projector.Stopped() != nil
	})
	if code, rb := get(t, "http://"+b.Addr()+"/health"); code != 503 || !strings.Contains(rb, "does not verify") {
		t.Fatalf("/health: %d %s", code, rb)
	}
	cmd := exec.Command(brokerBinary(t), "wal", "status", walDir)
	cmd.Env = append(os.Environ(), "QUEEN_PG_URL="+url)
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`UPDATE queen\.projector_checkpoints SET wal_index = (\d+), record_crc32c = NULL, partial_index = NULL WHERE broker_id = '[0-9a-f-]+'`).FindSubmatch(out)
	u := regexp.MustCompile(`unreadable  records (\d+)\.\.(\d+)`).FindSubmatch(out)
	if err == nil || m == nil || u == nil {
		t.Fatalf("wal status on the corrupt WAL: %v\n%s", err, out)
	}
	t.Logf("wal status:\n%s", out)
	from, _ := strconv.Atoi(string(u[1]))
	through, _ := strconv.Atoi(string(m[1]))
	if _, err := openStore(t, url).Pool().Exec(ctx, string(m[0])); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "projection past the unreadable records", func() bool {
		return b.Projector.Stopped() == nil && b.Projector.Backlog() == 0
	})
	var want []string
	for idx := 1; idx <= n+1; idx++ {
		if idx < from || idx > through {
			want = append(want, fmt.Sprintf("c%d", idx-1))
		}
	}
	if got := txids(readPartition(t, openStore(t, url), "bad", "P")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("partition holds %v,\nwant %v (records %d..%d given up)", got, want, from, through)
	}
	if through < from || through-from+1 >= n {
		t.Fatalf("gave up records %d..%d of %d", from, through, n+1)
	}
}

// TestProjectorErrorClearedOnRecovery: the projector's last error (the
// pipeline route's lastError) is set while PostgreSQL is away and cleared
// once it answers again, without a push to project.
func TestProjectorErrorClearedOnRecovery(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{"rec", "P", "one", "one"})), Q)
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the outage seen by the idle projector", func() bool {
		return !b.Projector.Healthy() && b.Projector.LastError() != nil
	})
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the projector healthy and its error cleared", func() bool {
		return b.Projector.Healthy() && b.Projector.LastError() == nil
	})
}

// TestCheckpointHintWhilePostgresAway: a broker started while PostgreSQL
// is away reports the checkpoint it kept from its last run (unconfirmed),
// so its backlog is what was pushed since, not every record its WAL still
// holds; once PostgreSQL answers the checkpoint is confirmed and the
// backlog drains.
func TestCheckpointHintWhilePostgresAway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, url := testenv.OwnCluster(t)
	walDir := t.TempDir()
	b := testenv.StartBroker(t, url, walDir, nil)
	base := "http://" + b.Addr()
	for i := 0; i < 5; i++ {
		wantStatuses(t, push(t, base, body(item{"hint", "P", i, fmt.Sprintf("h%d", i)})), Q)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	b = testenv.StartBroker(t, url, walDir, nil)
	base = "http://" + b.Addr()
	if cp, bl := b.Projector.Checkpoint(), b.Projector.Backlog(); cp != 5 || bl != 0 || b.Projector.CheckpointConfirmed() {
		t.Fatalf("restarted with PostgreSQL away: checkpoint %d (confirmed %v), backlog %d; want 5 from the hint, backlog 0",
			cp, b.Projector.CheckpointConfirmed(), bl)
	}
	wantStatuses(t, push(t, base, body(item{"hint", "P", 5, "h5"})), B)
	if bl := b.Projector.Backlog(); bl != 1 {
		t.Fatalf("backlog %d after one buffered push, want 1", bl)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the checkpoint confirmed and the backlog drained", func() bool {
		return b.Projector.CheckpointConfirmed() && b.Projector.Backlog() == 0 && b.Projector.Checkpoint() == 6
	})
}
