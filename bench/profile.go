package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// profiler captures what a scenario's measured phase spends: a CPU profile
// of the broker (Go's pprof, from the broker's /debug/pprof/profile) and
// PostgreSQL's statements by total execution time (pg_stat_statements,
// reset when the phase starts). It writes DIR/NAME.broker.pprof,
// DIR/NAME.broker.allocs.pprof (the broker's allocations since it started,
// warm-up included, by bytes and objects: `go tool pprof -sample_index=alloc_space`),
// DIR/NAME.bench.pprof (a CPU profile of this process, queen-bench's own
// producers and consumers, over the same seconds as the broker's) and
// DIR/NAME.pgss.txt. A profiled run is slower than a plain one (the
// sampling and statement tracking cost CPU): its figures are for finding
// where time goes, not for the report.
type profiler struct {
	dir, name string
	st        *Stack
	done      chan error
}

// startProfile resets pg_stat_statements on st's database and starts a
// broker CPU profile of d (rounded up to whole seconds). The stack must
// have been started with StackConfig.Profile.
func startProfile(ctx context.Context, st *Stack, dir, name string, d time.Duration) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, st.PGURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil, fmt.Errorf("bench: profile: %w (a -pg server needs shared_preload_libraries=pg_stat_statements)", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	p := &profiler{dir: dir, name: name, st: st, done: make(chan error, 1)}
	secs := int((d + time.Second - 1) / time.Second)
	go func() { p.done <- p.fetchCPU(ctx, secs) }()
	return p, nil
}

func (p *profiler) fetchCPU(ctx context.Context, secs int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	own, err := os.Create(filepath.Join(p.dir, p.name+".bench.pprof"))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(own); err != nil {
		own.Close()
		return fmt.Errorf("bench: own CPU profile: %w", err)
	}
	err = p.fetch(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), ".broker.pprof")
	pprof.StopCPUProfile() // the broker's answer comes when its seconds are over
	if cerr := own.Close(); cerr != nil && err == nil {
		return fmt.Errorf("bench: own CPU profile: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("bench: broker CPU profile: %w", err)
	}
	if err := p.fetch(ctx, "/debug/pprof/allocs", ".broker.allocs.pprof"); err != nil {
		return fmt.Errorf("bench: broker allocation profile: %w", err)
	}
	return nil
}

// fetch writes the broker's pprof answer for path to DIR/NAME+suffix.
func (p *profiler) fetch(ctx context.Context, path, suffix string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.st.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(filepath.Join(p.dir, p.name+suffix))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// finish waits for the CPU profile and writes the statement table: the 25
// statements with the most total execution time, with calls, total and
// mean milliseconds, rows, shared buffer hits and reads, and the first
// 160 characters of the query (whitespace folded).
func (p *profiler) finish(ctx context.Context) error {
	cpuErr := <-p.done
	conn, err := pgx.Connect(ctx, p.st.PGURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT calls, total_exec_time, mean_exec_time, plans, total_plan_time, rows, shared_blks_hit, shared_blks_read, query
		FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 25`)
	if err != nil {
		return err
	}
	defer rows.Close()
	f, err := os.Create(filepath.Join(p.dir, p.name+".pgss.txt"))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(f, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "calls\ttotal ms\tmean ms\tplans\tplan ms\trows\tblks hit\tblks read\t query")
	for rows.Next() {
		var calls, plans, nrows, hit, read int64
		var total, mean, plan float64
		var q string
		if err := rows.Scan(&calls, &total, &mean, &plans, &plan, &nrows, &hit, &read, &q); err != nil {
			f.Close()
			return err
		}
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 160 {
			q = q[:160]
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.3f\t%d\t%.1f\t%d\t%d\t%d\t %s\n", calls, total, mean, plans, plan, nrows, hit, read, q)
	}
	if err := rows.Err(); err != nil {
		f.Close()
		return err
	}
	if err := tw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return cpuErr
}
