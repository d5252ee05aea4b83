package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

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
// namespace and task from its name split on the first "." (API.md, push
// side effects); /configure still sets them explicitly.
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
