package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

// TestPostgresOutageIsLoggedOnce: PostgreSQL stopped for a few seconds
// (dozens of projector retries) gives one "lost" line with the error, one
// "back" line with how long it was away and one "caught up" line with how
// many records were projected; no line per retry at info level.
func TestPostgresOutageIsLoggedOnce(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := testenv.StartBroker(t, url, "", func(cfg *broker.Config) { cfg.Logger = logger })
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{Queue: "outage", Payload: 0})), ingest.StatusQueued)
	if err := c.Stop(context.Background(), "fast"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		wantStatuses(t, push(t, base, body(item{Queue: "outage", Payload: i + 1})), ingest.StatusBuffered)
	}
	time.Sleep(3 * time.Second) // retries every 200 ms (testenv's BackoffMax)
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
		{`retrying`, 0},
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
