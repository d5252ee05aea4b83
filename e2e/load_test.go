package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// load pushes unique transactionIds ("<producer>-<seq>") from several
// producers and records every verdict, for the durability tests.
type load struct {
	queue      string
	partitions int
	perPush    int
	producers  int
	// interval between pushes of one producer (0 = as fast as possible).
	interval time.Duration
	// retry resends a request whose answer never came (transport error)
	// until it gets one, as P14b's clients do.
	retry bool
	// bases are broker URLs; producer p uses bases[p % len(bases)].
	bases []string
	// uuid7 sends each item's transactionId as Queen's SDKs mint it, the
	// lowercase text of a UUIDv7 made as the push is built (uuid7TxID),
	// kept through the push's retries; otherwise "<producer>-<seq>".
	uuid7 bool

	mu       sync.Mutex
	verdicts map[string]ingest.Status // txid → last verdict
	noAnswer int                      // requests that never got an answer
	requests int
	maxDur   time.Duration
}

func (l *load) run(ctx context.Context, t testing.TB) {
	l.mu.Lock() // counts may be read while the load runs
	l.verdicts = make(map[string]ingest.Status)
	l.mu.Unlock()
	client := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	for p := 0; p < l.producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			base := l.bases[p%len(l.bases)]
			seq := 0
			for ctx.Err() == nil {
				var items []item
				mintedAt := time.Now()
				for k := 0; k < l.perPush; k++ {
					part := fmt.Sprintf("p%d", (p+seq)%l.partitions)
					txid := fmt.Sprintf("%d-%d", p, seq)
					if l.uuid7 {
						txid = uuid7TxID(p, seq, mintedAt)
					}
					items = append(items, item{l.queue, part, map[string]int{"p": p, "s": seq}, txid})
					seq++
				}
				b := body(items...)
				for {
					start := time.Now()
					res, err := pushOnce(client, base, b)
					d := time.Since(start)
					l.mu.Lock()
					l.requests++
					if d > l.maxDur {
						l.maxDur = d
					}
					if err != nil {
						l.noAnswer++
					} else {
						for i, r := range res {
							l.verdicts[items[i].TransactionID] = r.Status
						}
					}
					l.mu.Unlock()
					if err == nil || !l.retry || ctx.Err() != nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if l.interval > 0 {
					select {
					case <-time.After(l.interval):
					case <-ctx.Done():
					}
				}
			}
		}(p)
	}
	wg.Wait()
}

func pushOnce(c *http.Client, base string, b []byte) ([]ingest.Result, error) {
	resp, err := c.Post(base+"/api/v1/push", "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, rb)
	}
	var res []ingest.Result
	if err := json.Unmarshal(rb, &res); err != nil {
		return nil, err
	}
	return res, nil
}

func (l *load) counts() map[ingest.Status]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := map[ingest.Status]int{}
	for _, s := range l.verdicts {
		c[s]++
	}
	return c
}

// mustBeStored lists the txids answered queued or buffered (or duplicate,
// which after a retry means an earlier attempt stored it).
func (l *load) mustBeStored() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for id, s := range l.verdicts {
		if s == ingest.StatusQueued || s == ingest.StatusBuffered || s == ingest.StatusDuplicate {
			out[id] = true
		}
	}
	return out
}

// verify waits until every item that must be stored is, then checks each
// is stored exactly once, failed items are absent, and each producer's
// items appear in send order in every partition.
func (l *load) verify(t testing.TB, s *pg.Store, timeout time.Duration) []pg.StoredMessage {
	t.Helper()
	want := l.mustBeStored()
	var msgs []pg.StoredMessage
	deadline := time.Now().Add(timeout)
	for {
		msgs = readQueue(t, s, l.queue)
		have := map[string]bool{}
		for _, m := range msgs {
			have[m.TransactionID] = true
		}
		missing := 0
		for id := range want {
			if !have[id] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged items never reached PostgreSQL", missing, len(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
	seen := map[string]int{}
	lastSeq := map[string]int{} // partition/producer → seq
	for _, m := range msgs {
		seen[m.TransactionID]++
		p, seq := splitTx(t, m.TransactionID)
		k := m.Partition + "/" + strconv.Itoa(p)
		if prev, ok := lastSeq[k]; ok && seq <= prev {
			t.Errorf("partition %s: producer %d seq %d stored after %d", m.Partition, p, seq, prev)
		}
		lastSeq[k] = seq
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s stored %d times", id, n)
		}
	}
	l.mu.Lock()
	for id, st := range l.verdicts {
		if st == ingest.StatusFailed && seen[id] > 0 {
			t.Errorf("%s answered failed but stored", id)
		}
	}
	l.mu.Unlock()
	return msgs
}

// uuid7TxID is item seq of producer p's transactionId in the UUIDv7 form:
// version 7, time at, the producer in bytes 10-11 and seq in bytes 12-15
// of its random bits (so that splitTx reads them back).
func uuid7TxID(p, seq int, at time.Time) string {
	var u uuid.UUID
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[8] = 0x70, 0x80
	u[10], u[11] = byte(p>>8), byte(p)
	u[12], u[13], u[14], u[15] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	return u.String()
}

func splitTx(t testing.TB, id string) (int, int) {
	if u, err := uuid.Parse(id); err == nil && u.Version() == 7 && u.String() == id {
		return int(u[10])<<8 | int(u[11]), int(u[12])<<24 | int(u[13])<<16 | int(u[14])<<8 | int(u[15])
	}
	a, b, ok := strings.Cut(id, "-")
	p, err1 := strconv.Atoi(a)
	s, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("unexpected transactionId %q", id)
	}
	return p, s
}
