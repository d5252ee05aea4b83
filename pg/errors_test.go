package pg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenmq/queen-go/pg"
)

// TestClassifyRealErrors: errors a real PostgreSQL produces, provoked one
// by one, each wrapped as the Store wraps them, land in their class. Only
// the connection-level ones are ClassUnavailable.
func TestClassifyRealErrors(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	pool := s.Pool()
	ctx := context.Background()
	exec := func(sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	if err := exec(`CREATE TABLE t (id int PRIMARY KEY, v int)`); err != nil {
		t.Fatal(err)
	}
	if err := exec(`INSERT INTO t VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want pg.Class
		err  func(t *testing.T) error
	}{
		{"foreign key violation (a queue deleted under a pop)", pg.ClassVanished, func(t *testing.T) error {
			return exec(`INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_mode) VALUES ($1, 'g', 'all')`, uuid.New())
		}},
		{"a NUL character in a text parameter", pg.ClassInvalidText, func(t *testing.T) error {
			return exec(`SELECT $1::text`, "a\x00b")
		}},
		{"serialization failure", pg.ClassConflict, func(t *testing.T) error { return serializationFailure(t, pool) }},
		{"deadlock", pg.ClassConflict, func(t *testing.T) error { return deadlock(t, pool) }},
		{"statement timeout", pg.ClassUnavailable, func(t *testing.T) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '20ms'`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT pg_sleep(2)`)
				return err
			})
		}},
		{"request deadline", pg.ClassUnavailable, func(t *testing.T) error {
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := pool.Exec(c, `SELECT pg_sleep(2)`)
			return err
		}},
		{"read-only transaction (a standby)", pg.ClassUnavailable, func(t *testing.T) error {
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE t SET v = 1`)
				return err
			})
		}},
		{"backend terminated", pg.ClassUnavailable, func(t *testing.T) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			var pid int
			if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			if err := exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			_, err = conn.Exec(ctx, `SELECT 1`)
			return err
		}},
		{"nothing listens", pg.ClassUnavailable, func(t *testing.T) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			other, err := pg.Open(pg.Config{URL: "postgres://postgres@" + addr + "/postgres?sslmode=disable"})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			return other.Ping(ctx)
		}},
		{"database does not exist", pg.ClassUnavailable, func(t *testing.T) error {
			c := pool.Config().ConnConfig
			u := fmt.Sprintf("postgres://%s@%s/no_such_database_%d?sslmode=disable", c.User, net.JoinHostPort(c.Host, fmt.Sprint(c.Port)), time.Now().UnixNano())
			other, err := pg.Open(pg.Config{URL: u})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			return other.Ping(ctx)
		}},
		{"closed pool", pg.ClassUnavailable, func(t *testing.T) error {
			other, err := pg.Open(pg.Config{URL: pool.Config().ConnString()})
			if err != nil {
				t.Fatal(err)
			}
			other.Close()
			return other.Ping(ctx)
		}},
		{"unique violation", pg.ClassInternal, func(t *testing.T) error { return exec(`INSERT INTO t VALUES (1, 0)`) }},
		{"syntax error", pg.ClassInternal, func(t *testing.T) error { return exec(`SELEC 1`) }},
		{"undefined table", pg.ClassInternal, func(t *testing.T) error { return exec(`SELECT * FROM no_such_table`) }},
		{"invalid input", pg.ClassInternal, func(t *testing.T) error { return exec(`SELECT 'x'::int`) }},
		{"division by zero", pg.ClassInternal, func(t *testing.T) error { return exec(`SELECT 1/0`) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err(t)
			if err == nil {
				t.Fatal("no error provoked")
			}
			for _, e := range []error{err, fmt.Errorf("pg: pop: %w", err)} {
				if got := pg.Classify(e); got != tt.want {
					t.Errorf("Classify(%v) = %s, want %s", e, got, tt.want)
				}
			}
			if pg.IsUnavailable(err) != (tt.want == pg.ClassUnavailable) {
				t.Errorf("IsUnavailable(%v) = %v", err, pg.IsUnavailable(err))
			}
		})
	}
	// The pool still works after all that.
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// serializationFailure provokes SQLSTATE 40001: a repeatable-read
// transaction updates a row that another transaction changed after its
// snapshot was taken.
func serializationFailure(t *testing.T, pool *pgxpool.Pool) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var v int
	if err := tx.QueryRow(ctx, `SELECT v FROM t WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = 1`)
	return err
}

