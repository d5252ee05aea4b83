// Package pgcluster starts throwaway PostgreSQL servers for tests, the
// bench and `queen dev`: initdb into a temporary directory, start on a free
// loopback port, and stop, kill (SIGKILL) or restart them on demand so that
// fault tests can take the database away for real. For failover tests a
// primary (StartPrimary) gets an asynchronous streaming standby
// (StartStandby) whose lag can be forced (PauseWALSenders) before it is
// promoted (Promote).
//
// The binaries are found in $PG_BIN, on PATH, or in
// /usr/lib/postgresql/*/bin. initdb refuses to run as root, so as root the
// server runs as the "postgres" user (the tools through runuser).
//
// The server is this process's child, never a daemon: it is started with
// Linux's parent-death signal (SIGQUIT, PostgreSQL's immediate shutdown),
// so it stops when the process that started it dies, however it dies
// (kill -9 included). What such a process leaves is its directory; each
// directory names its owner process (OwnedTempDir), and RemoveLeftovers
// deletes those whose owner and server are gone.
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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is one throwaway PostgreSQL server.
type Cluster struct {
	Dir  string // data directory root (data/ and sock/ inside)
	Port int
	bin  string
	// cred is the postgres user's uid and gid when this process runs as
	// root (initdb refuses root), else nil: the owner of the directory and
	// socket directory, the server's credential, and whom cmd runs as.
	cred *syscall.Credential
	// extra are server arguments ("-c", "name=value", ...) added to every
	// start.
	extra []string
	opts  Options
	// exited is closed when the server started last by Restart has
	// exited (and been reaped); nil before the first start.
	exited chan struct{}
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
	// StatStatements preloads pg_stat_statements (track = all), so that a
	// profiling run can read per-statement time (the extension itself is
	// created by whoever reads it).
	StatStatements bool
}

// Defaults for Options.
const (
	DefaultSharedBuffers  = "128MB"
	DefaultMaxConnections = 200
)

