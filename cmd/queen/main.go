// Command queen is the broker.
//
//	queen          run the broker, configured by environment
//	queen wal verify [DIR]
//	               check every WAL record's checksum (read-only); DIR is
//	               the broker directory (default $FILE_BUFFER_DIR) or its
//	               wal/ segment directory; exit 1 on a problem or when it
//	               holds no segments
//	queen wal status [DIR]
//	               what a broker directory holds (DIR defaults to
//	               $FILE_BUFFER_DIR): broker id, WAL record range, and, when a
//	               database is configured, this broker's checkpoint, how
//	               many records are not yet in PostgreSQL and whether the
//	               WAL matches the checkpoint; read-only, safe beside a
//	               running broker; exit 1 when something is wrong
//	queen dev      the same, but with a throwaway local PostgreSQL when no
//	               database is configured (QUEEN_PG_URL / PG_HOST unset);
//	               the WAL goes to a temporary directory unless
//	               FILE_BUFFER_DIR is set, and HOST defaults to 127.0.0.1
//
// Environment (Queen's names where they exist):
//
//	PORT                   listen port (6632)
//	HOST                   listen host (0.0.0.0)
//	QUEEN_PG_URL           PostgreSQL URL; else PG_HOST (localhost), PG_PORT (5432),
//	                       PG_USER (postgres), PG_PASSWORD (""), PG_DB (postgres)
//	FILE_BUFFER_DIR        WAL directory (/var/lib/queen/buffers)
//	QUEEN_MAX_BODY_BYTES   push body limit in bytes (67108864 = 64 MiB)
//	QUEEN_MAX_PUSH_ITEMS   most items per push (100000; 0 = no limit): a longer
//	                       push is refused with 400
//	QUEEN_WAL_RETENTION_SECONDS   keep projected WAL segments this long (900)
//	QUEEN_WAL_SEGMENT_BYTES       WAL segment size in bytes (16777216)
//	QUEEN_WAL_MAX_BYTES    cap on the WAL's segment files in bytes (0 = none):
//	                       beyond it pushes answer failed (500 in maintenance
//	                       mode), and above 3/4 of it projected segments are
//	                       truncated before their retention
//	QUEEN_PUSH_VERDICT_TIMEOUT_MS longest wait for a PostgreSQL verdict before
//	                              answering buffered (5000)
//	QUEEN_MAX_CONNS        concurrent HTTP connections (fasthttp default 262144);
//	                       over it new connections get 503 and are closed
//	QUEEN_READ_TIMEOUT_MS  longest time to read one request, headers and body
//	                       (30000): slow clients are cut off
//	QUEEN_ENCRYPTION_KEY   64 hex characters: AES-256-GCM key for queues with
//	                       encryptionEnabled (payloads encrypted in PostgreSQL)
//	JWT_ENABLED, JWT_ALGORITHM, JWT_SECRET, JWT_PUBLIC_KEY, JWT_JWKS_URL,
//	JWT_JWKS_REFRESH_INTERVAL, JWT_JWKS_TIMEOUT_MS, JWT_ISSUER, JWT_AUDIENCE,
//	JWT_CLOCK_SKEW, JWT_SKIP_PATHS, JWT_ROLES_CLAIM, JWT_ROLES_ARRAY_CLAIM
//	                       authentication (off unless JWT_ENABLED=true); see auth
//	DB_POOL_SIZE           PostgreSQL pool size (10)
//	RETENTION_INTERVAL     ms between retention passes (300000)
//	LOG_LEVEL              debug, info, warn, error (info)
//	QUEEN_PPROF            "true" serves Go's pprof under /debug/pprof/ (off)
//
// SIGTERM or SIGINT shuts down gracefully: stop accepting, finish in-flight
// requests (30 s at most), stop the projector, flush and close the WAL.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/pgcluster"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// walRetention maps QUEEN_WAL_RETENTION_SECONDS to projector.Config
// (0 seconds = truncate as soon as projected, which the config spells -1).
func walRetention(sec int) time.Duration {
	if sec == 0 {
		return -1
	}
	return time.Duration(sec) * time.Second
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a non-negative integer, got %q", name, v)
	}
	return n, nil
}

