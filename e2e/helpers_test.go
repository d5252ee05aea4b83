// Package e2e drives whole brokers over HTTP against a real PostgreSQL: the
// push contract of docs/push.md (its cases in push_cases_test.go) and its
// durability claims (docs/push.md, "Durability"), with PostgreSQL really
// stopped and killed, brokers really killed, WAL files really cut and disks
// really filled.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

type item struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition,omitempty"`
	Payload       any    `json:"payload"`
	TransactionID string `json:"transactionId,omitempty"`
}

func body(items ...item) []byte {
	b, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		panic(err)
	}
	return b
}

// post sends body to path and returns the status and response body.
func post(t testing.TB, base, path string, b []byte) (int, []byte) {
	t.Helper()
	resp, err := testenv.Client.Post(base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return resp.StatusCode, rb
}

// push posts a push body and requires 201; it returns the verdicts.
func push(t testing.TB, base string, b []byte) []ingest.Result {
	t.Helper()
	code, rb := post(t, base, "/api/v1/push", b)
	if code != http.StatusCreated {
		t.Fatalf("push: status %d body %s", code, rb)
	}
	var res []ingest.Result
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatalf("push: decode %s: %v", rb, err)
	}
	return res
}

func statuses(res []ingest.Result) []ingest.Status {
	out := make([]ingest.Status, len(res))
	for i, r := range res {
		out[i] = r.Status
	}
	return out
}

func wantStatuses(t testing.TB, res []ingest.Result, want ...ingest.Status) {
	t.Helper()
	got := statuses(res)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses = %v, want %v", got, want)
	}
}

func configure(t testing.TB, base, queue string, options map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"queue": queue, "options": options})
	code, rb := post(t, base, "/api/v1/configure", b)
	if code != http.StatusOK {
		t.Fatalf("configure %s: %d %s", queue, code, rb)
	}
}

func setMaintenance(t testing.TB, base string, on bool) {
	t.Helper()
	code, rb := post(t, base, "/api/v1/system/maintenance", []byte(fmt.Sprintf(`{"enabled":%v}`, on)))
	if code != http.StatusOK {
		t.Fatalf("maintenance: %d %s", code, rb)
	}
}

func healthCode(t testing.TB, base string) int {
	t.Helper()
	resp, err := testenv.Client.Get(base + "/health")
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// openStore opens a pg.Store for reading back what was stored.
func openStore(t testing.TB, url string) *pg.Store {
	t.Helper()
	return testenv.OpenStore(t, pg.Config{URL: url, PoolSize: 4})
}

func readPartition(t testing.TB, s *pg.Store, queue, partition string) []pg.StoredMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := s.ReadPartition(ctx, queue, partition)
	if err != nil {
		t.Fatalf("read %s/%s: %v", queue, partition, err)
	}
	return m
}

func readQueue(t testing.TB, s *pg.Store, queue string) []pg.StoredMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := s.ReadQueue(ctx, queue)
	if err != nil {
		t.Fatalf("read %s: %v", queue, err)
	}
	return m
}

func txids(msgs []pg.StoredMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.TransactionID
	}
	return out
}

// --- the broker as a separate process, for kill -9 tests ---

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func brokerBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "queen-e2e-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "queen")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/queenmq/queen-go/cmd/queen").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a broker running as a child process.
type proc struct {
	cmd  *exec.Cmd
	base string
	log  *bytes.Buffer
	mu   *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startProc runs the broker binary with env (added to the environment) and
// waits until it answers HTTP.
func startProc(t testing.TB, pgURL, walDir string, port int, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(brokerBinary(t))
	cmd.Env = append(os.Environ(), "QUEEN_PG_URL="+pgURL, "FILE_BUFFER_DIR="+walDir,
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	cmd.Stdout = lockedWriter{p.mu, p.log}
	cmd.Stderr = lockedWriter{p.mu, p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker did not start: %s", p.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill9 sends SIGKILL and waits for the process to end.
func (p *proc) kill9(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()
}

// term sends SIGTERM and waits for a clean exit.
func (p *proc) term(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("broker exit: %v\n%s", err, p.logs())
	}
}
