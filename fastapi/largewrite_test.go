package fastapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

type countingTransactor struct{ calls atomic.Int32 }

func (c *countingTransactor) Transaction(_ context.Context, _ []pg.ProjectItem, acks []pg.AckRequest) (*pg.TxResult, error) {
	c.calls.Add(1)
	res := &pg.TxResult{Acks: make([]pg.AckResult, len(acks))}
	for i := range res.Acks {
		res.Acks[i].Success = true
	}
	return res, nil
}

type countingAcker struct {
	Consumer
	calls atomic.Int32
}

func (c *countingAcker) Ack(_ context.Context, reqs []pg.AckRequest) ([]pg.AckResult, error) {
	c.calls.Add(1)
	return make([]pg.AckResult, len(reqs)), nil
}

// TestLargeWritesTakeHeavyTurns: with every heavy-write turn held (stream
// cycles, seeks), a transaction or ack/batch whose body is over
// largeWriteBodyBytes, and an ack/batch of more than maxAckBatchRuns
// cursors, wait for a turn and are answered 503 busy, touching nothing; a
// small transaction and a small ack/batch of one pop's acks run at once,
// and a large one runs, its turn given back, once a turn is free.
// Before, any number of 10,000-operation transactions or ack batches ran
// at once (24 MB of broker memory each).
func TestLargeWritesTakeHeavyTurns(t *testing.T) {
	t.Parallel()
	tx, acker := &countingTransactor{}, &countingAcker{}
	d := fullDeps()
	d.Transactor, d.Consumer = tx, acker
	s, err := New(Config{}, d)
	if err != nil {
		t.Fatal(err)
	}
	s.listingWait = 50 * time.Millisecond
	for range cap(s.heavyWriteTurns) {
		s.heavyWriteTurns <- struct{}{} // every turn held
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { _ = s.srv.Shutdown() })
	base := "http://" + ln.Addr().String()
	post := func(path string, body any) (int, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		if len(rb) > 200 {
			rb = append(rb[:200], "…"...)
		}
		return resp.StatusCode, string(rb)
	}
	acks := func(n int, onePartition bool) []map[string]any {
		out := make([]map[string]any, n)
		pid := uuid.NewString()
		for i := range out {
			if !onePartition {
				pid = uuid.NewString()
			}
			out[i] = map[string]any{"transactionId": uuid.NewString(), "partitionId": pid, "status": "failed", "error": strings.Repeat("e", 100)}
		}
		return out
	}
	ops := func(a []map[string]any) []map[string]any {
		for _, m := range a {
			m["type"] = "ack"
		}
		return a
	}
	busy := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "large transactions and ack batches") {
			t.Errorf("%s with the heavy turns held: %d %s, want 503 busy", what, code, body)
		}
	}
	code, body := post("/api/v1/transaction", map[string]any{"operations": ops(acks(2000, false))})
	busy("transaction of 2,000 acks", code, body)
	code, body = post("/api/v1/ack/batch", map[string]any{"acknowledgments": acks(maxAckBatchRuns+1, false)})
	busy("ack/batch of 101 partitions", code, body)
	code, body = post("/api/v1/ack/batch", map[string]any{"acknowledgments": acks(5000, true)})
	busy("ack/batch of 5,000 acks (950 KB)", code, body)
	if tx.calls.Load() != 0 || acker.calls.Load() != 0 {
		t.Fatalf("refused writes reached the store: %d transactions, %d ack batches", tx.calls.Load(), acker.calls.Load())
	}
	if code, body = post("/api/v1/transaction", map[string]any{"operations": ops(acks(10, false))}); code != http.StatusOK {
		t.Errorf("small transaction: %d %s, want 200 at once", code, body)
	}
	if code, body = post("/api/v1/ack/batch", map[string]any{"acknowledgments": acks(1000, true)}); code != http.StatusOK {
		t.Errorf("ack/batch of 1,000 acks of one partition: %d %s, want 200 at once", code, body)
	}
	if code, body = post("/api/v1/ack/batch", map[string]any{"acknowledgments": acks(maxAckBatchRuns, false)}); code != http.StatusOK {
		t.Errorf("ack/batch of 100 partitions: %d %s, want 200 at once", code, body)
	}
	<-s.heavyWriteTurns // one turn free: a large transaction runs
	if code, body = post("/api/v1/transaction", map[string]any{"operations": ops(acks(2000, false))}); code != http.StatusOK {
		t.Errorf("transaction of 2,000 acks with a turn free: %d %s, want 200", code, body)
	}
	if code, body = post("/api/v1/ack/batch", map[string]any{"acknowledgments": acks(5000, false)}); code != http.StatusOK {
		t.Errorf("ack/batch of 5,000 partitions with a turn free: %d %s, want 200", code, body)
	}
	if got := len(s.heavyWriteTurns); got != cap(s.heavyWriteTurns)-1 {
		t.Errorf("%d turns held after the large writes, want %d (their turns given back)", got, cap(s.heavyWriteTurns)-1)
	}
}
