package pg_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/pg"
)

// BenchmarkProject is one Project call against a real PostgreSQL (the test
// cluster: fsync off, so it measures statements and round trips, not
// commit flushes): a batch as the 64 × 1 bench produces it (24 items over
// 6 of 10 partitions) and as the 8 × 100 one does (800 items over 10
// partitions), with broker-minted ids and with client transactionIds.
func BenchmarkProject(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	payload := []byte(`{"p":"` + fmt.Sprintf("%0248d", 0) + `"}`)
	broker := uuid.New()
	var wal uint64
	seq := 0 // client transactionIds are unique over the whole run
	for _, c := range []struct{ items, parts int }{{24, 6}, {800, 10}} {
		for _, minted := range []bool{true, false} {
			b.Run(fmt.Sprintf("items=%d/parts=%d/minted=%v", c.items, c.parts, minted), func(b *testing.B) {
				items := make([]pg.ProjectItem, c.items)
				fill := func() {
					now := time.Now().UnixMicro()
					for i := range items {
						id, _ := uuid.NewV7()
						tx := id.String()
						if !minted {
							seq++
							tx = fmt.Sprintf("bench-%d", seq)
						}
						items[i] = pg.ProjectItem{Queue: "bench", Partition: fmt.Sprintf("p%d", (i+seq)%10%c.parts),
							AcceptedAtMicros: now, Message: pg.Message{ID: id, TransactionID: tx, CreatedAtMicros: now, Payload: payload}}
					}
				}
				fill()
				wal++
				if _, err := s.Project(ctx, broker, pg.Checkpoint{Index: wal}, items); err != nil {
					b.Fatal(err)
				}
				measureProject(ctx, b, s, broker, &wal, func() []pg.ProjectItem { fill(); return items })
			})
		}
	}
}

// resetStatements resets pg_stat_statements when the server has it loaded
// (TEST_DATABASE_URL naming a server with shared_preload_libraries =
// pg_stat_statements) and reports whether it does.
func resetStatements(ctx context.Context, s *pg.Store) bool {
	if _, err := s.Pool().Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	_, err := s.Pool().Exec(ctx, `SELECT pg_stat_statements_reset()`)
	return err == nil
}

// reportStatements reports PostgreSQL's statement time per op (top-level
// execution plus planning, this database only) and the top-level
// statements per op.
func reportStatements(ctx context.Context, b *testing.B, s *pg.Store) {
	var ms, calls float64
	err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(total_exec_time + total_plan_time), 0), coalesce(sum(calls), 0)
		FROM pg_stat_statements WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat_statements%'`).Scan(&ms, &calls)
	if err != nil && err != pgx.ErrNoRows {
		b.Logf("pg_stat_statements: %v", err)
		return
	}
	b.ReportMetric(ms*1000/float64(b.N), "pg-µs/op")
	b.ReportMetric(calls/float64(b.N), "stmts/op")
}

// backendCPU is the CPU time (ns, from /proc at clock-tick resolution) of
// the server processes connected to s's database, or -1 when it cannot be
// read (a remote server).
func backendCPU(ctx context.Context, s *pg.Store) int64 {
	rows, err := s.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return -1
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return -1
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return -1
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return ticks * 10_000_000 // USER_HZ 100
}

// measureProject times b.N Project calls of broker, each of the batch
// next returns (built outside the timer) at the next WAL index (*wal), and
// reports PostgreSQL's CPU per call (pg-cpu-µs/op, the test database's
// backends from /proc) and, with pg_stat_statements, the statements.
func measureProject(ctx context.Context, b *testing.B, s *pg.Store, broker uuid.UUID, wal *uint64, next func() []pg.ProjectItem) {
	pgss := resetStatements(ctx, s)
	cpu0 := backendCPU(ctx, s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		batch := next()
		*wal++
		b.StartTimer()
		if _, err := s.Project(ctx, broker, pg.Checkpoint{Index: *wal}, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if cpu0 >= 0 {
		b.ReportMetric(float64(backendCPU(ctx, s)-cpu0)/float64(b.N)/1000, "pg-cpu-µs/op")
	}
	if pgss {
		reportStatements(ctx, b, s)
	}
}

// BenchmarkProjectSpread is one Project call over many partitions, as the
// 16 × 100 bench over 10,000 partitions produces it: 800 items, two to a
// partition, over 400 of 10,000 partitions (all created and written once
// before the timer starts, so the partition and segment indexes have
// their size), the next batch over the next 400; with broker-minted ids
// and with client transactionIds. pg-cpu-µs/op is PostgreSQL's CPU per
// batch (the backends of the test database, from /proc).
func BenchmarkProjectSpread(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	payload := []byte(`{"p":"` + fmt.Sprintf("%0248d", 0) + `"}`)
	broker := uuid.New()
	const total, perBatch, items = 10000, 400, 800
	var wal uint64
	seq, part := 0, 0
	fill := func(batch []pg.ProjectItem, minted bool) {
		now := time.Now().UnixMicro()
		for i := range batch {
			id, _ := uuid.NewV7()
			tx := id.String()
			if !minted {
				seq++
				tx = fmt.Sprintf("bench-%d", seq)
			}
			batch[i] = pg.ProjectItem{Queue: "bench", Partition: fmt.Sprintf("p%d", part%total),
				AcceptedAtMicros: now, Message: pg.Message{ID: id, TransactionID: tx, CreatedAtMicros: now, Payload: payload}}
			if i%2 == 1 {
				part++
			}
		}
	}
	// Every partition created and written once.
	for part < total {
		batch := make([]pg.ProjectItem, items)
		fill(batch, true)
		wal++
		if _, err := s.Project(ctx, broker, pg.Checkpoint{Index: wal}, batch); err != nil {
			b.Fatal(err)
		}
	}
	for _, minted := range []bool{true, false} {
		b.Run(fmt.Sprintf("items=%d/parts=%d-of-%d/minted=%v", items, perBatch, total, minted), func(b *testing.B) {
			batch := make([]pg.ProjectItem, items)
			measureProject(ctx, b, s, broker, &wal, func() []pg.ProjectItem { fill(batch, minted); return batch })
		})
	}
}
