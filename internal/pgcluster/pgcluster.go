// Package pgcluster starts throwaway PostgreSQL servers for tests, the
// bench and `queen dev`: initdb into a temporary directory, start on a free
// loopback port, and stop, kill (SIGKILL) or restart them on demand so that
// fault tests can take the database away for real.
//
// The binaries are found in $PG_BIN, on PATH, or in
// /usr/lib/postgresql/*/bin. initdb refuses to run as root, so as root the
// server runs as the "postgres" user through runuser.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is one throwaway PostgreSQL server.
type Cluster struct {
	Dir   string // data directory root (data/ and sock/ inside)
	Port  int
	bin   string
	runAs string // "" or "postgres"
	opts  Options
}

// Options for StartWith. The zero value is what Start uses: a fast,
// non-durable server for tests.
type Options struct {
	// Durable runs the server with PostgreSQL's durable defaults (fsync,
	// synchronous_commit and full_page_writes on), as production would:
	// for benchmarks whose figures are headline figures. Without it the
	// server runs with all three off, which is fine for tests (a crash
	// test kills the server, not the host) but not for measuring.
	Durable bool
	// SharedBuffers is the shared_buffers setting (default
	// DefaultSharedBuffers).
	SharedBuffers string
	// MaxConnections is the max_connections setting (default
	// DefaultMaxConnections).
	MaxConnections int
}

// Defaults for Options.
const (
	DefaultSharedBuffers  = "128MB"
	DefaultMaxConnections = 200
)

// settings are the server's -c options beyond port and sockets.
func (o Options) settings() string {
	if o.SharedBuffers == "" {
		o.SharedBuffers = DefaultSharedBuffers
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	sync := "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	if o.Durable {
		sync = "-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
	}
	return fmt.Sprintf("%s -c max_connections=%d -c shared_buffers=%s", sync, o.MaxConnections, o.SharedBuffers)
}

// URL is a connection URL for database db (default "postgres").
func (c *Cluster) URL(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

func findBin() (string, error) {
	if b := os.Getenv("PG_BIN"); b != "" {
		return b, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(r), nil
		}
		return filepath.Dir(p), nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(m) == 0 {
		return "", errors.New("pgcluster: no PostgreSQL binaries (set PG_BIN or install postgresql)")
	}
	sort.Strings(m)
	return filepath.Dir(m[len(m)-1]), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.runAs != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	}
	return exec.CommandContext(ctx, path, args...)
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := c.cmd(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w: %s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// Start initialises a new cluster under a fresh temporary directory and
// starts it, non-durable (fsync off: see Options). The caller must Destroy
// it.
func Start(ctx context.Context) (*Cluster, error) {
	return StartWith(ctx, Options{})
}

// StartWith is Start with options (a durable server for the bench).
func StartWith(ctx context.Context, o Options) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "queen-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, bin: bin, opts: o}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgcluster: running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		_ = os.Chmod(dir, 0o755)
	}
	if err := c.run(ctx, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.mkSock(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.Restart(ctx); err != nil {
		c.Destroy()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) mkSock() error {
	sock := filepath.Join(c.Dir, "sock")
	if err := os.MkdirAll(sock, 0o755); err != nil {
		return err
	}
	if c.runAs != "" {
		u, _ := user.Lookup(c.runAs)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return os.Chown(sock, uid, gid)
	}
	return nil
}

// Restart starts the server (after Stop or Kill) on its port; a new port
// is picked on first start. It waits until the server accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.Port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		c.Port = p
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 %s",
		c.Port, filepath.Join(c.Dir, "sock"), c.opts.settings())
	if err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "-o", opts,
		"-l", filepath.Join(c.Dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		return err
	}
	return nil
}

// Stop shuts the server down with the given pg_ctl mode ("fast" or
// "immediate": the latter is a crash, as a power cut would be).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	return c.run(ctx, "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "-m", mode, "-w", "-t", "60", "stop")
}

// PostmasterPID is the process id of the running server's postmaster
// (from postmaster.pid); every backend is its child.
func (c *Cluster) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: postmaster.pid: %w", err)
	}
	return pid, nil
}

// Kill crashes the server: SIGKILL to the postmaster and every backend,
// then waits until they are all gone.
func (c *Cluster) Kill() error {
	pid, err := c.PostmasterPID()
	if err != nil {
		return err
	}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	pids := []int{pid}
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for time.Now().Before(deadline) && syscall.Kill(p, 0) == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// CreateDatabase creates database name (for per-package isolation).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return c.run(ctx, "psql", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres", "-d", "postgres",
		"-v", "ON_ERROR_STOP=1", "-c", fmt.Sprintf(`CREATE DATABASE "%s"`, name))
}

// Dump writes database db to a pg_dump archive (custom format) inside the
// cluster's directory and returns its path: a backup taken at this moment.
func (c *Cluster) Dump(ctx context.Context, db string) (string, error) {
	file := filepath.Join(c.Dir, fmt.Sprintf("backup-%s-%d.dump", db, time.Now().UnixNano()))
	err := c.run(ctx, "pg_dump", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres", "-Fc", "-f", file, db)
	return file, err
}

// Restore replaces database db with the archive at file (from Dump): the
// database is dropped (its sessions terminated), created empty and loaded,
// as an operator restoring an older backup would do.
func (c *Cluster) Restore(ctx context.Context, db, file string) error {
	port := strconv.Itoa(c.Port)
	if err := c.run(ctx, "psql", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
		"-c", fmt.Sprintf(`DROP DATABASE IF EXISTS "%s" WITH (FORCE)`, db),
		"-c", fmt.Sprintf(`CREATE DATABASE "%s"`, db)); err != nil {
		return err
	}
	return c.run(ctx, "pg_restore", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", db, "--exit-on-error", file)
}

// Destroy stops the server (immediately) and removes its directory.
func (c *Cluster) Destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Stop(ctx, "immediate")
	os.RemoveAll(c.Dir)
}