func pgURLFromEnv() string {
	if u := os.Getenv("QUEEN_PG_URL"); u != "" {
		return u
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(env("PG_HOST", "localhost"), env("PG_PORT", "5432")),
		Path: "/" + env("PG_DB", "postgres")}
	if pw := os.Getenv("PG_PASSWORD"); pw != "" {
		u.User = url.UserPassword(env("PG_USER", "postgres"), pw)
	} else {
		u.User = url.User(env("PG_USER", "postgres"))
	}
	q := u.Query()
	if os.Getenv("PG_USE_SSL") != "true" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(env("LOG_LEVEL", "info")))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)

	if len(args) > 0 && args[0] == "wal" {
		return walCommand(args[1:])
	}
	dev := len(args) > 0 && args[0] == "dev"
	if len(args) > 0 && !dev {
		return fmt.Errorf("unknown command %q (want none, \"dev\", \"wal verify [DIR]\" or \"wal status [DIR]\")", args[0])
	}
	port, err := envInt("PORT", 6632)
	if err != nil {
		return err
	}
	maxItems, err := envInt("QUEEN_MAX_PUSH_ITEMS", ingest.DefaultMaxPushItems)
	if err != nil {
		return err
	}
	if maxItems <= 0 {
		maxItems = -1 // broker.Config: negative is no limit
	}
	maxBody, err := envInt("QUEEN_MAX_BODY_BYTES", fastapi.DefaultMaxBodyBytes)
	if err != nil {
		return err
	}
	retention, err := envInt("QUEEN_WAL_RETENTION_SECONDS", 900)
	if err != nil {
		return err
	}
	segBytes, err := envInt("QUEEN_WAL_SEGMENT_BYTES", wal.DefaultSegmentSize)
	if err != nil {
		return err
	}
	walMax, err := envInt("QUEEN_WAL_MAX_BYTES", 0)
	if err != nil {
		return err
	}
	verdictMS, err := envInt("QUEEN_PUSH_VERDICT_TIMEOUT_MS", 5000)
	if err != nil {
		return err
	}
	maxConns, err := envInt("QUEEN_MAX_CONNS", 0)
	if err != nil {
		return err
	}
	retentionMS, err := envInt("RETENTION_INTERVAL", 300000)
	if err != nil {
		return err
	}
	pool, err := envInt("DB_POOL_SIZE", 10)
	if err != nil {
		return err
	}
	readMS, err := envInt("QUEEN_READ_TIMEOUT_MS", 30000)
	if err != nil {
		return err
	}
	authCfg, err := auth.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	var encKey *crypt.Key
	if k := os.Getenv("QUEEN_ENCRYPTION_KEY"); k != "" {
		if encKey, err = crypt.ParseKey(k); err != nil {
			return fmt.Errorf("QUEEN_ENCRYPTION_KEY: %w", err)
		}
	}
	walDir := env("FILE_BUFFER_DIR", "/var/lib/queen/buffers")
	host := env("HOST", "0.0.0.0")
	pgURL := pgURLFromEnv()

	if dev {
		if os.Getenv("QUEEN_PG_URL") == "" && os.Getenv("PG_HOST") == "" {
			logger.Info("dev: no database configured; starting a throwaway PostgreSQL")
			c, err := pgcluster.Start(context.Background())
			if err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			defer c.Destroy()
			pgURL = c.URL("postgres")
			logger.Info("dev: throwaway PostgreSQL is up", "url", pgURL, "dir", c.Dir)
		}
		if os.Getenv("FILE_BUFFER_DIR") == "" {
			d, err := os.MkdirTemp("", "queen-wal-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(d) // throwaway, like the database
			walDir = d
		}
		if os.Getenv("HOST") == "" {
			host = "127.0.0.1" // a dev broker listens on loopback only
		}
	}

	b, err := broker.Start(broker.Config{
		Addr:              net.JoinHostPort(host, strconv.Itoa(port)),
		PGURL:             pgURL,
		WALDir:            walDir,
		MaxBodyBytes:      maxBody,
		MaxPushItems:      maxItems,
		WAL:               wal.Options{SegmentSize: segBytes, MaxBytes: int64(walMax)},
		Projector:         projector.Config{WALRetention: walRetention(retention)},
		VerdictTimeout:    time.Duration(verdictMS) * time.Millisecond,
		RetentionInterval: time.Duration(max(retentionMS, 100)) * time.Millisecond,
		PoolSize:          int32(pool),
		HTTP: fastapi.Config{MaxConns: maxConns, Pprof: os.Getenv("QUEEN_PPROF") == "true",
			ReadTimeout: time.Duration(max(readMS, 1)) * time.Millisecond},
		Auth:          authCfg,
		EncryptionKey: encKey,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	logger.Info("shutting down", "signal", s.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		return err
	}
	logger.Info("stopped cleanly: in-flight requests finished, WAL flushed and closed",
		"wal_durable_index", b.WAL.DurableIndex(), "checkpoint", b.Projector.Checkpoint())
	return nil
}

func walCommand(args []string) error {
	if len(args) > 0 && args[0] == "status" {
		dir := env("FILE_BUFFER_DIR", "/var/lib/queen/buffers")
		if len(args) > 1 {
			dir = args[1]
		}
		return walStatus(os.Stdout, dir, pgConfigured())
	}
	if len(args) == 0 || args[0] != "verify" {
		return fmt.Errorf("usage: queen wal verify [DIR] | queen wal status [DIR]")
	}
	dir := env("FILE_BUFFER_DIR", "/var/lib/queen/buffers")
	if len(args) > 1 {
		dir = args[1]
	}
	// DIR is the broker directory (FILE_BUFFER_DIR, holding wal/), as for
	// `wal status`; the segment directory itself is accepted too.
	if st, err := os.Stat(filepath.Join(dir, "wal")); err == nil && st.IsDir() {
		dir = filepath.Join(dir, "wal")
	}
	reports, ok, err := wal.Verify(dir)
	if err != nil {
		return err
	}
	if len(reports) == 0 {
		return fmt.Errorf("wal verify: no WAL segments in %s (give the broker's FILE_BUFFER_DIR)", dir)
	}
	for _, r := range reports {
		status := "ok"
		if r.Problem != "" {
			status = "PROBLEM: " + r.Problem
		}
		fmt.Printf("%s first=%d records=%d bytes=%d %s\n", r.Name, r.FirstIndex, r.Records, r.Bytes, status)
	}
	if !ok {
		return fmt.Errorf("wal verify: problems found in %s", dir)
	}
	fmt.Printf("wal verify: %d segments ok\n", len(reports))
	return nil
}