// settings are the server's -c arguments beyond port and sockets.
func (o Options) settings() []string {
	if o.SharedBuffers == "" {
		o.SharedBuffers = DefaultSharedBuffers
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	sync := "off"
	if o.Durable {
		sync = "on"
	}
	out := []string{"-c", "fsync=" + sync, "-c", "synchronous_commit=" + sync, "-c", "full_page_writes=" + sync,
		"-c", "max_connections=" + strconv.Itoa(o.MaxConnections), "-c", "shared_buffers=" + o.SharedBuffers}
	if o.StatStatements {
		out = append(out, "-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all",
			"-c", "pg_stat_statements.track_planning=on")
	}
	return out
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
	if c.cred != nil {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
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
	return start(ctx, nil)
}

// StartWith is Start with options (a durable server for the bench).
func StartWith(ctx context.Context, o Options) (*Cluster, error) {
	return start(ctx, func(c *Cluster) error { c.opts = o; return nil })
}

// replicationOptions make a server a primary that streaming standbys can
// follow: WAL with enough detail for a standby, a few WAL senders, and
// WAL kept for a standby that falls behind for a while.
var replicationOptions = []string{"-c", "wal_level=replica", "-c", "max_wal_senders=4", "-c", "wal_keep_size=256MB"}

// StartPrimary is Start for a primary that asynchronous streaming standbys
// (StartStandby) can follow: wal_level=replica, max_wal_senders, and a
// pg_hba.conf entry that lets 127.0.0.1 connect for replication. The
// caller must Destroy it.
func StartPrimary(ctx context.Context) (*Cluster, error) {
	return start(ctx, func(c *Cluster) error {
		c.extra = replicationOptions
		f, err := os.OpenFile(filepath.Join(c.Dir, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteString("host replication all 127.0.0.1/32 trust\n"); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// newCluster creates the cluster's temporary directory, owned by the
// postgres user when running as root.
func newCluster() (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := OwnedTempDir(ClusterDirPrefix)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		_ = os.Chmod(dir, 0o755)
	}
	return c, nil
}

// start runs initdb into a new cluster, lets prepare (if not nil) adjust
// the data directory and options, and starts the server.
func start(ctx context.Context, prepare func(*Cluster) error) (*Cluster, error) {
	c, err := newCluster()
	if err != nil {
		return nil, err
	}
	dir := c.Dir
	if err := c.run(ctx, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if prepare != nil {
		if err := prepare(c); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
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
	if c.cred != nil {
		return os.Chown(sock, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

// startTimeout bounds the wait for a started server to accept
// connections (pg_ctl's -t default is 60 s too).
const startTimeout = 60 * time.Second

// Restart starts the server (after Stop or Kill) on its port; a new port
// is picked on first start. It waits until the server accepts connections
// (the postmaster.pid status line says "ready", as pg_ctl -w waits), at
// most 60 s or until ctx ends; on failure the server is stopped and the
// error carries the end of server.log.
//
// The postmaster is started directly as this process's child (not through
// pg_ctl, whose server outlives it), in a session of its own (a terminal's
// Ctrl-C reaches this process alone, which stops the server in order) and
// with the parent-death signal SIGQUIT: when this process dies, kill -9
// included, the server shuts down immediately. Linux sends that signal
// when the forking thread ends, so the fork runs on a goroutine locked to
// its thread that waits for the server's exit.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.Port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		c.Port = p
	}
	args := []string{"-D", filepath.Join(c.Dir, "data"), "-p", strconv.Itoa(c.Port), "-k", filepath.Join(c.Dir, "sock"),
		"-c", "listen_addresses=127.0.0.1"}
	args = append(args, c.opts.settings()...)
	args = append(args, c.extra...)
	// c.cred nil: this process's own credential.
	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGQUIT, Credential: c.cred}
	logPath := filepath.Join(c.Dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = attr
	startedc := make(chan error, 1)
	exited := make(chan struct{})
	go serveChild(cmd, startedc, exited)
	err = <-startedc
	logf.Close() // the server holds its own descriptor
	if err != nil {
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	pid := cmd.Process.Pid
	c.exited = exited
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.ready(pid) {
			return nil
		}
		var why string
		select {
		case <-exited:
			why = "exited while starting"
		case <-ctx.Done():
			why = ctx.Err().Error()
		case <-deadline.C:
			why = fmt.Sprintf("not ready after %s", startTimeout)
		case <-tick.C:
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		<-exited
		log, _ := os.ReadFile(logPath)
		if len(log) > 2000 {
			log = log[len(log)-2000:]
		}
		return fmt.Errorf("pgcluster: postgres on port %d %s: %s", c.Port, why, log)
	}
}

// ServerWaiter is the function of the goroutine that waits for each
// running server (one per server, until it exits): leak checks that may
// see a server start (goleak) ignore it by this name.
const ServerWaiter = "github.com/queenmq/queen-go/internal/pgcluster.serveChild"

// serveChild starts cmd with its goroutine locked to its thread, sends
// the start's error to started, and when it started waits for it to exit
// and closes exited. Linux sends the parent-death signal when the thread
// that forked the child ends, so the thread must live as long as the
// child: the goroutine never unlocks it, and it ends with the goroutine.
func serveChild(cmd *exec.Cmd, started chan<- error, exited chan<- struct{}) {
	runtime.LockOSThread()
	defer close(exited)
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	_ = cmd.Wait()
}

// ready reports whether data/postmaster.pid names pid and says the server
// accepts connections (its status line, the eighth, is "ready").
func (c *Cluster) ready(pid int) bool {
	lines, p, err := readPostmasterPID(c.Dir)
	return err == nil && p == pid && len(lines) >= 8 && strings.TrimSpace(lines[7]) == "ready"
}

// readPostmasterPID reads dir/data/postmaster.pid: its lines and the
// postmaster's pid (the first); an error when the file is missing (no
// server runs) or its first line is not a number.
func readPostmasterPID(dir string) (lines []string, pid int, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return nil, 0, err
	}
	lines = strings.Split(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(lines[0]))
	return lines, pid, err
}

// Stop shuts the server down with the given pg_ctl mode ("fast" or
// "immediate": the latter is a crash, as a power cut would be) and waits
// until its postmaster has exited.
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	if err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return err
	}
	return c.waitExited(ctx)
}

// waitExited waits until the server started last has exited (at once
// when none was started), or ctx ends.
func (c *Cluster) waitExited(ctx context.Context) error {
	if c.exited == nil {
		return nil
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgcluster: postmaster has not exited: %w", ctx.Err())
	}
}

// Pid is the postmaster's process id, from data/postmaster.pid (an error
// when the server is not running).
func (c *Cluster) Pid() (int, error) {
	_, pid, err := readPostmasterPID(c.Dir)
	return pid, err
}

// PostmasterPID is Pid: the process id of the running server's postmaster
// (every backend is its child).
func (c *Cluster) PostmasterPID() (int, error) { return c.Pid() }

// Kill crashes the server: SIGKILL to the postmaster and every backend,
// then waits until they are all gone.
func (c *Cluster) Kill() error {
	pid, err := c.Pid()
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

// psql runs one SQL command against database postgres and returns its
// unaligned, tuples-only output (one row a line, columns split by "|").
func (c *Cluster) psql(ctx context.Context, sql string) (string, error) {
	cmd := c.cmd(ctx, "psql", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres", "-d", "postgres",
		"-v", "ON_ERROR_STOP=1", "-X", "-A", "-t", "-c", sql)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("pgcluster: psql -c %q: %w: %s", sql, err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// StartStandby clones the running primary c (started with StartPrimary)
// with pg_basebackup -R into a new cluster and starts it on another free
// port as an asynchronous streaming standby (hot standby: it answers
// read-only queries). It returns once the standby accepts connections;
// WaitReplicated waits until it has caught up. The caller must Destroy it.
func (c *Cluster) StartStandby(ctx context.Context) (*Cluster, error) {
	s, err := newCluster()
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"-D", filepath.Join(s.Dir, "data"), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		os.RemoveAll(s.Dir)
		return nil, err
	}
	s.extra = replicationOptions // a promoted standby is a primary like the first one
	if err := s.mkSock(); err != nil {
		os.RemoveAll(s.Dir)
		return nil, err
	}
	if err := s.Restart(ctx); err != nil {
		s.Destroy()
		return nil, err
	}
	return s, nil
}

// WaitReplicated waits until every standby streaming from the primary c
// has replayed the WAL c had inserted when it was called (the insert
// position, not the write position: with synchronous_commit off, as test
// clusters run, a commit may still sit in the WAL buffers) (at least one
// standby must be streaming), polling every 20 ms until ctx ends.
func (c *Cluster) WaitReplicated(ctx context.Context) error {
	target, err := c.psql(ctx, "SELECT pg_current_wal_insert_lsn()")
	if err != nil {
		return err
	}
	q := fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE state = 'streaming' AND replay_lsn >= '%s') FROM pg_stat_replication", target)
	for {
		out, err := c.psql(ctx, q)
		if err != nil {
			return err
		}
		if n, caught, ok := strings.Cut(out, "|"); ok && n != "0" && n == caught {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: standby has not replayed up to %s (pg_stat_replication: %s): %w", target, out, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PauseWALSenders stops (SIGSTOP) the primary's WAL sender processes, the
// pids pg_stat_replication lists, so that its standbys stop receiving WAL
// while the primary keeps committing: the lag of an asynchronous standby,
// forced. resume sends SIGCONT to the same processes. At least one WAL
// sender must exist.
func (c *Cluster) PauseWALSenders(ctx context.Context) (resume func() error, err error) {
	out, err := c.psql(ctx, "SELECT pid FROM pg_stat_replication")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("pgcluster: WAL sender pid %q: %w", f, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		return nil, errors.New("pgcluster: no WAL sender to pause (no standby streaming)")
	}
	signal := func(sig syscall.Signal) error {
		var errs []error
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("pgcluster: signal %v to WAL sender %d: %w", sig, pid, err))
			}
		}
		return errors.Join(errs...)
	}
	if err := signal(syscall.SIGSTOP); err != nil {
		_ = signal(syscall.SIGCONT)
		return nil, err
	}
	return func() error { return signal(syscall.SIGCONT) }, nil
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	return c.run(ctx, "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "-w", "-t", "60", "promote")
}

// FailoverDSN is a libpq key/value connection string for database db that
// names every cluster in cs, in order, with target_session_attrs=read-write:
// a client tries them in turn and keeps the first one that accepts writes
// (the primary, or a standby once promoted).
func FailoverDSN(db string, cs ...*Cluster) string {
	hosts := make([]string, len(cs))
	ports := make([]string, len(cs))
	for i, c := range cs {
		hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(c.Port)
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), db)
}

// Pause freezes the server without stopping it, as a hung host or a
// stalled disk would: SIGSTOP to the postmaster (first, so that it forks no
// new backend) and then to every process it has started. Connections stay
// open and connection attempts are accepted by the kernel, but nothing is
// ever answered until Resume. Call Resume before Destroy (register it with
// t.Cleanup), or the stopped processes outlive the test.
func (c *Cluster) Pause() error {
	return c.signalAll(syscall.SIGSTOP)
}

// Resume undoes Pause (SIGCONT to the postmaster and its children). It is
// harmless on a server that is not paused.
func (c *Cluster) Resume() error {
	return c.signalAll(syscall.SIGCONT)
}

// signalAll sends sig to the postmaster, then to its children.
func (c *Cluster) signalAll(sig syscall.Signal) error {
	pid, err := c.Pid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("pgcluster: signal postmaster %d: %w", pid, err)
	}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(n, sig)
		}
	}
	return nil
}
