package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/wal"
)

// TestCaseP14DatabaseDiesUnderLoad: 200 pushes/s of 10 items; PostgreSQL is
// SIGKILLed mid-run and restarted 5 s later. Every request gets an answer
// within its bound, /health says 503 while the database is away, and
// afterwards every queued/buffered item is stored exactly once, in order.
func TestCaseP14DatabaseDiesUnderLoad(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	l := &load{queue: "p14", partitions: 10, perPush: 10, producers: 4, interval: 20 * time.Millisecond, bases: []string{base}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, t); close(done) }()

	time.Sleep(2 * time.Second)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if code := healthCode(t, base); code != http.StatusServiceUnavailable {
		t.Errorf("/health with PostgreSQL down: %d, want 503", code)
	}
	time.Sleep(4 * time.Second)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	cancel()
	<-done

	counts := l.counts()
	t.Logf("verdicts %v, requests %d, no answer %d, slowest %v", counts, l.requests, l.noAnswer, l.maxDur)
	if counts[ingest.StatusBuffered] == 0 || counts[ingest.StatusQueued] == 0 {
		t.Errorf("expected both queued and buffered verdicts, got %v", counts)
	}
	if l.noAnswer != 0 {
		t.Errorf("%d requests got no answer", l.noAnswer)
	}
	if l.maxDur > ingest.DefaultVerdictTimeout+5*time.Second {
		t.Errorf("a request took %v", l.maxDur)
	}
	testenv.WaitFor(t, 30*time.Second, "health 200", func() bool { return healthCode(t, base) == http.StatusOK })
	msgs := l.verify(t, openStore(t, url), 60*time.Second)
	t.Logf("stored %d", len(msgs))
}

// TestCaseP14bCommitWhoseAnswerNeverCame crashes PostgreSQL (immediate
// shutdown) four times under steady load; clients retry until answered.
// Every item ever answered queued or buffered is stored exactly once.
func TestCaseP14bCommitWhoseAnswerNeverCame(t *testing.T) {
	t.Parallel()
	commitWhoseAnswerNeverCame(t, false)
}

// TestCaseP14bUUIDv7Keys is P14b with transactionIds as Queen's SDKs mint
// them (UUIDv7 text, kept under their tick in the dedup sidecar): a retry
// of a batch whose commit went through is still its duplicate.
func TestCaseP14bUUIDv7Keys(t *testing.T) {
	t.Parallel()
	commitWhoseAnswerNeverCame(t, true)
}

func commitWhoseAnswerNeverCame(t *testing.T, uuid7 bool) {
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	l := &load{queue: "p14b", partitions: 4, perPush: 20, producers: 4, interval: 10 * time.Millisecond, retry: true,
		bases: []string{base}, uuid7: uuid7}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, t); close(done) }()
	for i := 0; i < 4; i++ {
		time.Sleep(1500 * time.Millisecond)
		if err := c.Stop(context.Background(), "immediate"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := c.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	t.Logf("verdicts %v, requests %d", l.counts(), l.requests)
	msgs := l.verify(t, openStore(t, url), 60*time.Second)
	t.Logf("stored %d", len(msgs))
}

// TestCaseP13ReplayMeetsExistingRows: broker 1 buffers T1, T2, T3 while
// PostgreSQL is down; once it is back, broker 2 (own WAL, same database)
// stores T2 before broker 1's projector retries. Broker 1 finishes; T2 is
// stored once and T1 precedes T3.
func TestCaseP13ReplayMeetsExistingRows(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b1 := testenv.StartBroker(t, url, "", func(cfg *broker.Config) {
		cfg.Projector.BackoffMin = 3 * time.Second
		cfg.Projector.BackoffMax = 3 * time.Second
	})
	base1 := "http://" + b1.Addr()
	wantStatuses(t, push(t, base1, body(item{"qf", "P", 0, "T0"})), Q) // schema and partition exist
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, push(t, base1, body(item{"qf", "P", 1, "T1"}, item{"qf", "P", 2, "T2"}, item{"qf", "P", 3, "T3"})), B, B, B)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := testenv.StartBroker(t, url, "", nil)
	res := push(t, "http://"+b2.Addr(), body(item{"qf", "P", "from broker 2", "T2"}))
	s := openStore(t, url)
	testenv.WaitFor(t, 20*time.Second, "broker 1 drains", func() bool { return b1.Projector.Backlog() == 0 })
	msgs := readPartition(t, s, "qf", "P")
	got := fmt.Sprint(txids(msgs))
	if res[0].Status == Q {
		if got != "[T0 T2 T1 T3]" {
			t.Fatalf("partition holds %s, want [T0 T2 T1 T3]", got)
		}
	} else if got != "[T0 T1 T2 T3]" { // broker 1 won the race after all
		t.Fatalf("partition holds %s (broker 2: %s)", got, res[0].Status)
	}
}

