package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/testenv"
)

// TestPopAutopilotBatch: newer Queen SDKs consume with autopilot=true and
// no batch, leaving the batch to the broker; such a pop gets up to
// fastapi.AutopilotBatch (100) messages. A batch the client sets still
// wins, and without autopilot the API default of 1 holds.
func TestPopAutopilotBatch(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "ap", "P", 1, 150)
	for _, c := range []struct {
		query string
		want  int
	}{
		{"consumerGroup=g1&autoAck=true", 1},
		{"consumerGroup=g2&autoAck=true&autopilot=true", 100},
		{"consumerGroup=g3&autoAck=true&autopilot=true&batch=7", 7},
		{"consumerGroup=g4&autoAck=true&autopilot=false", 1},
	} {
		if code, r := pop(t, s.base, popPath("ap", ""), c.query); code != http.StatusOK || len(r.Messages) != c.want {
			t.Errorf("pop ?%s: %d with %d messages, want %d", c.query, code, len(r.Messages), c.want)
		}
	}
}

// TestWaitingPopRidesOutDatabaseRestart: a long-polling pop that meets a
// PostgreSQL outage keeps waiting inside its timeout instead of failing
// (Queen's JS consumer stops on a 5xx): it delivers a message pushed once
// the database is back; with the database still away at its deadline it
// answers 204. A pop without wait answers 503 at once.
func TestWaitingPopRidesOutDatabaseRestart(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	pushN(t, base, "blip", "P", 1, 1)
	if _, r := pop(t, base, popPath("blip", ""), "autoAck=true"); len(r.Messages) != 1 {
		t.Fatalf("first pop: %d messages", len(r.Messages))
	}
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	if code, _ := pop(t, base, popPath("blip", ""), "autoAck=true"); code != http.StatusServiceUnavailable {
		t.Errorf("pop without wait, database away: %d, want 503", code)
	}
	start := time.Now()
	if code, _ := pop(t, base, popPath("blip", ""), "autoAck=true&wait=true&timeout=1500"); code != http.StatusNoContent {
		t.Errorf("waiting pop, database away past its deadline: %d, want 204", code)
	} else if d := time.Since(start); d < 1400*time.Millisecond || d > 10*time.Second {
		t.Errorf("waiting pop answered 204 after %v, want about its 1.5 s timeout", d)
	}

	type result struct {
		code int
		r    popResp
	}
	done := make(chan result, 1)
	go func() {
		code, r := pop(t, base, popPath("blip", ""), "autoAck=true&wait=true&timeout=20000")
		done <- result{code, r}
	}()
	time.Sleep(1500 * time.Millisecond) // the pop meets the outage
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	// queued or buffered: the projector may still be backing off
	if r := push(t, base, body(item{"blip", "P", 2, "m-2"})); r[0].Status != Q && r[0].Status != B {
		t.Fatalf("push after the restart: %s", r[0].Status)
	}
	res := <-done
	if res.code != http.StatusOK || len(res.r.Messages) != 1 || res.r.Messages[0].TransactionID != "m-2" {
		t.Fatalf("waiting pop across the restart: %d %s", res.code, res.r.raw)
	}
}

// TestPushCreatedQueueNamespaceTask: a queue created by a push takes its
// namespace and task from its name split on the first "." (docs/push.md,
// "Request"); /configure still sets them explicitly.
func TestPushCreatedQueueNamespaceTask(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	wantStatuses(t, push(t, s.base, body(item{"billing.invoices.eu", "P", 1, ""}, item{"plain", "P", 2, ""})), Q, Q)
	for name, want := range map[string][2]string{"billing.invoices.eu": {"billing", "invoices.eu"}, "plain": {"plain", ""}} {
		var q struct{ Namespace, Task string }
		if code := getJSON(t, s.base+"/api/v1/resources/queues/"+name, &q); code != 200 || q.Namespace != want[0] || q.Task != want[1] {
			t.Errorf("%s: %d namespace %q task %q, want %q %q", name, code, q.Namespace, q.Task, want[0], want[1])
		}
	}
}

