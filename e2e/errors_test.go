package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/testenv"
)

// status does one request and returns its status and body, or the
// transport error (safe to call from any goroutine, unlike t.Fatal).
func status(method, u string) (int, string, error) {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := testenv.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestPopRacingQueueDelete: pops (and an ack to the DLQ) racing a delete of their queue, with
// PostgreSQL healthy, never answer 5xx (Queen's JS consumer stops its
// workers on any 5xx). The race used to end in a foreign-key violation
// (SQLSTATE 23503) on the consumer group or cursor insert of a pop whose
// queue had just been deleted, answered 503 "database unavailable". A pop
// of a queue that vanished answers as a pop of an unknown queue: 204, or
// 200 when it delivered before the delete. Each round makes the queue
// anew, so every pop creates its group's subscription and cursor: the
// inserts that met the deleted rows; the ack's dead-letter insert can meet
// them too.
func TestPopRacingQueueDelete(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const rounds = 60
	bad := map[string]int{}
	var mu sync.Mutex
	for round := range rounds {
		q := "race"
		pushN(t, s.base, q, "p", 0, 2)
		code, held := pop(t, s.base, popPath(q, "p"), fmt.Sprintf("consumerGroup=d%d", round))
		if code != http.StatusOK || len(held.Messages) != 1 {
			t.Fatalf("round %d: pop to hold a lease: %d %+v", round, code, held)
		}
		ackBody, _ := json.Marshal(map[string]any{"transactionId": held.Messages[0].TransactionID,
			"partitionId": held.Messages[0].PartitionID, "leaseId": held.Messages[0].LeaseID,
			"status": "dlq", "consumerGroup": fmt.Sprintf("d%d", round)})
		pops := []string{
			s.base + popPath(q, ""),
			s.base + popPath(q, "p"),
			s.base + popPath(q, "") + fmt.Sprintf("?consumerGroup=g%d", round),
			s.base + popPath(q, "p") + fmt.Sprintf("?consumerGroup=h%d&subscriptionMode=new", round),
			s.base + popPath(q, "") + fmt.Sprintf("?consumerGroup=k%d&autoAck=true&batch=2", round),
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, u := range pops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				code, b, err := status(http.MethodGet, u)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					bad["GET error: "+err.Error()]++
				case code >= 500:
					bad[fmt.Sprintf("GET %d %s", code, b)]++
				case code != http.StatusOK && code != http.StatusNoContent:
					bad[fmt.Sprintf("GET %d %s", code, b)]++
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := testenv.Client.Post(s.base+"/api/v1/ack", "application/json", bytes.NewReader(ackBody))
			if err != nil {
				mu.Lock()
				bad["ack error: "+err.Error()]++
				mu.Unlock()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				mu.Lock()
				bad[fmt.Sprintf("ack %d %s", resp.StatusCode, b)]++
				mu.Unlock()
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			code, b, err := status(http.MethodDelete, s.base+"/api/v1/resources/queues/"+q)
			if err != nil || code >= 300 {
				mu.Lock()
				bad[fmt.Sprintf("DELETE %d %s %v", code, b, err)]++
				mu.Unlock()
			}
		}()
		close(start)
		wg.Wait()
		if len(bad) > 0 {
			break // the queue may not have been deleted: the next round's pushes would be duplicates
		}
	}
	for what, n := range bad {
		t.Errorf("%d× %s", n, what)
	}
	// The broker still serves the queue once it is made again.
	pushN(t, s.base, "race", "p", 0, 0)
	if code, r := pop(t, s.base, popPath("race", "p"), ""); code != http.StatusOK || len(r.Messages) != 1 {
		t.Fatalf("pop after the churn: %d %+v", code, r)
	}
}