// TestBrokerKill9UnderLoad kills the broker process with SIGKILL under
// load (PostgreSQL down for part of it, so the WAL holds a backlog); on
// restart every item answered queued or buffered is stored exactly once.
func TestBrokerKill9UnderLoad(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	walDir := t.TempDir()
	port := freePort(t)
	p := startProc(t, url, walDir, port)
	l := &load{queue: "k9", partitions: 5, perPush: 10, producers: 4, bases: []string{p.base}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, t); close(done) }()
	time.Sleep(1500 * time.Millisecond)
	if err := c.Stop(context.Background(), "fast"); err != nil { // build a buffered backlog
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	p.kill9(t)
	cancel()
	<-done
	t.Logf("verdicts before kill %v", l.counts())
	p2 := startProc(t, url, walDir, port)
	msgs := l.verify(t, openStore(t, url), 60*time.Second)
	t.Logf("stored %d", len(msgs))
	p2.term(t)
}

// TestCaseP15TornWALTail: three buffered items, SIGKILL, the newest WAL
// segment cut in the middle of its last record, restart with PostgreSQL up:
// the broker starts, logs the cut, stores the complete records exactly once
// and accepts new pushes.
func TestCaseP15TornWALTail(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	walDir := t.TempDir()
	port := freePort(t)
	p := startProc(t, url, walDir, port)
	wantStatuses(t, push(t, p.base, body(item{"qt", "P", 0, "T0"})), Q)
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		wantStatuses(t, push(t, p.base, body(item{"qt", "P", i, fmt.Sprintf("T%d", i)})), B)
	}
	p.kill9(t)
	segs, _ := filepath.Glob(filepath.Join(walDir, "wal", strings.Repeat("[0-9]", 20)))
	sort.Strings(segs)
	newest := segs[len(segs)-1]
	// The killed broker's newest segment ends in zero padding (wal/doc.go,
	// "Preallocation"): its records end Padding bytes before the file does.
	reps, ok, err := wal.Verify(filepath.Dir(newest))
	if err != nil || !ok || len(reps) == 0 || reps[len(reps)-1].Name != filepath.Base(newest) {
		t.Fatalf("wal.Verify before the cut: %+v, ok %t, %v", reps, ok, err)
	}
	end := reps[len(reps)-1].Bytes - reps[len(reps)-1].Padding
	// The last record is the T3 push (well over 20 bytes): cut 10 bytes into
	// its end.
	if err := os.Truncate(newest, end-10); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(brokerBinary(t), "wal", "verify", filepath.Join(walDir, "wal")).CombinedOutput(); err == nil {
		t.Fatalf("wal verify passed a torn segment:\n%s", out)
	} else if !strings.Contains(string(out), "PROBLEM") {
		t.Fatalf("wal verify did not name the problem:\n%s", out)
	}
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2 := startProc(t, url, walDir, port)
	s := openStore(t, url)
	testenv.WaitFor(t, 20*time.Second, "T2 stored", func() bool { return len(readPartition(t, s, "qt", "P")) >= 3 })
	wantStatuses(t, push(t, p2.base, body(item{"qt", "P", 4, "T4"})), Q)
	if got := fmt.Sprint(txids(readPartition(t, s, "qt", "P"))); got != "[T0 T1 T2 T4]" {
		t.Fatalf("partition holds %s, want [T0 T1 T2 T4]", got)
	}
	if !strings.Contains(p2.logs(), "repaired log") {
		t.Errorf("the cut was not logged:\n%s", p2.logs())
	}
	ev, _ := filepath.Glob(filepath.Join(walDir, "wal", "cut", "*.bin"))
	if len(ev) != 1 {
		t.Errorf("evidence files: %v", ev)
	}
	p2.term(t)
	if out, err := exec.Command(brokerBinary(t), "wal", "verify", walDir).CombinedOutput(); err != nil { // the broker directory
		t.Fatalf("wal verify after repair: %v\n%s", err, out)
	}
}

