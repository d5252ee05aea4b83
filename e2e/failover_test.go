package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// TestFailoverToPromotedStandby is the failover of docs/failover.md, for
// real: a primary with an asynchronous streaming standby, the broker given
// both hosts with target_session_attrs=read-write, producers pushing
// throughout and a consumer group consuming throughout. The primary's WAL
// senders are paused (SIGSTOP) for 3 s while the broker keeps committing,
// so the standby falls behind what the broker was told was committed; the
// primary is then SIGKILLed and the standby promoted. The broker, without
// a restart, logs that the database checkpoint is behind its WAL and
// re-projects the records the standby never received. Afterwards every
// item answered queued or buffered is stored exactly once, in send order,
// at dense offsets per partition; a new consumer group pops each exactly
// once; the live consumer group got every message at least once.
func TestFailoverToPromotedStandby(t *testing.T) {
	t.Parallel()
	primary, standby, dsn := testenv.OwnStandbyPair(t)
	logs := &logRecorder{}
	b := testenv.StartBroker(t, dsn, "", func(cfg *broker.Config) {
		cfg.Logger = slog.New(logs.wrap(testenv.Logger.Handler()))
	})
	base := "http://" + b.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const queue, partitions = "fo", 6
	configure(t, base, queue, map[string]any{"leaseTime": 5}) // a lease the standby kept, whose ack it lost, expires soon
	l := &load{queue: queue, partitions: partitions, perPush: 10, producers: 4, interval: 5 * time.Millisecond,
		retry: true, bases: []string{base}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() { l.run(loadCtx, t); close(loadDone) }()
	live := &liveConsumer{base: base, queue: queue, group: "live", seen: map[string]int{}}
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	consumeDone := make(chan struct{})
	go func() { live.run(consumeCtx); close(consumeDone) }()

	// Replicated phase: the queue, its partitions and a first thousand
	// messages are committed on the primary and replayed by the standby.
	testenv.WaitFor(t, 30*time.Second, "1000 queued items", func() bool { return l.counts()[Q] >= 1000 })
	replicated := b.Projector.Checkpoint()
	if err := primary.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	// Lag: the standby receives nothing more while the broker keeps
	// committing on the primary. A queue created now exists only there.
	resume, err := primary.PauseWALSenders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	pausedAt := b.Projector.Checkpoint()
	wantStatuses(t, push(t, base, body(item{"fo-late", "new", "created during the lag", "late-1"})), Q)
	testenv.WaitFor(t, 20*time.Second, "commits during the lag", func() bool {
		return time.Since(paused) >= 3*time.Second && b.Projector.Checkpoint() >= pausedAt+100
	})
	lastKnown := b.Projector.Checkpoint()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = resume() // the WAL senders are gone with the primary; nothing to continue
	queuedAtKill := l.counts()[Q]
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint %d replicated, %d at the pause, %d at the kill", replicated, pausedAt, lastKnown)

	// The broker finds the promoted standby by itself and re-projects.
	var warn *slog.Record
	testenv.WaitFor(t, 30*time.Second, "the re-projection warning", func() bool {
		warn = logs.find("database checkpoint ")
		return warn != nil
	})
	attrs := map[string]uint64{}
	warn.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Uint64()
		return true
	})
	n, m, k := attrs["database_checkpoint"], attrs["wal_checkpoint"], attrs["records"]
	if want := fmt.Sprintf("database checkpoint %d is behind the WAL's %d: re-projecting %d records", n, m, k); warn.Level != slog.LevelWarn || warn.Message != want {
		t.Errorf("logged %s %q, want WARN %q", warn.Level, warn.Message, want)
	}
	if n < replicated || n >= pausedAt+100 || m < lastKnown || k != m-n {
		t.Errorf("warning says database checkpoint %d, WAL's %d, %d records; the standby had replayed %d, the lag began at %d and the broker knew %d committed at the kill",
			n, m, k, replicated, pausedAt, lastKnown)
	}
	t.Logf("logged: %s", warn.Message)
	// Pushes are queued again, now on the promoted standby.
	testenv.WaitFor(t, 30*time.Second, "queued items after the promotion", func() bool { return l.counts()[Q] >= queuedAtKill+200 })
	stopLoad()
	<-loadDone

	counts := l.counts()
	t.Logf("verdicts %v, requests %d, unanswered attempts %d", counts, l.requests, l.noAnswer)
	if counts[ingest.StatusFailed] != 0 {
		t.Errorf("%d items answered failed", counts[ingest.StatusFailed])
	}
	store := openStore(t, dsn)
	msgs := l.verify(t, store, 60*time.Second) // exactly once, in send order
	next := map[string]int64{}
	for _, msg := range msgs {
		if msg.Offset != next[msg.Partition] {
			t.Fatalf("partition %s: offset %d, want %d", msg.Partition, msg.Offset, next[msg.Partition])
		}
		next[msg.Partition]++
	}
	if late := readQueue(t, store, "fo-late"); len(late) != 1 || late[0].TransactionID != "late-1" || late[0].Offset != 0 {
		t.Errorf("the queue created during the lag holds %v, want [late-1] at offset 0", txids(late))
	}

	// A consumer group that starts now pops every message exactly once.
	stored := map[string]bool{}
	for _, msg := range msgs {
		stored[msg.TransactionID] = true
	}
	drained := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for empty := 0; empty < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("drain: %d of %d messages popped before the deadline", len(drained), len(stored))
		}
		code, r := pop(t, base, popPath(queue, ""), "consumerGroup=drain&batch=500&autoAck=true")
		switch code {
		case http.StatusOK:
			empty = 0
			for _, msg := range r.Messages {
				drained[msg.TransactionID]++
			}
		case http.StatusNoContent:
			if len(drained) >= len(stored) {
				empty++
			}
		default:
			t.Fatalf("drain pop: status %d", code)
		}
	}
	for id, n := range drained {
		if n != 1 || !stored[id] {
			t.Errorf("drain: %s popped %d times (stored: %v)", id, n, stored[id])
		}
	}
	if len(drained) != len(stored) {
		t.Errorf("drain popped %d distinct messages, %d are stored", len(drained), len(stored))
	}

	// The live group: every message at least once; a repeat is only a
	// message whose ack the standby never received.
	testenv.WaitFor(t, 30*time.Second, "the live consumer group catches up", func() bool { return live.distinct() >= len(stored) })
	stopConsume()
	<-consumeDone
	live.mu.Lock()
	again := 0
	for id := range stored {
		switch n := live.seen[id]; {
		case n == 0:
			t.Errorf("live group never got %s", id)
		case n > 1:
			again++
		}
	}
	t.Logf("stored %d; live group got %d again after the failover (acks the standby never received)", len(stored), again)
	live.mu.Unlock()
}

