package e2e

// The web console (console/, docs/console.md) in a real browser: headless
// Chromium driven by chromedp loads the page from a broker with data and
// the tests compare what the page shows with what the API answers, act
// through the page (maintenance toggle, seek, sign-in) and check the effect
// through the API. Screenshots are written to QUEEN_TEST_ARTIFACTS
// (default artifacts/console/ at the repository root, ignored by git).
// Without Chromium on PATH the browser tests skip and say so.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/console"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactsDir is where screenshots go: $QUEEN_TEST_ARTIFACTS, else
// artifacts/console at the repository root.
func artifactsDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("QUEEN_TEST_ARTIFACTS")
	if d == "" {
		d = filepath.Join("..", "artifacts", "console")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	abs, _ := filepath.Abs(d)
	return abs
}

// page is one browser tab on the console of one broker.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string

	mu       sync.Mutex
	requests []string // every URL the page asked for
	problems []string // JS exceptions, console errors, CSP violations
	allow    []string // substrings of problems that are expected (401s before sign-in)
}

// openPage starts a fresh headless Chromium (its own user-data-dir, no
// background networking) and a tab; it skips the test without Chromium.
func openPage(t *testing.T, base string) *page {
	t.Helper()
	bin := chromium()
	if bin == "" && os.Getenv("CI") == "true" {
		t.Fatal("no chromium, chromium-browser or google-chrome on PATH: CI must install it (.ci/run does: apt-get install chromium)")
	}
	if bin == "" {
		t.Skip("console browser test skipped: no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	p := &page{t: t, base: base, dir: artifactsDir(t)}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(p.listen))
	p.ctx = ctx
	// The first action starts the browser; it must not run under a timeout.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium (%s): %v", bin, err)
	}
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	t.Cleanup(p.checkClean)
	return p
}

// listen records what the page fetches and what goes wrong in it. It runs
// in chromedp's read loop: it must return fast and send no command.
func (p *page) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		p.requests = append(p.requests, e.Request.URL)
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			text += " " + d.Exception.Description
		}
		p.problems = append(p.problems, "exception: "+text)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			p.problems = append(p.problems, "console.error: "+strings.Join(parts, " "))
		}
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError || e.Entry.Source == log.EntrySourceSecurity {
			p.problems = append(p.problems, fmt.Sprintf("log %s/%s: %s %s", e.Entry.Source, e.Entry.Level, e.Entry.Text, e.Entry.URL))
		}
	}
}

// checkClean fails the test for a request to another origin or an
// unexpected browser error (a CSP violation is one).
func (p *page) checkClean() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.requests {
		if !strings.HasPrefix(u, p.base+"/") && !strings.HasPrefix(u, "data:") {
			p.t.Errorf("the page fetched %s, outside the broker %s", u, p.base)
		}
	}
	if len(p.requests) == 0 {
		p.t.Errorf("no request seen: the listener is not wired")
	}
outer:
	for _, pr := range p.problems {
		for _, a := range p.allow {
			if strings.Contains(pr, a) {
				continue outer
			}
		}
		p.t.Errorf("browser: %s", pr)
	}
}

