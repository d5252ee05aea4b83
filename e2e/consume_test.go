package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

type popMsg struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	Offset        int64           `json:"offset"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
}

type popResp struct {
	Success           bool     `json:"success"`
	Queue             string   `json:"queue"`
	Partition         string   `json:"partition"`
	PartitionID       string   `json:"partitionId"`
	LeaseID           string   `json:"leaseId"`
	ConsumerGroup     string   `json:"consumerGroup"`
	PartitionsClaimed int      `json:"partitionsClaimed"`
	Messages          []popMsg `json:"messages"`
	raw               []byte
}

// pop GETs a pop path (already escaped) with query and returns the status
// and the decoded body (zero on 204).
func pop(t testing.TB, base, path, query string) (int, popResp) {
	t.Helper()
	u := base + path
	if query != "" {
		u += "?" + query
	}
	resp, err := testenv.Client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r popResp
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("pop body %s: %v", b, err)
		}
		r.raw = b
	}
	return resp.StatusCode, r
}

func popPath(queue, partition string) string {
	p := "/api/v1/pop/queue/" + url.PathEscape(queue)
	if partition != "" {
		p += "/partition/" + url.PathEscape(partition)
	}
	return p
}

type ackResp struct {
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

func ack(t testing.TB, base string, m popMsg, status, group string) ackResp {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
		"leaseId": m.LeaseID, "status": status, "consumerGroup": group})
	code, rb := post(t, base, "/api/v1/ack", b)
	var res []ackResp
	if code != http.StatusOK || json.Unmarshal(rb, &res) != nil || len(res) != 1 {
		t.Fatalf("ack: %d %s", code, rb)
	}
	return res[0]
}

func pushN(t testing.TB, base, queue, partition string, from, to int) {
	t.Helper()
	var items []item
	for i := from; i <= to; i++ {
		items = append(items, item{queue, partition, map[string]int{"n": i}, fmt.Sprintf("m-%d", i)})
	}
	for _, r := range push(t, base, body(items...)) {
		if r.Status != Q {
			t.Fatalf("push: %s", r.Status)
		}
	}
}

func TestCaseC01AutoAckNeverRedelivers(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "qa", map[string]any{"leaseTime": 1})
	for _, batch := range []int{1, 5} {
		group := fmt.Sprintf("g%d", batch)
		if batch == 1 {
			pushN(t, s.base, "qa", "P", 1, 20)
		} else {
			pushN(t, s.base, "qa", "P", 21, 40) // the new group g5 reads all 40 from the start
		}
		var got []string
		for i := 0; i < 25; i++ {
			code, r := pop(t, s.base, popPath("qa", "P"), fmt.Sprintf("consumerGroup=%s&batch=%d&autoAck=true", group, batch))
			if code == http.StatusOK {
				for _, m := range r.Messages {
					got = append(got, m.TransactionID)
				}
			}
		}
		want := 20
		if batch == 5 {
			want = 40
		}
		if len(got) != want {
			t.Fatalf("batch %d: got %d messages, want %d", batch, len(got), want)
		}
		for i, id := range got {
			if id != fmt.Sprintf("m-%d", i+1) {
				t.Fatalf("batch %d: message %d is %s", batch, i, id)
			}
		}
		time.Sleep(1500 * time.Millisecond)
		if code, _ := pop(t, s.base, popPath("qa", "P"), "consumerGroup="+group+"&autoAck=true"); code != http.StatusNoContent {
			t.Fatalf("late pop: %d, want 204", code)
		}
	}
}

func TestCaseC02LeasedMessageBlocksPartition(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "qb", map[string]any{"leaseTime": 3, "retryLimit": 2})
	push(t, s.base, body(item{"qb", "A", 1, "M1"}, item{"qb", "A", 2, "M2"}, item{"qb", "A", 3, "M3"}))
	q := "consumerGroup=g1&batch=1"
	code, r := pop(t, s.base, popPath("qb", "A"), q)
	if code != 200 || r.Messages[0].TransactionID != "M1" {
		t.Fatalf("first pop: %d %+v", code, r)
	}
	if code, _ := pop(t, s.base, popPath("qb", "A"), q); code != http.StatusNoContent {
		t.Fatalf("M2 leaked past a leased M1: %d", code)
	}
	time.Sleep(3500 * time.Millisecond)
	code, r2 := pop(t, s.base, popPath("qb", "A"), q)
	if code != 200 || r2.Messages[0].TransactionID != "M1" {
		t.Fatalf("after lease expiry: %d %+v", code, r2)
	}
	// The old lease cannot ack any more.
	if a := ack(t, s.base, r.Messages[0], "completed", "g1"); a.Success {
		t.Fatal("ack under an expired lease succeeded")
	}
	if a := ack(t, s.base, r2.Messages[0], "completed", "g1"); !a.Success {
		t.Fatalf("ack M1: %+v", a)
	}
	// M2: one delivery plus retryLimit (2) redeliveries, failed each time.
	for i := 0; i < 3; i++ {
		code, r := pop(t, s.base, popPath("qb", "A"), q)
		if code != 200 || r.Messages[0].TransactionID != "M2" {
			t.Fatalf("delivery %d of M2: %d %+v", i+1, code, r)
		}
		a := ack(t, s.base, r.Messages[0], "failed", "g1")
		if !a.Success || a.DLQ != (i == 2) {
			t.Fatalf("failed ack %d: %+v", i+1, a)
		}
	}
	code, r = pop(t, s.base, popPath("qb", "A"), q)
	if code != 200 || r.Messages[0].TransactionID != "M3" {
		t.Fatalf("after DLQ: %d %+v", code, r)
	}
	ack(t, s.base, r.Messages[0], "completed", "g1")
	if code, _ := pop(t, s.base, popPath("qb", "A"), q); code != http.StatusNoContent {
		t.Fatalf("M1 came back: %d", code)
	}
	var n int
	if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.dead_letters d
		JOIN queen.partitions p ON p.id = d.partition_id WHERE p.name = 'A' AND d.consumer_group = 'g1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("dead letters: %d %v", n, err)
	}
}

func TestCaseC03SubscriptionModes(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "qc", "P", 1, 10)
	if code, _ := pop(t, s.base, popPath("qc", "P"), "consumerGroup=newbie&subscriptionMode=new&batch=100"); code != http.StatusNoContent {
		t.Fatalf("new group saw history: %d", code)
	}
	pushN(t, s.base, "qc", "P", 11, 11)
	code, r := pop(t, s.base, popPath("qc", "P"), "consumerGroup=newbie&batch=100&autoAck=true")
	if code != 200 || len(r.Messages) != 1 || r.Messages[0].TransactionID != "m-11" {
		t.Fatalf("new group after a push: %d %+v", code, r.Messages)
	}
	code, r = pop(t, s.base, popPath("qc", "P"), "consumerGroup=old&subscriptionFrom=1970-01-01T00:00:00Z&batch=100&autoAck=true")
	if code != 200 || len(r.Messages) != 11 {
		t.Fatalf("timestamp group: %d %d", code, len(r.Messages))
	}
	code, r = pop(t, s.base, popPath("qc", "P"), "consumerGroup=dflt&batch=100&autoAck=true")
	if code != 200 || len(r.Messages) != 11 {
		t.Fatalf("default-mode group: %d %d", code, len(r.Messages))
	}
}

func TestCaseC04LeaseTimeAndMultiPartition(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "qh", map[string]any{"leaseTime": 2})
	push(t, s.base, body(item{"qh", "P", 1, "M1"}))
	if code, _ := pop(t, s.base, popPath("qh", "P"), ""); code != 200 {
		t.Fatal("first pop")
	}
	time.Sleep(3 * time.Second)
	code, r := pop(t, s.base, popPath("qh", "P"), "")
	if code != 200 || r.Messages[0].TransactionID != "M1" {
		t.Fatalf("after 3 s: %d", code)
	}
	// One pop claims two partitions under one lease; extending it moves both.
	configure(t, s.base, "qm", map[string]any{"leaseTime": 2})
	push(t, s.base, body(item{"qm", "A", 1, "a1"}, item{"qm", "B", 2, "b1"}))
	code, r = pop(t, s.base, popPath("qm", ""), "partitions=2&batch=10")
	if code != 200 || r.PartitionsClaimed != 2 || len(r.Messages) != 2 || r.Messages[0].LeaseID != r.Messages[1].LeaseID {
		t.Fatalf("multi-partition pop: %d %s", code, r.raw)
	}
	code, rb := post(t, s.base, "/api/v1/lease/"+r.LeaseID+"/extend", []byte(`{"seconds":30}`))
	if code != 200 || !strings.Contains(string(rb), `"success":true`) {
		t.Fatalf("extend: %d %s", code, rb)
	}
	time.Sleep(2500 * time.Millisecond)
	if code, _ := pop(t, s.base, popPath("qm", ""), "partitions=2&batch=10"); code != http.StatusNoContent {
		t.Fatalf("extended lease lapsed early: %d", code)
	}
	for _, m := range r.Messages {
		if a := ack(t, s.base, m, "completed", ""); !a.Success || !a.LeaseReleased {
			t.Fatalf("ack %s: %+v", m.TransactionID, a)
		}
	}
}

func TestPopPayloadAndNamesRoundTrip(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	names := []string{"with space", "a+b", "sl/ash", "ünï😀"}
	raw := `{"b":1,  "a":2,"a":3,"s":"\u0000"}`
	for _, n := range names {
		bq, _ := json.Marshal(n)
		res := push(t, s.base, []byte(`{"items":[{"queue":`+string(bq)+`,"partition":`+string(bq)+`,"payload":`+raw+`}]}`))
		wantStatuses(t, res, Q)
		code, r := pop(t, s.base, popPath(n, n), "autoAck=true")
		if code != 200 || r.Queue != n || r.Partition != n || len(r.Messages) != 1 {
			t.Fatalf("%q: %d %s", n, code, r.raw)
		}
		if string(r.Messages[0].Data) != raw || !strings.Contains(string(r.raw), `"data":`+raw+`,`) {
			t.Fatalf("%q: data %s, pushed %s", n, r.Messages[0].Data, raw)
		}
		m := r.Messages[0]
		if m.ID != res[0].MessageID || m.TraceID != nil || m.ProducerSub != nil || m.Offset != 0 || m.CreatedAt == "" {
			t.Fatalf("%q: message %+v", n, m)
		}
	}
}

func TestLongPollWokenByPush(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "lp", nil)
	start := time.Now()
	done := make(chan popResp)
	go func() {
		_, r := pop(t, s.base, popPath("lp", ""), "wait=true&timeout=20000&autoAck=true")
		done <- r
	}()
	time.Sleep(500 * time.Millisecond)
	push(t, s.base, body(item{"lp", "P", 1, "w"}))
	r := <-done
	if len(r.Messages) != 1 || time.Since(start) > 3*time.Second {
		t.Fatalf("long poll: %d messages after %v", len(r.Messages), time.Since(start))
	}
	start = time.Now()
	if code, _ := pop(t, s.base, popPath("lp", ""), "wait=true&timeout=300"); code != http.StatusNoContent || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("long poll timeout: %d after %v", code, time.Since(start))
	}
	// A waiting pop behind a live lease is served when the lease lapses,
	// with no event to wake it: it sleeps until the known expiry.
	configure(t, s.base, "lpl", map[string]any{"leaseTime": 2})
	push(t, s.base, body(item{"lpl", "P", 1, "L1"}))
	pop(t, s.base, popPath("lpl", ""), "")
	start = time.Now()
	code, r2 := pop(t, s.base, popPath("lpl", ""), "wait=true&timeout=20000")
	if d := time.Since(start); code != 200 || r2.Messages[0].TransactionID != "L1" || d > 4*time.Second {
		t.Fatalf("waiting behind a lease: %d after %v", code, d)
	}
	// The same for a delayed message.
	configure(t, s.base, "lpd", map[string]any{"delayedProcessing": 2})
	push(t, s.base, body(item{"lpd", "P", 1, "D1"}))
	start = time.Now()
	code, r2 = pop(t, s.base, popPath("lpd", "P"), "wait=true&timeout=20000")
	if d := time.Since(start); code != 200 || r2.Messages[0].TransactionID != "D1" || d > 4*time.Second || d < 1500*time.Millisecond {
		t.Fatalf("waiting for a delayed message: %d after %v", code, d)
	}
}

func TestPopMaintenance(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "pm", "P", 1, 1)
	if code, rb := post(t, s.base, "/api/v1/system/maintenance/pop", []byte(`{"enabled":true}`)); code != 200 {
		t.Fatalf("%d %s", code, rb)
	}
	if code, _ := pop(t, s.base, popPath("pm", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("pop in pop maintenance: %d", code)
	}
	post(t, s.base, "/api/v1/system/maintenance/pop", []byte(`{"enabled":false}`))
	if code, _ := pop(t, s.base, popPath("pm", "P"), ""); code != 200 {
		t.Fatalf("pop after pop maintenance: %d", code)
	}
}

// TestSoakProduceConsume: producers push over many partitions while
// consumer goroutines of two groups pop and ack; every message reaches every
// group exactly once, in order per partition.
func TestSoakProduceConsume(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const partitions, producers, perProducer = 8, 4, 150
	configure(t, s.base, "soak", map[string]any{"leaseTime": 30})
	var pwg sync.WaitGroup
	for p := 0; p < producers; p++ {
		pwg.Add(1)
		go func(p int) {
			defer pwg.Done()
			for i := 0; i < perProducer; i += 5 {
				var items []item
				for k := i; k < i+5; k++ {
					items = append(items, item{"soak", fmt.Sprintf("p%d", k%partitions), map[string]int{"p": p, "s": k}, fmt.Sprintf("%d-%d", p, k)})
				}
				push(t, s.base, body(items...))
			}
		}(p)
	}
	total := producers * perProducer
	type seen struct {
		mu    sync.Mutex
		ids   map[string]int
		order map[string]int // partition/producer → last seq
		bad   []string
	}
	consume := func(group string, workers int) *seen {
		sn := &seen{ids: map[string]int{}, order: map[string]int{}}
		var wg sync.WaitGroup
		deadline := time.Now().Add(60 * time.Second)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					sn.mu.Lock()
					n := len(sn.ids)
					sn.mu.Unlock()
					if n >= total {
						return
					}
					code, r := pop(t, s.base, popPath("soak", ""), "consumerGroup="+group+"&batch=7&wait=true&timeout=500")
					if code != 200 {
						continue
					}
					sn.mu.Lock()
					for _, m := range r.Messages {
						sn.ids[m.TransactionID]++
						var v struct{ P, S int }
						_ = json.Unmarshal(m.Data, &v)
						k := fmt.Sprintf("%s/%d", m.Partition, v.P)
						if last, ok := sn.order[k]; ok && v.S <= last {
							sn.bad = append(sn.bad, fmt.Sprintf("%s: %d after %d", k, v.S, last))
						}
						sn.order[k] = v.S
					}
					sn.mu.Unlock()
					for _, m := range r.Messages {
						if a := ack(t, s.base, m, "completed", group); !a.Success {
							t.Errorf("ack %s: %+v", m.TransactionID, a)
						}
					}
				}
			}()
		}
		wg.Wait()
		return sn
	}
	var g1, g2 *seen
	var cwg sync.WaitGroup
	cwg.Add(2)
	go func() { defer cwg.Done(); g1 = consume("g1", 3) }()
	go func() { defer cwg.Done(); g2 = consume("g2", 3) }()
	pwg.Wait()
	cwg.Wait()
	for name, g := range map[string]*seen{"g1": g1, "g2": g2} {
		if len(g.ids) != total {
			t.Errorf("%s received %d distinct messages, want %d", name, len(g.ids), total)
		}
		for id, n := range g.ids {
			if n != 1 {
				t.Errorf("%s got %s %d times", name, id, n)
			}
		}
		if len(g.bad) > 0 {
			t.Errorf("%s order violations: %v", name, g.bad[:min(5, len(g.bad))])
		}
	}
}

// TestConsumeInputErrors: client mistakes on the consume routes are 400
// with a JSON error, never a 5xx.
func TestConsumeInputErrors(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const pid = "0190c1d2-0000-7000-8000-000000000001"
	for _, c := range []struct{ path, body string }{
		{"/api/v1/ack", `{}`},
		{"/api/v1/ack", `{"transactionId":"x"}`},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"nope"}`},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"` + pid + `","status":"maybe"}`},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"` + pid + `","consumerGroup":"a\u0000b"}`},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"` + pid + `","error":"a\u0000b"}`},
		{"/api/v1/ack", `{"transactionId":"x","partitionId":"` + pid + `","leaseId":"not-a-uuid"}`},
		{"/api/v1/ack", `{"transactionId":"` + strings.Repeat("t", 1025) + `","partitionId":"` + pid + `"}`},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"` + strings.Repeat("t", 1025) + `","partitionId":"` + pid + `"}]}`},
		{"/api/v1/ack/batch", `{"acknowledgments":{}}`},
		{"/api/v1/ack/batch", `{}`},
		{"/api/v1/lease/nope/extend", `{}`},
		{"/api/v1/lease/` + pid + `/extend", `{"seconds":-5}`},
		{"/api/v1/configure", `{"queue":"x","namespace":"a\u0000"}`},
		{"/api/v1/system/maintenance", `{}`},
		{"/api/v1/system/maintenance", `[]`},
	} {
		code, rb := post(t, s.base, c.path, []byte(c.body))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || e.Error == "" {
			t.Errorf("POST %s %s: %d %s, want 400 with an error", c.path, c.body, code, rb)
		}
	}
	for _, q := range []string{"/api/v1/pop/queue/a%00b", "/api/v1/pop/queue/ok?consumerGroup=%01", "/api/v1/pop/queue/ok?subscriptionFrom=yesterday",
		"/api/v1/pop/queue/ok?subscriptionFrom=9999-12-31T23:59:59-14:00"} {
		resp, err := testenv.Client.Get(s.base + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// TestPopDeadLettersLapsedAndDelivers: a pop that finds its group's lease
// lapsed with retries exhausted dead-letters the message at the cursor and
// delivers the next one in the same answer, also when the next one is in
// another segment than the claim read (each push here is its own
// segment), through the queue's pop (the claim statement) and the
// partition's, without wait and with it.
func TestPopDeadLettersLapsedAndDelivers(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "dl", map[string]any{"leaseTime": 60, "retryLimit": 0})
	for i := 1; i <= 8; i++ {
		pushN(t, s.base, "dl", "A", i, i)
	}
	expire := func() {
		t.Helper()
		if _, err := s.store.Pool().Exec(context.Background(), `UPDATE queen.consumer_cursors
			SET lease_expires_at = now() - interval '1 second' WHERE consumer_group = 'g' AND lease_id IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct{ partition, query string }{
		{"", "consumerGroup=g&batch=1"}, {"", "consumerGroup=g&batch=1&wait=true&timeout=2000"},
		{"A", "consumerGroup=g&batch=1"}, {"A", "consumerGroup=g&batch=1&wait=true&timeout=2000"},
	} {
		q := c.query
		code, r := pop(t, s.base, popPath("dl", c.partition), q)
		want := fmt.Sprintf("m-%d", 2*i+1)
		if code != 200 || r.Messages[0].TransactionID != want {
			t.Fatalf("pop %q: %d %+v, want %s", q, code, r, want)
		}
		expire()
		want = fmt.Sprintf("m-%d", 2*i+2)
		code, r = pop(t, s.base, popPath("dl", c.partition), q)
		if code != 200 || len(r.Messages) != 1 || r.Messages[0].TransactionID != want {
			t.Fatalf("pop %q after the lease lapsed (its message dead-lettered): %d %s, want %s", q, code, r.raw, want)
		}
		if a := ack(t, s.base, r.Messages[0], "completed", "g"); !a.Success {
			t.Fatalf("ack %s: %+v", want, a)
		}
	}
}

// TestDeadLetterErrorTruncated: an ack's error text longer than
// pg.MaxDeadLetterError is stored (and listed by /api/v1/dlq) cut to that
// many bytes, with the original length named; the ack itself succeeds.
func TestDeadLetterErrorTruncated(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "dlerr", "A", 1, 1)
	code, r := pop(t, s.base, popPath("dlerr", ""), "batch=1")
	if code != 200 {
		t.Fatalf("pop: %d", code)
	}
	long := strings.Repeat(`stack frame\n`, 200_000) // JSON-escaped: 2.6 MB of JSON, 2.4 MB of text
	m := r.Messages[0]
	b := []byte(`{"transactionId":"` + m.TransactionID + `","partitionId":"` + m.PartitionID + `","leaseId":"` + m.LeaseID +
		`","status":"dlq","error":"` + long + `"}`)
	if code, rb := post(t, s.base, "/api/v1/ack", b); code != http.StatusOK || !strings.Contains(string(rb), `"success":true`) {
		t.Fatalf("ack with a long error: %d %.200s", code, rb)
	}
	resp, err := testenv.Client.Get(s.base + "/api/v1/dlq?queue=dlerr")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Messages []struct {
			ErrorMessage string `json:"errorMessage"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || len(d.Messages) != 1 {
		t.Fatalf("dlq: %v, %d messages", err, len(d.Messages))
	}
	e := d.Messages[0].ErrorMessage
	if len(e) > pg.MaxDeadLetterError || !strings.HasPrefix(e, "stack frame\n") || !strings.HasSuffix(e, "(truncated from 2400000 bytes)") {
		t.Fatalf("stored error of %d bytes: %.40q … %q", len(e), e, e[max(0, len(e)-40):])
	}
}

// TestBatchDeadLetters: an ack/batch that dead-letters many messages of
// one lease (status dlq, each with its own error) writes one dead letter
// per message with its id, transactionId, offset and error, and a failed
// ack past retryLimit dead-letters the message at the cursor with the
// retries counted. The rows come from the lease's messages the acks load
// already (pg ackState.deadLetterFor), not from a read of the segment per
// message, which took seconds for a batch from one large segment.
func TestBatchDeadLetters(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "dlb", "A", 0, 299) // one push: one segment
	code, r := pop(t, s.base, popPath("dlb", ""), "batch=300&consumerGroup=g")
	if code != 200 || len(r.Messages) != 300 {
		t.Fatalf("pop: %d, %d messages", code, len(r.Messages))
	}
	var acks []map[string]any
	want := map[string]string{} // transactionId -> error, the dead-lettered ones
	for i, m := range r.Messages {
		a := map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
		if i%2 == 0 {
			a["status"], a["error"] = "dlq", fmt.Sprintf("bad %d", i)
			want[m.TransactionID] = fmt.Sprintf("bad %d", i)
		}
		acks = append(acks, a)
	}
	b, _ := json.Marshal(map[string]any{"consumerGroup": "g", "acknowledgments": acks})
	code, rb := post(t, s.base, "/api/v1/ack/batch", b)
	var res []ackResp
	if code != 200 || json.Unmarshal(rb, &res) != nil || len(res) != 300 {
		t.Fatalf("ack/batch: %d %.300s", code, rb)
	}
	for i, a := range res {
		if !a.Success || a.DLQ != (i%2 == 0) {
			t.Fatalf("ack %d: %+v", i, a)
		}
	}
	type dead struct {
		ID, TransactionID, ErrorMessage string
		Offset, RetryCount              int64
	}
	var d struct {
		Messages []dead
		Total    int
	}
	if code := getJSON(t, s.base+"/api/v1/dlq?queue=dlb&consumerGroup=g&limit=1000", &d); code != 200 || d.Total != 150 || len(d.Messages) != 150 {
		t.Fatalf("dlq: %d, total %d, %d messages", code, d.Total, len(d.Messages))
	}
	byTx := map[string]popMsg{}
	for _, m := range r.Messages {
		byTx[m.TransactionID] = m
	}
	for _, m := range d.Messages {
		p, ok := byTx[m.TransactionID]
		if e, dl := want[m.TransactionID]; !ok || !dl || m.ErrorMessage != e || m.ID != p.ID || m.RetryCount != 0 || m.Offset != p.Offset {
			t.Fatalf("dead letter %+v, popped as %+v, want error %q", m, p, want[m.TransactionID])
		}
		delete(want, m.TransactionID)
	}
	if len(want) != 0 {
		t.Fatalf("%d dead letters missing", len(want))
	}

	// Dead letters of several partitions in one ack/batch are stored in
	// the acks' order: /dlq lists the last acked first.
	for _, p := range []string{"A", "B", "C"} {
		push(t, s.base, body(item{"dlo", p, 1, "o-" + p}))
	}
	code, r = pop(t, s.base, popPath("dlo", ""), "batch=3&partitions=3")
	if code != 200 || len(r.Messages) != 3 {
		t.Fatalf("pop of three partitions: %d %+v", code, r.Messages)
	}
	byTx = map[string]popMsg{}
	for _, m := range r.Messages {
		byTx[m.TransactionID] = m
	}
	acks = nil
	for _, tx := range []string{"o-C", "o-A", "o-B"} {
		m := byTx[tx]
		acks = append(acks, map[string]any{"transactionId": tx, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "dlq"})
	}
	b, _ = json.Marshal(map[string]any{"acknowledgments": acks})
	if code, rb := post(t, s.base, "/api/v1/ack/batch", b); code != 200 || strings.Count(string(rb), `"dlq":true`) != 3 {
		t.Fatalf("ack/batch over three partitions: %d %s", code, rb)
	}
	if code := getJSON(t, s.base+"/api/v1/dlq?queue=dlo", &d); code != 200 || len(d.Messages) != 3 ||
		d.Messages[0].TransactionID != "o-B" || d.Messages[1].TransactionID != "o-A" || d.Messages[2].TransactionID != "o-C" {
		t.Fatalf("dlq order: %d %+v, want o-B, o-A, o-C (the last acked first)", code, d.Messages)
	}

	configure(t, s.base, "dlf", map[string]any{"retryLimit": 1})
	pushN(t, s.base, "dlf", "A", 0, 2)
	for round := range 2 {
		code, r := pop(t, s.base, popPath("dlf", ""), "batch=3")
		if code != 200 || len(r.Messages) != 3 || r.Messages[0].TransactionID != "m-0" {
			t.Fatalf("round %d: pop: %d %+v", round, code, r.Messages)
		}
		b, _ := json.Marshal(map[string]any{"acknowledgments": []map[string]any{{"transactionId": "m-0",
			"partitionId": r.Messages[0].PartitionID, "leaseId": r.Messages[0].LeaseID, "status": "failed", "error": "no luck"}}})
		if code, rb := post(t, s.base, "/api/v1/ack/batch", b); code != 200 || strings.Contains(string(rb), `"dlq":true`) != (round == 1) {
			t.Fatalf("round %d: failed ack: %d %s", round, code, rb)
		}
	}
	if code := getJSON(t, s.base+"/api/v1/dlq?queue=dlf", &d); code != 200 || d.Total != 1 ||
		d.Messages[0].TransactionID != "m-0" || d.Messages[0].ErrorMessage != "no luck" || d.Messages[0].RetryCount != 1 || d.Messages[0].Offset != 0 {
		t.Fatalf("dlq after retries: %d %+v", code, d)
	}
}

// TestManyWaitersWokenTogether: waiting pops of one queue and group are
// woken together by a push but claim through the wake gate (at most a few
// at once; a claim that found nothing makes the rest wait again): every
// message still reaches a waiter promptly, one each, and every group gets
// every message.
func TestManyWaitersWokenTogether(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "herd", nil)
	type got struct {
		group, txid string
		code        int
	}
	out := make(chan got, 200)
	const waiters = 30
	for _, g := range []string{"", "g1", "g2"} {
		for range waiters {
			go func() {
				q := "wait=true&timeout=15000&autoAck=true"
				if g != "" {
					q += "&consumerGroup=" + g
				}
				code, r := pop(t, s.base, popPath("herd", ""), q)
				tx := ""
				if len(r.Messages) == 1 {
					tx = r.Messages[0].TransactionID
				}
				out <- got{g, tx, code}
			}()
		}
	}
	time.Sleep(700 * time.Millisecond) // all waiting
	start := time.Now()
	pushN(t, s.base, "herd", "A", 1, 1)
	seen := map[string]int{}
	for range 3 {
		r := <-out
		if r.code != 200 || r.txid != "m-1" {
			t.Fatalf("after one push: %+v", r)
		}
		seen[r.group]++
	}
	if len(seen) != 3 || time.Since(start) > 3*time.Second {
		t.Fatalf("one message, three groups: %v after %v", seen, time.Since(start))
	}
	select {
	case r := <-out:
		t.Fatalf("a fourth answer to one message: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	// Ten more messages in ten partitions: ten more waiters of each group
	// get one each, promptly.
	var items []item
	for i := 2; i <= 11; i++ {
		items = append(items, item{"herd", fmt.Sprintf("P%d", i), i, fmt.Sprintf("m-%d", i)})
	}
	start = time.Now()
	push(t, s.base, body(items...))
	per := map[string]map[string]bool{}
	for range 30 {
		select {
		case r := <-out:
			if r.code != 200 || r.txid == "" {
				t.Fatalf("after ten pushes: %+v", r)
			}
			if per[r.group] == nil {
				per[r.group] = map[string]bool{}
			}
			if per[r.group][r.txid] {
				t.Fatalf("group %q got %s twice", r.group, r.txid)
			}
			per[r.group][r.txid] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("ten messages: only %v after %v", per, time.Since(start))
		}
	}
}

// TestNewGroupWaitingOnAMissingQueue: a long-poll of a new group with
// subscriptionMode=new on a queue that does not exist yet receives the
// message whose push creates the queue (the group is recorded from when
// the pop began, not from the claim after the wake-up), and a pop without
// wait on a missing queue records nothing.
func TestNewGroupWaitingOnAMissingQueue(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	done := make(chan popResp)
	go func() {
		_, r := pop(t, s.base, popPath("qnew", ""), "consumerGroup=g1&subscriptionMode=new&wait=true&timeout=10000")
		done <- r
	}()
	time.Sleep(700 * time.Millisecond)
	pushN(t, s.base, "qnew", "A", 1, 1)
	select {
	case r := <-done:
		if len(r.Messages) != 1 || r.Messages[0].TransactionID != "m-1" {
			t.Fatalf("waiting new group: %+v", r.Messages)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the waiting pop of a new group got nothing")
	}
	// Not waiting: the queue is unknown, nothing is recorded, and the
	// group starts at its first pop that finds the queue.
	if code, _ := pop(t, s.base, popPath("qnew2", ""), "consumerGroup=g2&subscriptionMode=new"); code != http.StatusNoContent {
		t.Fatalf("pop of a missing queue: %d", code)
	}
	pushN(t, s.base, "qnew2", "A", 1, 1)
	if code, _ := pop(t, s.base, popPath("qnew2", ""), "consumerGroup=g2&subscriptionMode=new"); code != http.StatusNoContent {
		t.Fatalf("first pop of g2 on the queue (new: after this message): %d", code)
	}
}
