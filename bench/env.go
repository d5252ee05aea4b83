package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/procfs"
)

// Machine describes the host a scenario ran on.
type Machine struct {
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	Cores    int    `json:"cores"` // logical CPUs
	MemBytes uint64 `json:"mem_bytes"`
	// Disks is lsblk's view of the block devices (name, model, rotational,
	// type, size, transport), one per line; empty without lsblk.
	Disks string `json:"disks,omitempty"`
	// DataFS is the filesystem holding the temporary directory (where the
	// throwaway cluster and the broker's WAL live): source and type.
	DataFS string `json:"data_fs,omitempty"`
	// LoadAvg is the 1-minute load average when the scenario started: on a
	// machine shared with other work, figures are not headline figures.
	LoadAvg   float64 `json:"load_avg_1m"`
	GoVersion string  `json:"go_version"`
}

// readMachine describes this host; what it cannot read stays empty.
func readMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if ci, err := fs.CPUInfo(); err == nil && len(ci) > 0 {
			m.CPUModel = ci[0].ModelName
		}
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotal != nil {
			m.MemBytes = *mi.MemTotal * 1024
		}
		if la, err := fs.LoadAvg(); err == nil {
			m.LoadAvg = la.Load1
		}
	}
	if out, err := exec.Command("lsblk", "-d", "-n", "-o", "NAME,MODEL,ROTA,TYPE,SIZE,TRAN").Output(); err == nil {
		m.Disks = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", os.TempDir()).Output(); err == nil {
		m.DataFS = strings.TrimSpace(string(out))
	}
	return m
}

// Commit is the source the broker was built from.
type Commit struct {
	Hash string `json:"hash,omitempty"`
	// Dirty: the work tree had uncommitted changes.
	Dirty bool `json:"dirty,omitempty"`
}

// readCommit asks git about the current directory's checkout; Dirty
// counts changes to tracked files other than the bench's own report.
func readCommit() Commit {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return Commit{}
	}
	c := Commit{Hash: strings.TrimSpace(string(out))}
	// The report's own files (BENCHMARKS.md, docs/bench/) change while a
	// run writes them; they say nothing of the broker's source.
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--",
		".", ":(exclude)BENCHMARKS.md", ":(exclude)docs/bench").Output(); err == nil {
		c.Dirty = len(strings.TrimSpace(string(st))) > 0
	}
	return c
}

// pgSettingNames are the server settings a result records: what decides
// durability, and what shapes throughput.
var pgSettingNames = []string{
	"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "wal_level",
	"shared_buffers", "wal_buffers", "max_wal_size", "checkpoint_timeout", "commit_delay",
	"work_mem", "max_connections", "autovacuum",
}

// PGInfo is the server's version and settings.
type PGInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
}

// Durable reports whether the settings keep a commit through a power
// loss: fsync and full_page_writes on, synchronous_commit not off.
func (p PGInfo) Durable() bool {
	s := p.Settings
	return s["fsync"] == "on" && s["full_page_writes"] == "on" && s["synchronous_commit"] != "off" && s["synchronous_commit"] != ""
}

func readPGInfo(ctx context.Context, conn *pgx.Conn) (PGInfo, error) {
	info := PGInfo{Settings: map[string]string{}}
	if err := conn.QueryRow(ctx, `SHOW server_version`).Scan(&info.Version); err != nil {
		return info, err
	}
	rows, err := conn.Query(ctx, `SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name = ANY($1)`, pgSettingNames)
	if err != nil {
		return info, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, setting, unit string
		if err := rows.Scan(&name, &setting, &unit); err != nil {
			return info, err
		}
		info.Settings[name] = humanSetting(setting, unit)
	}
	return info, rows.Err()
}

// humanSetting spells a pg_settings value with its unit: "16384" "8kB"
// becomes "128MB".
func humanSetting(v, unit string) string {
	var mult int64
	switch unit {
	case "":
		return v
	case "8kB":
		mult = 8 << 10
	case "kB":
		mult = 1 << 10
	case "MB":
		mult = 1 << 20
	case "B":
		mult = 1
	default:
		return v + unit // s, ms, min
	}
	var n int64
	if _, err := fmt.Sscan(v, &n); err != nil || n < 0 {
		return v + " " + unit
	}
	b := n * mult
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dkB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// StorageSizes is what the broker's tables take in PostgreSQL, in bytes
// (pg_total_relation_size: heap, TOAST and indexes; a partitioned table
// counts its partitions).
type StorageSizes struct {
	// SegmentsBytes: queen.segments, the messages packed per segment.
	SegmentsBytes int64 `json:"segments_bytes"`
	// DedupBytes: the dedup window's sidecar, queen.dedup_batches (and an
	// upgraded database's queen.dedup_runs) plus
	// queen.dedup (exact keys kept past a segment's retention).
	DedupBytes int64 `json:"dedup_bytes"`
	// SchemaBytes: every table of schema queen.
	SchemaBytes int64 `json:"schema_bytes"`
}

// readSizes measures StorageSizes; a table that does not exist counts 0.
func readSizes(ctx context.Context, conn *pgx.Conn) (StorageSizes, error) {
	var s StorageSizes
	// The table and, when partitioned (by time, say), its partitions.
	tree := `WITH RECURSIVE t(oid) AS (
			SELECT to_regclass($1)::oid
			UNION ALL SELECT i.inhrelid FROM pg_inherits i JOIN t ON i.inhparent = t.oid)
		SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM t WHERE oid IS NOT NULL`
	if err := conn.QueryRow(ctx, tree, "queen.segments").Scan(&s.SegmentsBytes); err != nil {
		return s, fmt.Errorf("bench: size of queen.segments: %w", err)
	}
	for _, table := range []string{"queen.dedup_batches", "queen.dedup_runs", "queen.dedup"} {
		var n int64
		if err := conn.QueryRow(ctx, tree, table).Scan(&n); err != nil {
			return s, fmt.Errorf("bench: size of %s: %w", table, err)
		}
		s.DedupBytes += n
	}
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'm')`).Scan(&s.SchemaBytes)
	if err != nil {
		return s, fmt.Errorf("bench: size of schema queen: %w", err)
	}
	return s, nil
}

// nowUTC is the time a result is stamped with.
func nowUTC() time.Time { return time.Now().UTC().Truncate(time.Second) }
