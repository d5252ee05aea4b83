package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestPostgresOutageIsLoggedOnce: PostgreSQL stopped for a few seconds
// (dozens of projector retries, dedup sweeps and retention passes, a
// console's polls, a waiting pop) gives one "lost" line with the error,
// one line for the requests answered 503, one "back" line with how long
// it was away and one "caught up" line with how many records were
// projected; no line per retry or per refused request at info level, and
// no error line (docs/operations.md, "Logs").
func TestPostgresOutageIsLoggedOnce(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := testenv.StartBroker(t, url, "", func(cfg *broker.Config) {
		cfg.Logger = logger
		cfg.RetentionInterval = 200 * time.Millisecond // retention passes during the outage too
	})
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{Queue: "outage", Payload: 0})), ingest.StatusQueued)
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		wantStatuses(t, push(t, base, body(item{Queue: "outage", Payload: i + 1})), ingest.StatusBuffered)
	}
	// 3 s: projector retries every 200 ms (testenv's BackoffMax), dedup
	// sweeps every 200 ms (MaintainInterval), and what an open console
	// tab asks; one waiting pop rides it out and answers 204.
	popped := make(chan int, 1)
	go func() {
		code, _ := do(t, http.MethodGet, base+"/api/v1/pop/queue/outage?wait=true&timeout=2000", "", nil)
		popped <- code
	}()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for _, path := range []string{"/api/v1/resources/overview", "/api/v1/resources/queues"} {
			if code, b := do(t, http.MethodGet, base+path, "", nil); code != http.StatusServiceUnavailable {
				t.Fatalf("GET %s with PostgreSQL down: %d %s", path, code, b)
			}
		}
	}
	if code := <-popped; code != http.StatusNoContent {
		t.Errorf("a waiting pop with PostgreSQL down: %d, want 204", code)
	}
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the backlog to drain", func() bool { return b.Projector.Backlog() == 0 })
	testenv.WaitFor(t, 10*time.Second, "the caught-up line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "caught up")
	})
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	for _, tt := range []struct {
		re   string
		want int
	}{
		{`msg="projector: PostgreSQL lost[^"]*" err="?[^ ]`, 1},
		{`msg="projector: PostgreSQL is back" down_for=[0-9.]+m?s backlog=5`, 1},
		{`msg="projector: caught up after the PostgreSQL outage" records_projected=5 `, 1},
		{`level=WARN msg="http: PostgreSQL unavailable[^"]*" what=`, 1},
		{`retrying`, 0},
		{`dedup sweep`, 0},
		{`retention pass failed`, 0},
		{`level=ERROR`, 0},
	} {
		if n := len(regexp.MustCompile(tt.re).FindAllString(out, -1)); n != tt.want {
			t.Errorf("%d lines match %s, want %d", n, tt.re, tt.want)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", out)
	}
}

// TestDevModeExit: `queen dev` logs the throwaway PostgreSQL's pid and
// data directory, and on exit how many records of the WAL it deletes were
// never projected.
func TestDevModeExit(t *testing.T) {
	t.Parallel()
	p := startDev(t)
	wantStatuses(t, push(t, p.base, body(item{Queue: "dev", Payload: 1})), ingest.StatusQueued)
	setMaintenance(t, p.base, true)
	for i := range 3 {
		wantStatuses(t, push(t, p.base, body(item{Queue: "dev", Payload: i})), ingest.StatusBuffered)
	}
	if code := healthCode(t, p.base); code != http.StatusOK {
		t.Errorf("health %d", code)
	}
	p.term(t)
	out := p.logs()
	up := regexp.MustCompile(`msg="dev: throwaway PostgreSQL is up" url=\S+ pid=([0-9]+) dir=(\S+)`).FindStringSubmatch(out)
	if up == nil || up[1] == "0" {
		t.Fatalf("no pid and dir in the start line:\n%s", out)
	}
	for _, want := range []string{
		"msg=\"dev: deleting the temporary WAL with records that never reached PostgreSQL",
		"unprojected_records=3",
		fmt.Sprintf(`msg="dev: stopping and deleting the throwaway PostgreSQL" pid=%s dir=%s`, up[1], up[2]),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exit logs lack %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(up[2]); !os.IsNotExist(err) {
		t.Errorf("the throwaway PostgreSQL's directory %s is still there: %v", up[2], err)
	}
}

// TestDevModeKilled: `queen dev` killed with kill -9 takes its throwaway
// PostgreSQL with it (the postmaster's parent-death signal) within
// seconds, and the next `queen dev` deletes the two temporary directories
// the dead one left (its PostgreSQL's and its WAL's).
func TestDevModeKilled(t *testing.T) {
	t.Parallel()
	p := startDev(t)
	wantStatuses(t, push(t, p.base, body(item{Queue: "dev", Payload: 1})), ingest.StatusQueued)
	out := p.logs()
	up := regexp.MustCompile(`msg="dev: throwaway PostgreSQL is up" url=\S+ pid=([0-9]+) dir=(\S+)`).FindStringSubmatch(out)
	started := regexp.MustCompile(`msg="broker started" .* wal=(\S+)`).FindStringSubmatch(out)
	if up == nil || started == nil {
		t.Fatalf("no PostgreSQL pid and dir, or no WAL dir, in the logs:\n%s", out)
	}
	pid, _ := strconv.Atoi(up[1])
	pgDir, walDir := up[2], started[1]
	p.kill9(t)
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("the dead queen dev's postmaster (pid %d) to exit", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie no one reaps (as under a container's PID 1).
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	for _, d := range []string{pgDir, walDir} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s is gone already: %v", d, err)
		}
	}
	next := startDev(t)
	for _, d := range []string{pgDir, walDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the dead queen dev's %s is still there: %v", d, err)
		}
		if want := fmt.Sprintf(`msg="dev: deleted the leftover of a queen dev that did not shut down" dir=%s`, d); !strings.Contains(next.logs(), want) {
			t.Errorf("the next queen dev's logs lack %q:\n%s", want, next.logs())
		}
	}
	next.term(t)
}