// TestDiskFull fills the WAL's (small tmpfs) disk: pushes answer failed,
// never buffered; the broker stays up; nothing failed is stored; once space
// is freed, pushes work again. In maintenance mode the WAL failure is a 500.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	s := setup(t, func(cfg *broker.Config) {
		cfg.WALDir = dir
		cfg.WAL.SegmentSize = 64 << 10
	})
	wantStatuses(t, push(t, s.base, body(item{"qd", "P", 0, "T0"})), Q)
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	// Larger than the tail segment's zero padding (64 KiB + 64 KiB): the
	// padding's blocks are reserved, so a push that fits in it is still
	// stored on a full disk; this one must extend the file.
	big := strings.Repeat("x", 200<<10)
	res := push(t, s.base, body(item{"qd", "P", big, "TF1"}, item{"qd", "P", 1, "TF2"}))
	wantStatuses(t, res, F, F)
	for _, r := range res {
		if !strings.Contains(r.Error, "no space left on device") {
			t.Fatalf("failed verdict with error %q, want the write's ENOSPC", r.Error)
		}
	}
	if code := healthCode(t, s.base); code != http.StatusOK {
		t.Fatalf("broker unhealthy after a full disk: %d", code)
	}
	setMaintenance(t, s.base, true)
	code, rb := post(t, s.base, "/api/v1/push", body(item{"qd", "P", big, "TF3"}))
	if code != http.StatusInternalServerError {
		t.Fatalf("maintenance push on a full disk: %d %s, want 500", code, rb)
	}
	setMaintenance(t, s.base, false)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, push(t, s.base, body(item{"qd", "P", 2, "T2"})), Q)
	if got := fmt.Sprint(txids(readPartition(t, s.store, "qd", "P"))); got != "[T0 T2]" {
		t.Fatalf("partition holds %s, want [T0 T2]", got)
	}
}

// TestTwoBrokersOnePartition: two brokers (own WALs, one database) push
// into the same partitions concurrently: dense offsets, each producer's
// order kept, dedup across brokers, nothing lost.
func TestTwoBrokersOnePartition(t *testing.T) {
	t.Parallel()
	twoBrokersOnePartition(t, false)
}

// TestTwoBrokersOnePartitionUUIDv7Keys: the same with UUIDv7 keys, which
// both brokers keep under the same ticks: each broker's one-round-trip
// batches meet the other's rows of those ticks.
func TestTwoBrokersOnePartitionUUIDv7Keys(t *testing.T) {
	t.Parallel()
	twoBrokersOnePartition(t, true)
}

func twoBrokersOnePartition(t *testing.T, uuid7 bool) {
	url := testenv.NewDatabase(t)
	b1 := testenv.StartBroker(t, url, "", nil)
	b2 := testenv.StartBroker(t, url, "", nil)
	l := &load{queue: "two", partitions: 2, perPush: 5, producers: 6,
		bases: []string{"http://" + b1.Addr(), "http://" + b2.Addr()}, uuid7: uuid7}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l.run(ctx, t)
	s := openStore(t, url)
	msgs := l.verify(t, s, 30*time.Second)
	next := map[string]int64{}
	for _, m := range msgs {
		if m.Offset != next[m.Partition] {
			t.Fatalf("partition %s: offset %d, want %d", m.Partition, m.Offset, next[m.Partition])
		}
		next[m.Partition]++
	}
	// The same key through the other broker is a duplicate of the original.
	cross := "cross"
	if uuid7 {
		cross = uuid7TxID(999, 0, time.Now())
	}
	r1 := push(t, "http://"+b1.Addr(), body(item{"two", "p0", 1, cross}))
	r2 := push(t, "http://"+b2.Addr(), body(item{"two", "p0", 2, cross}))
	wantStatuses(t, r2, D)
	if r2[0].MessageID != r1[0].MessageID {
		t.Fatalf("cross-broker duplicate names %s, want %s", r2[0].MessageID, r1[0].MessageID)
	}
	// A key of the load, whichever broker stored it, through both.
	m := msgs[len(msgs)/2]
	for _, b := range []string{b1.Addr(), b2.Addr()} {
		r := push(t, "http://"+b, body(item{"two", m.Partition, 3, m.TransactionID}))
		wantStatuses(t, r, D)
		if r[0].MessageID != m.ID.String() {
			t.Fatalf("repeat of %s through %s names %s, want %s", m.TransactionID, b, r[0].MessageID, m.ID)
		}
	}
}

// TestGracefulShutdown: SIGTERM while pushes are in flight: the broker
// exits cleanly and every answered item is stored after a restart.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabase(t)
	walDir := t.TempDir()
	port := freePort(t)
	p := startProc(t, url, walDir, port)
	l := &load{queue: "term", partitions: 3, perPush: 10, producers: 4, bases: []string{p.base}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, t); close(done) }()
	time.Sleep(time.Second)
	p.term(t)
	cancel()
	<-done
	p2 := startProc(t, url, walDir, port)
	l.verify(t, openStore(t, url), 30*time.Second)
	p2.term(t)
}
