package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/queen-go/internal/pgcluster"
)

// Stack timeouts.
const (
	// brokerStartTimeout bounds the wait for a new broker's GET /health.
	brokerStartTimeout = 60 * time.Second
	// brokerStopTimeout is how long a broker gets to shut down on SIGTERM
	// before it is killed.
	brokerStopTimeout = 30 * time.Second
	// logTail is how much of the broker's log an error quotes.
	logTail = 2000
)

// ErrBrokerStart is returned (wrapped) by StartStack when the broker does
// not come up; the error quotes the end of its log.
var ErrBrokerStart = errors.New("bench: broker did not start")

// StackConfig says how StartStack builds the broker and database of one
// scenario.
type StackConfig struct {
	// BrokerBin is the broker binary (the queen command); required.
	BrokerBin string
	// PGURL is an existing PostgreSQL server: each stack gets a database of
	// its own there, dropped by Stop. Empty: each stack starts a
	// throwaway cluster of its own (initdb into a temporary directory).
	PGURL string
	// PostmasterPID is, with PGURL, that server's postmaster on this host,
	// for its CPU; 0 leaves PostgreSQL's CPU unmeasured.
	PostmasterPID int
	// NonDurable starts the throwaway cluster with fsync,
	// synchronous_commit and full_page_writes off. Default false: durable,
	// PostgreSQL's own defaults. Ignored with PGURL (whose settings are
	// read and reported as they are).
	NonDurable bool
	// BrokerEnv is extra environment for the broker (QUEEN_… settings);
	// PORT, HOST, QUEEN_PG_URL and FILE_BUFFER_DIR are set by the stack.
	BrokerEnv []string
	// Profile makes the stack profilable: the broker serves
	// /debug/pprof/ (QUEEN_PPROF=true) and the throwaway cluster preloads
	// pg_stat_statements.
	Profile bool
}

// Stack is one fresh broker, run as a child process so that its memory
// and CPU can be read from /proc, with a fresh database and a fresh WAL
// directory.
type Stack struct {
	// URL is the broker's base URL (loopback, a free port).
	URL string
	// PGURL is the database the broker uses.
	PGURL string
	// BrokerPID is the broker's process id.
	BrokerPID int
	// PostmasterPID is the PostgreSQL server's postmaster, 0 when unknown.
	PostmasterPID int

	dir              string // WAL dir and broker log
	cluster          *pgcluster.Cluster
	adminURL, dbName string
	cmd              *exec.Cmd
	exited           chan struct{} // closed when the broker process has exited
	waitErr          error
	stopped          bool
}

// StartStack starts a fresh database and a broker on it. The caller must
// Stop it, also after an error of a later step.
func StartStack(ctx context.Context, cfg StackConfig) (*Stack, error) {
	if cfg.BrokerBin == "" {
		return nil, fmt.Errorf("%w: no broker binary", ErrConfig)
	}
	dir, err := os.MkdirTemp("", "queen-bench-")
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: dir}
	if err := s.startDatabase(ctx, cfg); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.startBroker(ctx, cfg); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) startDatabase(ctx context.Context, cfg StackConfig) error {
	if cfg.PGURL == "" {
		c, err := pgcluster.StartWith(ctx, pgcluster.Options{Durable: !cfg.NonDurable, StatStatements: cfg.Profile})
		if err != nil {
			return err
		}
		s.cluster = c
		s.PGURL = c.URL("postgres")
		s.PostmasterPID, err = c.PostmasterPID()
		return err
	}
	u, err := url.Parse(cfg.PGURL)
	if err != nil {
		return fmt.Errorf("%w: -pg: %v", ErrConfig, err)
	}
	s.adminURL = cfg.PGURL
	s.dbName = "queenbench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{s.dbName}.Sanitize()); err != nil {
		s.dbName = ""
		return fmt.Errorf("bench: create database: %w", err)
	}
	u.Path = "/" + s.dbName
	s.PGURL = u.String()
	s.PostmasterPID = cfg.PostmasterPID
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Stack) startBroker(ctx context.Context, cfg StackConfig) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	walDir := filepath.Join(s.dir, "wal")
	logPath := filepath.Join(s.dir, "broker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(cfg.BrokerBin)
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "QUEEN_PG_URL" || strings.HasPrefix(k, "PG_") || k == "FILE_BUFFER_DIR" || k == "PORT" || k == "HOST" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LOG_LEVEL=warn")
	if cfg.Profile {
		env = append(env, "QUEEN_PPROF=true")
	}
	env = append(env, cfg.BrokerEnv...)
	env = append(env, "PORT="+strconv.Itoa(port), "HOST=127.0.0.1", "QUEEN_PG_URL="+s.PGURL, "FILE_BUFFER_DIR="+walDir)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %v", ErrBrokerStart, err)
	}
	s.cmd, s.BrokerPID, s.exited = cmd, cmd.Process.Pid, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(brokerStartTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("%w: exited (%v): %s", ErrBrokerStart, s.waitErr, s.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(s.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no healthy answer within %s: %s", ErrBrokerStart, brokerStartTimeout, s.LogTail())
		}
	}
}

// LogTail is the end of the broker's log (stdout and stderr).
func (s *Stack) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "broker.log"))
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	return string(bytes.TrimSpace(b))
}

// StopBroker stops the broker: SIGTERM, and SIGKILL after
// brokerStopTimeout. Idempotent; an error says the broker did not stop
// cleanly.
func (s *Stack) StopBroker() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(brokerStopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.exited
			return fmt.Errorf("bench: broker did not stop within %s; killed", brokerStopTimeout)
		}
	}
	if s.waitErr != nil {
		return fmt.Errorf("bench: broker exited: %v: %s", s.waitErr, s.LogTail())
	}
	return nil
}

// Stop stops the broker, then drops the database (or destroys the
// throwaway cluster), then removes the WAL directory. Idempotent.
func (s *Stack) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.StopBroker()
	if s.cluster != nil {
		s.cluster.Destroy()
	}
	if s.dbName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if conn, err := pgx.Connect(ctx, s.adminURL); err == nil {
			_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{s.dbName}.Sanitize()+` WITH (FORCE)`)
			conn.Close(ctx)
		}
		cancel()
	}
	os.RemoveAll(s.dir)
}