// startDev runs `queen dev` with no database and no FILE_BUFFER_DIR
// configured and waits until it answers HTTP. Cleanup interrupts it (which
// deletes its PostgreSQL) if the test has not ended it.
func startDev(t *testing.T) *proc {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(brokerBinary(t), "dev")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "QUEEN_PG_URL" && k != "PG_HOST" && k != "FILE_BUFFER_DIR" && k != "HOST" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("PORT=%d", port), "LOG_LEVEL=info")
	p := &proc{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	cmd.Stdout = lockedWriter{p.mu, p.log}
	cmd.Stderr = lockedWriter{p.mu, p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(os.Interrupt) // lets it delete its PostgreSQL
			_, _ = cmd.Process.Wait()
		}
	})
	deadline := time.Now().Add(90 * time.Second) // initdb first
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("queen dev did not start:\n%s", p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

// TestConfigureUnknownOptions: an option name the broker does not know is
// stored nowhere, named in the 200 answer ("ignored", "warning") and
// logged, at most 20 of them; the known options are applied. A 400 would
// break Queen SDK users whose options object carries names this broker
// does not implement; an options object of more than 256 members is one.
func TestConfigureUnknownOptions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := setup(t, func(c *broker.Config) { c.Logger = logger })
	code, rb := post(t, s.base, "/api/v1/configure",
		[]byte(`{"queue":"typo","options":{"leaseTimee":30,"retryLimit":7,"zzz":null,"evictionPolicy":"x"}}`))
	if code != http.StatusOK {
		t.Fatalf("configure: %d %s", code, rb)
	}
	var res struct {
		Ignored []string       `json:"ignored"`
		Warning string         `json:"warning"`
		Options map[string]any `json:"options"`
	}
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Ignored) != "[evictionPolicy leaseTimee zzz]" || !strings.Contains(res.Warning, "leaseTimee") {
		t.Errorf("ignored %v warning %q", res.Ignored, res.Warning)
	}
	if res.Options["retryLimit"] != float64(7) || res.Options["leaseTime"] != float64(300) {
		t.Errorf("options %v: retryLimit 7 applied, leaseTime at its default", res.Options)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, `msg="configure: unknown options ignored" queue=typo ignored="[evictionPolicy leaseTimee zzz]"`) {
		t.Errorf("not logged:\n%s", out)
	}
	// Only known options: no ignored field at all.
	code, rb = post(t, s.base, "/api/v1/configure", []byte(`{"queue":"typo","options":{"leaseTime":30}}`))
	if code != http.StatusOK || strings.Contains(string(rb), "ignored") {
		t.Errorf("configure without unknown options: %d %s", code, rb)
	}
	// Many unknown names: the first 20 (sorted) are named, each cut to 64
	// bytes, and the rest counted; more than 256 members is a 400.
	many := map[string]int{}
	for i := range 200 {
		many[fmt.Sprintf("k%03d%s", i, strings.Repeat("x", 100))] = 1
	}
	b, _ := json.Marshal(map[string]any{"queue": "typo", "options": many})
	code, rb = post(t, s.base, "/api/v1/configure", b)
	res.Ignored, res.Warning = nil, ""
	if code != http.StatusOK || json.Unmarshal(rb, &res) != nil || len(res.Ignored) != 20 ||
		res.Ignored[0] != "k000"+strings.Repeat("x", 60)+"…" || !strings.HasSuffix(res.Warning, "(and 180 more)") {
		t.Errorf("200 unknown options: %d, %d ignored named, first %q, warning ends %q", code, len(res.Ignored),
			res.Ignored, res.Warning[max(0, len(res.Warning)-20):])
	}
	for i := 200; i < 257; i++ {
		many[fmt.Sprintf("k%03d", i)] = 1
	}
	b, _ = json.Marshal(map[string]any{"queue": "typo", "options": many})
	if code, rb := post(t, s.base, "/api/v1/configure", b); code != http.StatusBadRequest ||
		!strings.Contains(string(rb), "options has 257 members; at most 256") {
		t.Errorf("257 options: %d %s, want 400 naming the limit", code, rb)
	}
}