// run runs actions with a time limit of 30 s.
func (p *page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JS expression into out (a pointer).
func eval[T any](p *page, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// str evaluates a JS expression that yields a string.
func (p *page) str(expr string) string {
	p.t.Helper()
	v, err := eval[string](p, expr)
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls a JS expression until it is true (15 s at most).
func (p *page) waitJS(what, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, err := eval[bool](p, "Boolean("+expr+")")
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.shot("timeout-" + strings.ReplaceAll(what, " ", "-"))
			p.t.Fatalf("timed out waiting for %s (%s): %v", what, expr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// value returns the data-value of the first element matching sel ("" when
// there is none).
func (p *page) value(sel string) string {
	p.t.Helper()
	return p.str(fmt.Sprintf(`(document.querySelector(%q)||{dataset:{}}).dataset.value||""`, sel))
}

// waitValue waits until the element's data-value is want.
func (p *page) waitValue(sel, want string) {
	p.t.Helper()
	p.waitJS(sel+" = "+want, fmt.Sprintf(`(document.querySelector(%q)||{dataset:{}}).dataset.value === %q`, sel, want))
}

func (p *page) count(sel string) int {
	p.t.Helper()
	n, err := eval[int](p, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
	if err != nil {
		p.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// click clicks the first visible element matching sel. The page re-renders
// its tables on every poll, so a node found by one DevTools call can be gone
// by the next ("Could not find node with given id"): the element is looked
// up and clicked in one evaluation in the page, retried until it is there.
func (p *page) click(sel string) {
	p.t.Helper()
	p.waitJS("a visible "+sel, fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		if (!e || e.offsetParent === null) return false;
		e.click();
		return true;
	})()`, sel))
}

// setValue sets the value of the element sel as a user's input would end
// (the value, then input and change events), found anew by the page's own
// querySelector at each try: chromedp's SetValue writes to the node it
// looked up, which a poll that re-rendered the element meanwhile has
// replaced ("could not set value on node N", seen under the race detector
// with the whole suite running). It fails the test when the element is
// not there within 10 s.
func (p *page) setValue(sel, v string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
		e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true}));
		return e.value === %q })()`, sel, v, v)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := eval[bool](p, js)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.shot("failed-set-" + sel)
			p.t.Fatalf("set %s to %q: %v (set: %v)", sel, v, err, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *page) type_(sel, v string) {
	p.t.Helper()
	p.run("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), v, chromedp.NodeVisible))
}

// goTo navigates to a hash route of the console and waits for a poll.
func (p *page) goTo(hash string) {
	p.t.Helper()
	ticks, _ := eval[int](p, `window.queenConsole ? window.queenConsole.ticks : 0`)
	p.run("navigate "+hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, hash)))
	p.waitJS("a poll after "+hash, fmt.Sprintf(`window.queenConsole && window.queenConsole.ticks > %d`, ticks))
}

// shot saves a full-page PNG screenshot as <test>-<name>.png.
func (p *page) shot(name string) {
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	// At the top, so the sticky header is where it belongs in a full-page shot.
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	f := filepath.Join(p.dir, strings.ReplaceAll(p.t.Name(), "/", "_")+"-"+name+".png")
	if err := os.WriteFile(f, buf, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", f)
}

// apiJSON GETs an API path with an optional token and decodes the answer.
func apiJSON(t *testing.T, base, tok, path string, v any) {
	t.Helper()
	code, b := do(t, http.MethodGet, base+path, tok, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %s: %v", path, b, err)
	}
}

func apiPost(t *testing.T, base, tok, path string, body any) []byte {
	t.Helper()
	b, _ := json.Marshal(body)
	code, rb := do(t, http.MethodPost, base+path, tok, b)
	if code/100 != 2 {
		t.Fatalf("POST %s: %d %s", path, code, rb)
	}
	return rb
}

// popped is the part of a pop answer the fixtures use.
type popped struct {
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
}

// consoleData fills a broker with what the console shows: two queues
// (orders over three partitions, billing), a consumer group g1 on orders
// with two dead letters and a backlog, queue-mode completions on billing,
// and a trace on orders/o-1. tok is sent with every call ("" = none).
func consoleData(t *testing.T, base, tok string) {
	t.Helper()
	apiPost(t, base, tok, "/api/v1/configure", map[string]any{"queue": "orders", "options": map[string]any{"leaseTime": 30, "retryLimit": 2}})
	var items []item
	for i := range 30 {
		items = append(items, item{Queue: "orders", Partition: fmt.Sprintf("cust-%d", i%3), Payload: map[string]any{"order": i, "sku": "A-" + fmt.Sprint(i)}, TransactionID: fmt.Sprintf("o-%d", i)})
	}
	for i := range 12 {
		items = append(items, item{Queue: "billing", Payload: map[string]any{"invoice": i}, TransactionID: fmt.Sprintf("b-%d", i)})
	}
	var res []map[string]any
	if err := json.Unmarshal(apiPost(t, base, tok, "/api/v1/push", map[string]any{"items": items}), &res); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r["status"] != "queued" {
			t.Fatalf("push: %v", r)
		}
	}
	// g1 dead-letters the first two messages of cust-0.
	var pop popped
	apiJSON(t, base, tok, "/api/v1/pop/queue/orders/partition/cust-0?batch=2&consumerGroup=g1", &pop)
	if len(pop.Messages) != 2 {
		t.Fatalf("pop g1: %d messages", len(pop.Messages))
	}
	for _, m := range pop.Messages {
		apiPost(t, base, tok, "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": "dlq", "consumerGroup": "g1", "error": "card declined"})
	}
	// Queue mode completes five billing messages.
	apiJSON(t, base, tok, "/api/v1/pop/queue/billing?batch=5", &pop)
	if len(pop.Messages) != 5 {
		t.Fatalf("pop billing: %d messages", len(pop.Messages))
	}
	for _, m := range pop.Messages {
		apiPost(t, base, tok, "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID})
	}
	var q struct {
		Partitions []struct{ ID, Name string }
	}
	apiJSON(t, base, tok, "/api/v1/resources/queues/orders", &q)
	for _, p := range q.Partitions {
		if p.Name == "cust-1" {
			apiPost(t, base, tok, "/api/v1/traces", map[string]any{"transactionId": "o-1", "partitionId": p.ID,
				"data": map[string]any{"step": "charged"}, "traceNames": []string{"checkout"}})
		}
	}
}

// overview is GET /api/v1/resources/overview.
type overview struct {
	Queues, Partitions, ConsumerGroups int
	Messages                           struct{ Total, Pending, Processing, Completed, DeadLetter int }
}

// checkOverview waits until the overview cards show the API's numbers.
func checkOverview(t *testing.T, p *page, base, tok string) {
	t.Helper()
	var ov overview
	apiJSON(t, base, tok, "/api/v1/resources/overview", &ov)
	for sel, want := range map[string]int{"ov-queues": ov.Queues, "ov-partitions": ov.Partitions, "ov-groups": ov.ConsumerGroups,
		"ov-total": ov.Messages.Total, "ov-pending": ov.Messages.Pending, "ov-processing": ov.Messages.Processing,
		"ov-completed": ov.Messages.Completed, "ov-dead": ov.Messages.DeadLetter} {
		p.waitValue(`[data-test="`+sel+`"]`, fmt.Sprint(want))
	}
	if ov.Queues != 2 || ov.Messages.DeadLetter != 2 || ov.Messages.Completed != 5 {
		t.Errorf("fixture: overview %+v, want 2 queues, 2 dead letters, 5 completed", ov)
	}
}

// TestConsoleShowsBrokerState loads the console of a broker with data and
// checks every view against the API, toggles maintenance from the page
// (with its confirm step) and seeks a consumer group.
func TestConsoleShowsBrokerState(t *testing.T) {
	s := setup(t, nil)
	consoleData(t, s.base, "")
	p := openPage(t, s.base)
	// The lookup by transactionId asks every partition; those without it answer 404.
	p.allow = []string{"status of 404 (Not Found) " + s.base + "/api/v1/messages/"}
	p.run("load", chromedp.Navigate(s.base+"/"))

	// Overview: the cards are the API's numbers.
	checkOverview(t, p, s.base, "")
	if n := p.count(`[data-test="ov-queue-row"]`); n != 2 {
		t.Errorf("overview lists %d queues, want 2", n)
	}
	// Rates come from successive samples: push while the page polls.
	for i := range 6 {
		push(t, s.base, body(item{Queue: "billing", Payload: map[string]any{"late": i}}))
		time.Sleep(400 * time.Millisecond)
	}
	p.waitJS("a push rate above zero", `window.queenConsole.history.samples.some(s => s.pushRate > 0)`)
	p.waitJS("a chart with data", `document.querySelector('[data-test="chart-throughput"] canvas') && window.queenConsole.history.samples.length >= 4`)
	if v := p.value(`[data-test="ov-push-rate"]`); v == "" {
		t.Errorf("push rate card is empty")
	}
	p.shot("overview")

	// Pipeline: WAL records and checkpoint as the pipeline route says
	// (the broker is idle now, so they are stable).
	p.goTo("#/pipeline")
	testenvWaitBacklog(t, s.base)
	var pl struct {
		WAL       struct{ Records, DurableIndex uint64 }
		Projector struct{ Checkpoint, Backlog uint64 }
	}
	apiJSON(t, s.base, "", "/api/v1/system/pipeline", &pl)
	p.waitValue(`[data-test="pl-wal-records"]`, fmt.Sprint(pl.WAL.Records))
	p.waitValue(`[data-test="pl-checkpoint"]`, fmt.Sprint(pl.Projector.Checkpoint))
	p.waitValue(`[data-test="pl-backlog"]`, "0")
	p.waitValue(`[data-test="pl-pg"]`, "true")
	if pl.Projector.Checkpoint != pl.WAL.DurableIndex || pl.Projector.Checkpoint < 7 {
		t.Errorf("pipeline: %+v, want the checkpoint at the durable index (at least 7 pushes)", pl)
	}
	for _, c := range []string{"chart-backlog", "chart-lag", "chart-latency", "chart-throughput"} {
		if p.count(`[data-test="`+c+`"] canvas`) != 1 {
			t.Errorf("%s has no canvas", c)
		}
	}
	p.waitJS("an fsync p99", `document.querySelector('[data-test="pl-fsync"]').dataset.value !== ""`)
	p.shot("pipeline")

	// Maintenance from the page: the toggle asks first, Confirm sets it.
	maint := func() (push, pop bool) {
		var m struct{ MaintenanceMode bool }
		apiJSON(t, s.base, "", "/api/v1/system/maintenance", &m)
		var pm struct{ PopMaintenanceMode bool }
		apiJSON(t, s.base, "", "/api/v1/system/maintenance/pop", &pm)
		return m.MaintenanceMode, pm.PopMaintenanceMode
	}
	p.click(`[data-test="maint-push-toggle"]`)
	p.waitJS("the confirm step", `!document.querySelector('[data-test="maint-push-toggle-box"]').hidden`)
	if on, _ := maint(); on {
		t.Fatalf("maintenance on before Confirm")
	}
	p.shot("maintenance-confirm")
	p.click(`[data-test="maint-push-toggle-confirm"]`)
	waitUntil(t, "push maintenance on", func() bool { on, _ := maint(); return on })
	p.waitJS("the page says on", `document.querySelector('[data-test="maint-push-state"]').textContent === "on"`)
	p.waitJS("the header banner", `!document.querySelector('[data-test="maint-banner"]').hidden`)
	if res := push(t, s.base, body(item{Queue: "billing", Payload: 1})); res[0].Status != B {
		t.Errorf("push in maintenance: %s, want buffered", res[0].Status)
	}
	p.click(`[data-test="maint-pop-toggle"]`)
	p.click(`[data-test="maint-pop-toggle-confirm"]`)
	waitUntil(t, "pop maintenance on", func() bool { _, on := maint(); return on })
	p.waitJS("the page says pop on", `document.querySelector('[data-test="maint-pop-state"]').textContent === "on"`)
	p.waitValue(`[data-test="pl-backlog"]`, "1")
	p.shot("maintenance-on")
	// Cancel leaves it as it is.
	p.click(`[data-test="maint-push-toggle"]`)
	p.click(`[data-test="maint-push-toggle-cancel"]`)
	if on, _ := maint(); !on {
		t.Fatalf("Cancel turned maintenance off")
	}
	for _, k := range []string{"push", "pop"} {
		p.click(`[data-test="maint-` + k + `-toggle"]`)
		p.click(`[data-test="maint-` + k + `-toggle-confirm"]`)
	}
	waitUntil(t, "maintenance off", func() bool { a, b := maint(); return !a && !b })
	p.waitValue(`[data-test="pl-backlog"]`, "0")

	// A queue: partitions with the API's depth, options, groups, messages.
	p.goTo("#/queues/orders")
	var q struct {
		Partitions []struct {
			ID, Name string
			Depth    int
		}
		Options map[string]any
	}
	apiJSON(t, s.base, "", "/api/v1/resources/queues/orders", &q)
	for _, part := range q.Partitions {
		p.waitValue(fmt.Sprintf(`[data-test="part-row"][data-partition=%q] [data-test="part-depth"]`, part.Name), fmt.Sprint(part.Depth))
	}
	if n := p.count(`[data-test="part-row"]`); n != len(q.Partitions) || n != 4 { // Default (from configure) and cust-0..2
		t.Errorf("%d partition rows, API has %d (want 4)", n, len(q.Partitions))
	}
	if lt := p.str(`document.querySelector('[data-option="leaseTime"]').textContent`); lt != "30" {
		t.Errorf("options show leaseTime %q, want 30", lt)
	}
	var groups []struct {
		Name, QueueName string
		TotalLag        int
	}
	apiJSON(t, s.base, "", "/api/v1/consumer-groups", &groups)
	lag := -1
	for _, g := range groups {
		if g.Name == "g1" && g.QueueName == "orders" {
			lag = g.TotalLag
		}
	}
	p.waitValue(`[data-test="group-row"][data-group="g1"] [data-test="group-lag"]`, fmt.Sprint(lag))
	var msgs struct {
		Messages []struct{ TransactionID string }
	}
	apiJSON(t, s.base, "", "/api/v1/messages?queue=orders&limit=50&from=2000-01-01T00:00:00Z", &msgs)
	p.waitJS("the message rows", fmt.Sprintf(`document.querySelectorAll('[data-test="msg-row"]').length === %d`, len(msgs.Messages)))
	// A message's payload and traces, by clicking its row.
	p.click(`[data-test="msg-row"][data-tx="o-1"]`)
	p.waitJS("the payload", `document.querySelector('[data-test="message-payload"]')`)
	shown := p.str(`document.querySelector('[data-test="message-payload"]').textContent`)
	var got any
	if err := json.Unmarshal([]byte(shown), &got); err != nil || !reflect.DeepEqual(got, map[string]any{"order": float64(1), "sku": "A-1"}) {
		t.Errorf("payload shown %q, want o-1's", shown)
	}
	p.waitJS("one trace row", `document.querySelectorAll('[data-test="trace-row"]').length === 1`)
	p.shot("queue")
	// Lookup by transactionId alone.
	p.setValue(`[data-test="lookup-tx"]`, "o-5")
	p.click(`[data-test="lookup-submit"]`)
	p.waitJS("the looked-up payload", `document.querySelector('[data-test="message-payload"]') && document.querySelector('[data-test="message-payload"]').textContent.includes('"A-5"')`)
	p.setValue(`[data-test="lookup-tx"]`, "no-such-tx")
	p.click(`[data-test="lookup-submit"]`)
	p.waitJS("not found", `document.querySelector('[data-test="lookup-note"]').textContent.startsWith('No message')`)

	// Dead letters, unfiltered and filtered.
	p.goTo("#/dlq")
	var dlq struct {
		Total    int
		Messages []struct{ TransactionID string }
	}
	apiJSON(t, s.base, "", "/api/v1/dlq", &dlq)
	p.waitValue(`[data-test="dlq-total"]`, fmt.Sprint(dlq.Total))
	if n := p.count(`[data-test="dlq-row"]`); n != len(dlq.Messages) || n != 2 {
		t.Errorf("%d DLQ rows, API has %d (want 2)", n, len(dlq.Messages))
	}
	p.waitJS("the queue choices", `document.querySelectorAll('[data-test="dlq-queue"] option').length === 3`)
	p.setValue(`[data-test="dlq-queue"]`, "orders")
	p.setValue(`[data-test="dlq-group"]`, "g1")
	// A datetime-local input normalizes its value: ":00" seconds are
	// dropped ("…T08:18"), so a time on a whole minute would never read
	// back as set. An hour ago, moved off the whole minute.
	from := time.Now().Add(-time.Hour)
	if from.Second() == 0 {
		from = from.Add(-time.Second)
	}
	p.setValue(`[data-test="dlq-from"]`, from.Format("2006-01-02T15:04:05"))
	p.click(`[data-test="dlq-apply"]`)
	apiJSON(t, s.base, "", "/api/v1/dlq?queue=orders&consumerGroup=g1", &dlq)
	p.waitValue(`[data-test="dlq-total"]`, fmt.Sprint(dlq.Total))
	for _, m := range dlq.Messages {
		if p.count(fmt.Sprintf(`[data-test="dlq-row"][data-tx=%q]`, m.TransactionID)) != 1 {
			t.Errorf("DLQ row %s missing", m.TransactionID)
		}
	}
	p.click(`[data-test="dlq-row"]`)
	p.waitJS("the dead letter's payload", `!document.querySelector('[data-test="dlq-detail"]').hidden`)
	p.shot("dlq")
	p.setValue(`[data-test="dlq-group"]`, "nobody")
	p.click(`[data-test="dlq-apply"]`)
	p.waitValue(`[data-test="dlq-total"]`, "0")

	// Consumer groups: seek g1 on orders to the end, through the confirm step.
	p.goTo("#/groups")
	p.waitValue(`[data-test="group-row"][data-group="g1"] [data-test="group-lag"]`, fmt.Sprint(lag))
	if lag <= 0 {
		t.Fatalf("fixture: g1 lag %d, want a backlog", lag)
	}
	// The page lists queue mode too (billing was popped without a group),
	// one row per group and queue; it names the overview's count of named
	// groups and says why the rows are more (docs/console.md).
	var ov overview
	apiJSON(t, s.base, "", "/api/v1/resources/overview", &ov)
	p.waitValue(`[data-test="groups-named"]`, fmt.Sprint(ov.ConsumerGroups))
	if n := p.count(`[data-test="group-row"]`); n <= ov.ConsumerGroups {
		t.Errorf("fixture: %d group rows, want more than the overview's %d (queue mode)", n, ov.ConsumerGroups)
	}
	if txt := p.str(`document.querySelector('[data-test="groups-summary"]').textContent`); !strings.Contains(txt, "queue mode") || !strings.Contains(txt, "not counted") {
		t.Errorf("the groups summary does not say why the rows differ from the overview's count: %q", txt)
	}
	p.click(`[data-test="group-row"][data-group="g1"] [data-test="group-seek"]`)
	p.click(`[data-test="seek-submit"]`)
	p.waitJS("the seek confirm", `!document.querySelector('[data-test="seek-submit-box"]').hidden`)
	p.shot("groups-seek")
	p.click(`[data-test="seek-submit-confirm"]`)
	waitUntil(t, "g1 at the end", func() bool {
		apiJSON(t, s.base, "", "/api/v1/consumer-groups", &groups)
		for _, g := range groups {
			if g.Name == "g1" && g.QueueName == "orders" {
				return g.TotalLag == 0
			}
		}
		return false
	})
	p.waitValue(`[data-test="group-row"][data-group="g1"] [data-test="group-lag"]`, "0")
	p.waitJS("the seek result", `document.querySelector('[data-test="seek-result"]').textContent.startsWith('Done')`)
}

// TestConsoleDuringOutage: with PostgreSQL stopped, the overview keeps
// drawing what the routes that still answer say (the pipeline's backlog
// and PostgreSQL state, the push rate) and says that the counts needing
// PostgreSQL are unavailable instead of showing the last ones; on a fresh
// load during the outage too. A view whose route fails says since when
// its figures are not current.
func TestConsoleDuringOutage(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	consoleData(t, base, "")
	p := openPage(t, base)
	p.allow = []string{"503 (Service Unavailable)"}
	p.run("load", chromedp.Navigate(base+"/"))
	checkOverview(t, p, base, "")
	p.goTo("#/groups")
	p.waitJS("the groups", `document.querySelectorAll('[data-test="group-row"]').length > 0`)
	p.goTo("#/")

	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		wantStatuses(t, push(t, base, body(item{Queue: "orders", Payload: i})), B)
	}
	var st pipelineStatus
	apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
	if st.Projector.Backlog == 0 || st.Postgres.Healthy {
		t.Fatalf("fixture: with PostgreSQL down the pipeline says backlog %d, healthy %v", st.Projector.Backlog, st.Postgres.Healthy)
	}
	backlog := fmt.Sprint(st.Projector.Backlog)
	outage := func(what string) {
		t.Helper()
		p.waitValue(`[data-test="ov-backlog"]`, backlog)
		p.waitValue(`[data-test="ov-pg"]`, "false")
		p.waitJS(what+": the counts unavailable", `document.querySelector('[data-test="ov-queues"]').dataset.value === ''
			&& document.querySelector('[data-test="ov-dead"]').textContent === '—'
			&& !document.querySelector('[data-test="ov-unavailable"]').hidden
			&& document.querySelector('[data-test="ov-unavailable"]').textContent.includes('database unavailable')
			&& document.querySelectorAll('[data-test="ov-queue-row"]').length === 0`)
		p.waitJS(what+": a push rate", `document.querySelector('[data-test="ov-push-rate"]').dataset.value !== ''`)
	}
	outage("open")
	p.shot("overview-outage")

	// A fresh load during the outage: the "Now" panel is filled too.
	p.run("reload", chromedp.Reload())
	outage("reloaded")
	p.shot("overview-outage-reloaded")

	// A view with a table keeps it, and says it is not current.
	p.goTo("#/groups")
	p.waitJS("the stale note", `!document.getElementById('stale').hidden && document.getElementById('stale').textContent.includes('database unavailable')`)
	p.shot("groups-outage")
	p.goTo("#/")
	p.waitJS("no stale note on the overview", `document.getElementById('stale').hidden`)
}

// testenvWaitBacklog waits until the projector has drained the WAL.
func testenvWaitBacklog(t *testing.T, base string) {
	t.Helper()
	waitUntil(t, "an empty projector backlog", func() bool {
		var pl struct{ Projector struct{ Backlog uint64 } }
		apiJSON(t, base, "", "/api/v1/system/pipeline", &pl)
		return pl.Projector.Backlog == 0
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsoleWithAuth: with JWT auth on, the page itself loads without a
// token, the first API call's 401 opens the sign-in box, a refused token
// is asked for again, the admin token entered there is used for every call
// and kept for the tab (a reload does not ask again), and a read-only token
// sees the data but not the admin-only pipeline.
func TestConsoleWithAuth(t *testing.T) {
	s := authSetup(t, nil)
	admin := token(t, "ops", []string{"admin"}, "")
	consoleData(t, s.base, admin)
	if code, b := do(t, http.MethodGet, s.base+"/", "", nil); code != 200 || !strings.Contains(string(b), "<title>queen-go console</title>") {
		t.Fatalf("GET / without a token: %d %.80s", code, b)
	}
	if code, _ := do(t, http.MethodGet, s.base+"/api/v1/resources/overview", "", nil); code != 401 {
		t.Fatalf("the API without a token: %d, want 401", code)
	}
	p := openPage(t, s.base)
	p.allow = []string{"401", "403"} // the refused calls before sign-in, and the read-only token's pipeline
	p.run("load", chromedp.Navigate(s.base+"/"))
	p.waitJS("the sign-in box", `document.querySelector('[data-test="login"]').open`)
	p.shot("login")

	p.type_(`[data-test="login-token"]`, token(t, "ops", []string{"admin"}, "wrong-signature"))
	p.click(`[data-test="login-submit"]`)
	p.waitJS("asked again", `document.querySelector('[data-test="login"]').open && document.querySelector('[data-test="login-reason"]').textContent.includes('invalid token')`)
	p.type_(`[data-test="login-token"]`, admin)
	p.click(`[data-test="login-submit"]`)
	p.waitJS("the box closed", `!document.querySelector('[data-test="login"]').open`)
	checkOverview(t, p, s.base, admin)
	if kept := p.str(`sessionStorage.getItem('queen.console.token') || ""`); kept != admin {
		t.Errorf("sessionStorage holds %.20q…, want the admin token", kept)
	}
	p.shot("signed-in")

	// A reload keeps the token: no box, numbers at once.
	p.run("reload", chromedp.Reload())
	checkOverview(t, p, s.base, admin)
	if open, _ := eval[bool](p, `document.querySelector('[data-test="login"]').open`); open {
		t.Errorf("the sign-in box opened again after a reload")
	}
	p.goTo("#/pipeline")
	p.waitValue(`[data-test="pl-pg"]`, "true")

	// A read-only token: the data, but not the pipeline.
	reader := token(t, "viewer", []string{"read-only"}, "")
	p.run("read-only", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`sessionStorage.setItem('queen.console.token', %q)`, reader)), chromedp.Reload())
	p.waitJS("the denied note", `document.querySelector('[data-test="denied"]')`)
	p.goTo("#/")
	checkOverview(t, p, s.base, reader)
	p.shot("read-only")
	p.click(`#signout`)
	p.waitJS("signed out", `document.querySelector('[data-test="login"]').open && !sessionStorage.getItem('queen.console.token')`)
}

// TestConsolePathPrefix: the console under QUEEN_CONSOLE_PATH, public with
// auth on, its strict CSP; "/" is then the API's 404; and
// QUEEN_CONSOLE=false serves nothing. No browser needed.
func TestConsolePathPrefix(t *testing.T) {
	t.Parallel()
	s := authSetup(t, func(c *broker.Config) { c.Console = console.Config{Path: "/ops/console"} })
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(m, s.base+"/ops/console/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != console.ContentSecurityPolicy ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%s /ops/console/ without a token: %d %q %q", m, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
		}
	}
	if code, b := do(t, http.MethodGet, s.base+"/ops/console/assets/app.js", "", nil); code != 200 || !strings.Contains(string(b), "import") {
		t.Errorf("app.js: %d", code)
	}
	admin := token(t, "ops", []string{"admin"}, "")
	if code, b := do(t, http.MethodGet, s.base+"/", admin, nil); code != 404 || !strings.Contains(string(b), "no_such_route") {
		t.Errorf("GET / with the console elsewhere: %d %s", code, b)
	}
	if code, _ := do(t, http.MethodGet, s.base+"/ops/console/nope.js", "", nil); code != 401 {
		t.Errorf("a path under the prefix that is no console file: %d, want 401 (auth applies)", code)
	}
	if code, _ := do(t, http.MethodGet, s.base+"/api/v1/system/pipeline", "", nil); code != 401 {
		t.Errorf("the pipeline route without a token: %d, want 401", code)
	}
	off := setup(t, func(c *broker.Config) { c.Console = console.Config{Disabled: true} })
	if code, b := do(t, http.MethodGet, off.base+"/", "", nil); code != 404 || !strings.Contains(string(b), "no_such_route") {
		t.Errorf("GET / with the console off: %d %s", code, b)
	}
}

// pipelineStatus is the part of GET /api/v1/system/pipeline the tests read.
type pipelineStatus struct {
	Time     time.Time
	BrokerID string
	WAL      struct {
		Bytes                             int64
		FirstIndex, DurableIndex, Records uint64
		Healthy                           bool
	}
	Projector struct {
		Checkpoint, Backlog uint64
		OldestUnprojectedAt *time.Time
		LagSeconds          *float64
		Paused, DBHealthy   bool
	}
	Postgres struct {
		Healthy bool
		Error   string
	}
	Maintenance struct{ Push, Pop bool }
	Metrics     struct {
		PushItems       map[string]float64
		Popped          float64
		WALFsyncSeconds struct {
			Count   uint64
			Buckets []struct {
				Le    *float64
				Count uint64
			}
		}
		ProjectorBatchSeconds struct{ Count uint64 }
		ProjectedItems        float64
	}
}

// TestConsolePipelineRoute: GET /api/v1/system/pipeline, the console's
// source for the durability pipeline, against what was done: WAL records
// and checkpoint after pushes, counters, the backlog and its lag in push
// maintenance (the lag is the age of the oldest unprojected push), and a
// 200 with postgres.healthy false while PostgreSQL is down.
func TestConsolePipelineRoute(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	for i := range 3 {
		wantStatuses(t, push(t, base, body(item{Queue: "pl", Payload: i}, item{Queue: "pl", Payload: i + 10})), Q, Q)
	}
	var st pipelineStatus
	apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
	if st.WAL.DurableIndex != 3 || st.WAL.Records != 3 || st.Projector.Checkpoint != 3 || st.Projector.Backlog != 0 ||
		st.Projector.LagSeconds == nil || *st.Projector.LagSeconds != 0 || st.Projector.OldestUnprojectedAt != nil {
		t.Errorf("after 3 pushes: %+v %+v", st.WAL, st.Projector)
	}
	if !st.Postgres.Healthy || !st.WAL.Healthy || st.WAL.Bytes <= 0 || st.BrokerID != b.ID.String() || time.Since(st.Time) > time.Minute {
		t.Errorf("status: %+v", st)
	}
	m := st.Metrics
	if m.PushItems["queued"] != 6 || m.WALFsyncSeconds.Count < 1 || m.ProjectorBatchSeconds.Count < 1 || m.ProjectedItems != 6 {
		t.Errorf("metrics: %+v", m)
	}
	if n := len(m.WALFsyncSeconds.Buckets); n < 2 || m.WALFsyncSeconds.Buckets[n-1].Le != nil || m.WALFsyncSeconds.Buckets[n-1].Count != m.WALFsyncSeconds.Count {
		t.Errorf("fsync buckets do not end in +Inf with the count: %+v", m.WALFsyncSeconds)
	}

	setMaintenance(t, base, true)
	pushed := time.Now()
	wantStatuses(t, push(t, base, body(item{Queue: "pl", Payload: "held"})), B)
	time.Sleep(300 * time.Millisecond)
	apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
	p := st.Projector
	if p.Backlog != 1 || !p.Paused || !st.Maintenance.Push || p.LagSeconds == nil || *p.LagSeconds < 0.25 || *p.LagSeconds > 30 ||
		p.OldestUnprojectedAt == nil || p.OldestUnprojectedAt.Sub(pushed).Abs() > 5*time.Second {
		t.Errorf("in maintenance with one push held: %+v (lag %v)", p, p.LagSeconds)
	}
	apiPost(t, base, "", "/api/v1/system/maintenance/pop", map[string]any{"enabled": true})
	apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
	if !st.Maintenance.Pop {
		t.Errorf("pop maintenance not reported")
	}
	apiPost(t, base, "", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false})
	setMaintenance(t, base, false)
	waitUntil(t, "the held push projected", func() bool {
		apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
		return st.Projector.Backlog == 0 && st.Projector.Checkpoint == 4 && *st.Projector.LagSeconds == 0
	})

	if err := c.Stop(context.Background(), "immediate"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	apiJSON(t, base, "", "/api/v1/system/pipeline", &st)
	if st.Postgres.Healthy || st.Postgres.Error == "" {
		t.Errorf("PostgreSQL down: %+v", st.Postgres)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the answer took %v with PostgreSQL down, want about the 1 s ping timeout at most", d)
	}
}
