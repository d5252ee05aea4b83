package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// status does one request and returns its status and body, or the
// transport error (safe to call from any goroutine, unlike t.Fatal).
func status(method, u string) (int, string, error) { return request(method, u, "") }

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

// TestFaultPausedDatabaseAnswers503: PostgreSQL frozen (SIGSTOP to the
// postmaster and every backend: connections stay open and nothing
// answers, as on a hung host), not crashed. Requests that touch PostgreSQL
// must answer within their deadline: a pop without wait, an ack and a
// lease extension answer 503 "database unavailable" within
// Config.DBTimeout plus slack (this used to hang ~26 s), more of them at
// once than the pool has connections included; a waiting pop answers 204
// by its timeout. After SIGCONT the broker serves again.
func TestFaultPausedDatabaseAnswers503(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	const dbTimeout = 2 * time.Second
	const slack = 1500 * time.Millisecond
	b := testenv.StartBroker(t, url, "", func(cfg *broker.Config) { cfg.HTTP.DBTimeout = dbTimeout })
	base := "http://" + b.Addr()
	pushN(t, base, "paused", "p", 0, 4)
	code, held := pop(t, base, popPath("paused", "p"), "")
	if code != http.StatusOK || len(held.Messages) != 1 {
		t.Fatalf("pop before the pause: %d %+v", code, held)
	}
	t.Cleanup(func() { _ = c.Resume() }) // before Destroy, which cannot stop a stopped server
	if err := c.Pause(); err != nil {
		t.Fatalf("pause PostgreSQL: %v", err)
	}
	type req struct {
		name, method, path, body string
		want                     int
		within                   time.Duration
	}
	m := held.Messages[0]
	ackBody := fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`, m.TransactionID, m.PartitionID, m.LeaseID)
	reqs := []req{
		{"pop without wait", http.MethodGet, popPath("paused", "p"), "", http.StatusServiceUnavailable, dbTimeout},
		{"wildcard pop without wait", http.MethodGet, popPath("paused", "") + "?consumerGroup=g", "", http.StatusServiceUnavailable, dbTimeout},
		{"ack", http.MethodPost, "/api/v1/ack", ackBody, http.StatusServiceUnavailable, dbTimeout},
		{"lease extend", http.MethodPost, "/api/v1/lease/" + m.LeaseID + "/extend", `{"seconds":30}`, http.StatusServiceUnavailable, dbTimeout},
		{"waiting pop", http.MethodGet, popPath("paused", "p") + "?wait=true&timeout=1500", "", http.StatusNoContent, 1500*time.Millisecond + time.Second},
	}
	// Each request alone, then 14 pops without wait at once (more than the
	// pool's 10 connections: acquiring one must be bounded too).
	for _, r := range reqs {
		start := time.Now()
		code, b, err := request(r.method, base+r.path, r.body)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		t.Logf("%s while PostgreSQL is paused: %d after %v", r.name, code, took.Round(time.Millisecond))
		if code != r.want || took > r.within+slack {
			t.Errorf("%s while PostgreSQL is paused: %d %s after %v, want %d within %v", r.name, code, b, took.Round(time.Millisecond), r.want, r.within+slack)
		}
		if r.want == http.StatusServiceUnavailable && !strings.Contains(b, "database unavailable") {
			t.Errorf("%s: body %s, want database unavailable", r.name, b)
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 14 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b, err := request(http.MethodGet, base+popPath("paused", "")+fmt.Sprintf("?consumerGroup=c%d", i), "")
			if took := time.Since(start); err != nil || code != http.StatusServiceUnavailable || took > dbTimeout+slack {
				t.Errorf("concurrent pop %d: %d %s %v after %v", i, code, b, err, took.Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	if err := c.Resume(); err != nil {
		t.Fatalf("resume PostgreSQL: %v", err)
	}
	testenv.WaitFor(t, 30*time.Second, "pops deliver again after SIGCONT", func() bool {
		code, _, err := request(http.MethodGet, base+popPath("paused", "p")+"?consumerGroup=after", "")
		return err == nil && code == http.StatusOK
	})
}

// request is status with a body.
func request(method, u, body string) (int, string, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := testenv.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