// deadlock provokes SQLSTATE 40P01: two transactions lock rows 1 and 2 in
// opposite orders; PostgreSQL aborts one after deadlock_timeout (1 s by
// default). It returns the aborted one's error.
func deadlock(t *testing.T, pool *pgxpool.Pool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	locked := make(chan struct{}, 2)
	errs := make([]error, 2)
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `SELECT 1 FROM t WHERE id = $1 FOR UPDATE`, order[0]); err != nil {
					return err
				}
				locked <- struct{}{}
				for len(locked) < 2 && ctx.Err() == nil { // both hold their first row
					time.Sleep(time.Millisecond)
				}
				if _, err := tx.Exec(ctx, `SELECT 1 FROM t WHERE id = $1 FOR UPDATE`, order[1]); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}()
		}()
	}
	wg.Wait()
	switch {
	case errs[0] != nil && errs[1] == nil:
		return errs[0]
	case errs[1] != nil && errs[0] == nil:
		return errs[1]
	}
	t.Fatalf("want exactly one transaction aborted, got %v and %v", errs[0], errs[1])
	return nil
}

// TestClassifyCodes: the SQLSTATEs the rules name, and errors that are
// not the server's, as constructed values (a real deadlock or admin
// shutdown is hard to time; TestClassifyRealErrors covers what can be
// provoked).
func TestClassifyCodes(t *testing.T) {
	t.Parallel()
	pgErr := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	tests := []struct {
		name string
		err  error
		want pg.Class
	}{
		{"nil", nil, pg.ClassNone},
		{"connection failure 08006", pgErr("08006"), pg.ClassUnavailable},
		{"connection does not exist 08003", pgErr("08003"), pg.ClassUnavailable},
		{"cannot connect 08001", pgErr("08001"), pg.ClassUnavailable},
		{"too many connections 53300", pgErr("53300"), pg.ClassUnavailable},
		{"disk full 53100", pgErr("53100"), pg.ClassUnavailable},
		{"out of memory 53200", pgErr("53200"), pg.ClassUnavailable},
		{"admin shutdown 57P01", pgErr("57P01"), pg.ClassUnavailable},
		{"crash shutdown 57P02", pgErr("57P02"), pg.ClassUnavailable},
		{"cannot connect now 57P03", pgErr("57P03"), pg.ClassUnavailable},
		{"query canceled 57014", pgErr("57014"), pg.ClassUnavailable},
		{"read only 25006", pgErr("25006"), pg.ClassUnavailable},
		{"serialization failure 40001", pgErr("40001"), pg.ClassConflict},
		{"deadlock 40P01", pgErr("40P01"), pg.ClassConflict},
		{"foreign key 23503", pgErr("23503"), pg.ClassVanished},
		{"NUL or invalid UTF-8 22021", pgErr("22021"), pg.ClassInvalidText},
		{"untranslatable character 22P05", pgErr("22P05"), pg.ClassInvalidText},
		{"unique 23505", pgErr("23505"), pg.ClassInternal},
		{"check 23514", pgErr("23514"), pg.ClassInternal},
		{"undefined table 42P01", pgErr("42P01"), pg.ClassInternal},
		{"internal XX000", pgErr("XX000"), pg.ClassInternal},
		{"data corrupted XX001", pgErr("XX001"), pg.ClassInternal},
		{"lock not available 55P03", pgErr("55P03"), pg.ClassInternal},
		{"auth failed inside a connect error", &pgconn.ConnectError{Config: &pgconn.Config{}}, pg.ClassUnavailable},
		{"EOF", fmt.Errorf("receive: %w", io.EOF), pg.ClassUnavailable},
		{"unexpected EOF", io.ErrUnexpectedEOF, pg.ClassUnavailable},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, pg.ClassUnavailable},
		{"deadline", context.DeadlineExceeded, pg.ClassUnavailable},
		{"cancelled", fmt.Errorf("pg: pop: %w", context.Canceled), pg.ClassUnavailable},
		{"conn closed", pgconn.ErrConnClosed, pg.ClassUnavailable},
		{"a plain error", errors.New("segment checksum mismatch"), pg.ClassInternal},
		{"no key", pg.ErrNoKey, pg.ClassInternal},
		{"no rows", pgx.ErrNoRows, pg.ClassInternal},
	}
	for _, tt := range tests {
		if got := pg.Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify(%v) = %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
}