// TestErrorsNameTheProblem: valid JSON of the wrong shape is answered with
// the field and the type it needs, not "malformed JSON"; broken JSON still
// is "malformed JSON".
func TestErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	for _, tt := range []struct {
		path, body, want string
	}{
		{"/api/v1/system/maintenance", `{"enabled":"yes"}`, `{"error":"\"enabled\" must be a boolean, not a string"}`},
		{"/api/v1/configure", `{"queue":5}`, `{"error":"\"queue\" must be a string, not a number"}`},
		{"/api/v1/configure", `{"queue":"q","options":[]}`, `{"error":"\"options\" must be an object, not an array"}`},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":5}]}`, `{"error":"\"acknowledgments[0].transactionId\" must be a string, not a number"}`},
		{"/api/v1/ack/batch", `{"acknowledgments":{}}`, `{"error":"\"acknowledgments\" must be an array, not an object"}`},
		{"/api/v1/configure", `{"queue":"q",}`, `{"error":"malformed JSON"}`},
		{"/api/v1/configure", `[1]`, `{"error":"body must be a JSON object"}`},
		{"/api/v1/system/maintenance", `garbage`, `{"error":"malformed JSON"}`},
		{"/api/v1/transaction", `{"operations":[{"type":"push"}]}`, `{"error":"operations[0].items (an array of push items) is required"}`},
		{"/api/v1/stats/refresh", `{"x":1e400}`, `{"error":"\"x\" is out of range for a number"}`},
	} {
		code, rb := post(t, s.base, tt.path, []byte(tt.body))
		if code != http.StatusBadRequest || string(rb) != tt.want {
			t.Errorf("POST %s %s: %d %s, want 400 %s", tt.path, tt.body, code, rb, tt.want)
		}
	}
}

// TestContentEncodingIs415: the broker decompresses nothing, so a body
// with a Content-Encoding other than identity is 415 with a JSON error and
// Accept-Encoding: identity, on every route; identity is accepted.
func TestContentEncodingIs415(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	send := func(path, enc, b string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", enc)
		resp, err := testenv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		return resp, out.String()
	}
	push := `{"items":[{"queue":"enc","payload":1}]}`
	for _, enc := range []string{"gzip", "br", "deflate", "gzip, identity"} {
		for _, path := range []string{"/api/v1/push", "/api/v1/configure", "/api/v1/ack"} {
			resp, b := send(path, enc, push)
			want := `{"error":"Content-Encoding \"` + enc + `\" is not supported: send the body uncompressed"}`
			if resp.StatusCode != http.StatusUnsupportedMediaType || b != want ||
				resp.Header.Get("Accept-Encoding") != "identity" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s with %s: %d %s %v", path, enc, resp.StatusCode, b, resp.Header)
			}
		}
	}
	if resp, b := send("/api/v1/push", "identity", push); resp.StatusCode != http.StatusCreated {
		t.Errorf("identity: %d %s", resp.StatusCode, b)
	}
	if n := len(readQueue(t, s.store, "enc")); n != 1 {
		t.Errorf("%d messages stored, want only the identity push's", n)
	}
}

// TestMetricsSeriesFromTheStart: a fresh broker's /metrics has every
// documented label value of its counters at 0 (docs/operations.md,
// "Health and metrics"), before any push, pop or ack: a series that
// appears only with its first event makes rate() miss that event, so the
// documented alert on rate(queen_push_items_total{status="failed"}) would
// not fire on the first failures. The label values are taken from the
// code that produces them (ingest's verdicts, pg's ack statuses).
func TestMetricsSeriesFromTheStart(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	code, b := do(t, http.MethodGet, s.base+"/metrics", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	want := []string{"queen_popped_messages_total 0", `queen_projector_batch_seconds_count{outcome="ok"} 0`,
		`queen_projector_batch_seconds_count{outcome="error"} 0`, "queen_pop_answer_pending_bytes 0",
		"queen_pop_one_message_total 0"}
	for _, st := range []ingest.Status{ingest.StatusQueued, ingest.StatusDuplicate, ingest.StatusBuffered, ingest.StatusFailed} {
		want = append(want, fmt.Sprintf(`queen_push_items_total{status=%q} 0`, st))
	}
	for _, st := range []string{pg.AckCompleted, pg.AckSuccess, pg.AckFailed, pg.AckDLQ, pg.AckRetry} {
		for _, r := range []string{"ok", "rejected"} {
			want = append(want, fmt.Sprintf(`queen_acks_total{result=%q,status=%q} 0`, r, st))
		}
	}
	lines := strings.Split(string(b), "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("/metrics of a fresh broker has no line %s", w)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", b)
	}
}