// TestConfigureKeepsNamespaceTask: a /configure that names neither
// namespace nor task (or sends them null) keeps the queue's own, so a
// queue created by a push stays in its namespace's pops; a new queue gets
// the namespace and task a push would give it; a named one is set, ""
// included.
func TestConfigureKeepsNamespaceTask(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	wantStatuses(t, push(t, s.base, body(item{"billing.invoices", "P", 1, "inv-1"})), Q)
	labels := func(req string) string {
		t.Helper()
		code, rb := post(t, s.base, "/api/v1/configure", []byte(req))
		var r struct{ Namespace, Task string }
		if code != http.StatusOK || json.Unmarshal(rb, &r) != nil {
			t.Fatalf("configure %s: %d %s", req, code, rb)
		}
		var q struct {
			Namespace, Task string
			Options         struct{ LeaseTime int }
		}
		var name struct{ Queue string }
		json.Unmarshal([]byte(req), &name)
		if code := getJSON(t, s.base+"/api/v1/resources/queues/"+name.Queue, &q); code != http.StatusOK ||
			q.Namespace != r.Namespace || q.Task != r.Task {
			t.Fatalf("%s: stored %d %+v, answered %+v", name.Queue, code, q, r)
		}
		return fmt.Sprintf("%q %q lease %d", r.Namespace, r.Task, q.Options.LeaseTime)
	}
	if got := labels(`{"queue":"billing.invoices","options":{"leaseTime":60}}`); got != `"billing" "invoices" lease 60` {
		t.Fatalf("configure of options alone: %s, want the push's billing/invoices kept", got)
	}
	if code, r := pop(t, s.base, "/api/v1/pop", "namespace=billing&autoAck=true"); code != http.StatusOK ||
		len(r.Messages) != 1 || r.Messages[0].TransactionID != "inv-1" {
		t.Fatalf("pop of namespace billing after the configure: %d %s", code, r.raw)
	}
	for _, c := range []struct{ req, want string }{
		{`{"queue":"billing.invoices","namespace":null,"task":null,"options":{}}`, `"billing" "invoices" lease 300`},
		{`{"queue":"billing.invoices","namespace":"ledger"}`, `"ledger" "invoices" lease 300`},
		{`{"queue":"billing.invoices","task":""}`, `"ledger" "" lease 300`},
		{`{"queue":"reports.daily.eu"}`, `"reports" "daily.eu" lease 300`}, // new: as a push would
		{`{"queue":"solo","options":{"leaseTime":5}}`, `"solo" "" lease 5`},
		{`{"queue":"named.q","namespace":"n","task":"t"}`, `"n" "t" lease 300`},
	} {
		if got := labels(c.req); got != c.want {
			t.Errorf("configure %s: %s, want %s", c.req, got, c.want)
		}
	}
}

// TestUnknownRouteCode: a route this broker lacks answers 404 with
// "code":"no_such_route", which Queen's SDKs read to fall back.
func TestUnknownRouteCode(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	code, b := get(t, s.base+"/api/v1/no/such/route")
	if code != http.StatusNotFound || !strings.Contains(b, `"code":"no_such_route"`) || !strings.Contains(b, `"error"`) {
		t.Fatalf("unknown route: %d %s", code, b)
	}
}

// TestAbandonedLongPollClaimsNothing: a consumer cancelled while its pop
// waits (the connection closes) must not be leased the next message: a
// pop right after the push gets it, and no delivery attempt is counted.
func TestAbandonedLongPollClaimsNothing(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "gone", map[string]any{"leaseTime": 60})
	for round := 0; round < 3; round++ {
		conn, err := net.Dial("tcp", s.b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s?wait=true&timeout=10000&batch=10 HTTP/1.1\r\nHost: x\r\n\r\n", popPath("gone", ""))
		time.Sleep(300 * time.Millisecond) // the pop is waiting
		conn.Close()                       // the consumer gives up
		time.Sleep(100 * time.Millisecond)
		id := fmt.Sprintf("r%d", round)
		wantStatuses(t, push(t, s.base, body(item{"gone", "P", round, id})), Q)
		code, r := pop(t, s.base, popPath("gone", ""), "batch=10")
		if code != http.StatusOK || len(r.Messages) != 1 || r.Messages[0].TransactionID != id {
			t.Fatalf("round %d: pop after an abandoned long-poll: %d %s", round, code, r.raw)
		}
		if a := ack(t, s.base, r.Messages[0], "completed", ""); !a.Success {
			t.Fatalf("round %d: ack: %+v", round, a)
		}
	}
}

// TestReleaseLeaseCountsNoAttempt: a lease given back because its pop's
// answer never reached the client frees the messages at once and counts
// no delivery attempt (with retryLimit 0 a counted one would dead-letter).
func TestReleaseLeaseCountsNoAttempt(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "rel", map[string]any{"retryLimit": 0, "leaseTime": 60})
	pushN(t, s.base, "rel", "P", 1, 2)
	_, r := pop(t, s.base, popPath("rel", "P"), "batch=10")
	if len(r.Messages) != 2 {
		t.Fatalf("first pop: %s", r.raw)
	}
	lease, err := uuid.Parse(r.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.b.ReleaseLease(context.Background(), lease, "rel"); err != nil {
		t.Fatal(err)
	}
	code, r2 := pop(t, s.base, popPath("rel", "P"), "batch=10")
	if code != http.StatusOK || len(r2.Messages) != 2 || r2.Messages[0].TransactionID != "m-1" {
		t.Fatalf("pop after the release: %d %s", code, r2.raw)
	}
	var dlq struct{ Total int }
	getJSON(t, s.base+"/api/v1/dlq?queue=rel", &dlq)
	if dlq.Total != 0 {
		t.Fatalf("a released lease was counted as a failed delivery: %d dead letters", dlq.Total)
	}
}