// liveConsumer pops a queue in a loop for its consumer group and acks what
// it got, riding out a database that is away (errors and 503s are retried),
// and counts each transactionId it received.
type liveConsumer struct {
	base, queue, group string

	mu   sync.Mutex
	seen map[string]int
}

func (c *liveConsumer) run(ctx context.Context) {
	client := &http.Client{Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		msgs, err := c.popOnce(ctx, client)
		if err != nil || len(msgs) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		c.mu.Lock()
		for _, m := range msgs {
			c.seen[m.TransactionID]++
		}
		c.mu.Unlock()
		var acks []map[string]any
		for _, m := range msgs {
			acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
				"leaseId": m.LeaseID, "status": "completed"})
		}
		b, _ := json.Marshal(map[string]any{"acknowledgments": acks, "consumerGroup": c.group})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/v1/ack/batch", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		// An ack that failed leaves the lease to expire: a redelivery the
		// at-least-once check allows.
	}
}

func (c *liveConsumer) popOnce(ctx context.Context, client *http.Client) ([]popMsg, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
		c.base+popPath(c.queue, "")+"?consumerGroup="+c.group+"&batch=50&wait=true&timeout=500", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, err
	}
	var r popResp
	if err := json.Unmarshal(rb, &r); err != nil {
		return nil, err
	}
	return r.Messages, nil
}

func (c *liveConsumer) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// logRecorder keeps the records a broker logs (at the levels its handler
// lets through) beside writing them as usual.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) wrap(h slog.Handler) slog.Handler { return recordingHandler{h, r} }

// find returns the first record whose message starts with prefix, or nil.
func (r *logRecorder) find(prefix string) *slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.records {
		if strings.HasPrefix(r.records[i].Message, prefix) {
			rec := r.records[i].Clone()
			return &rec
		}
	}
	return nil
}

type recordingHandler struct {
	slog.Handler
	rec *logRecorder
}

func (h recordingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.rec.mu.Lock()
	h.rec.records = append(h.rec.records, r.Clone())
	h.rec.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordingHandler{h.Handler.WithAttrs(as), h.rec}
}

func (h recordingHandler) WithGroup(name string) slog.Handler {
	return recordingHandler{h.Handler.WithGroup(name), h.rec}
}
