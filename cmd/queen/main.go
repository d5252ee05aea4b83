// Command queen is the broker. `queen help` lists its subcommands and every
// environment variable (the table in internal/config); docs/configuration.md
// is the same text, generated:
//
// SIGTERM or SIGINT shuts the broker down gracefully: stop accepting, finish
// in-flight requests (30 s at most), stop the projector, flush and close the
// WAL.
//
//go:generate sh -c "go run . help --markdown > ../../docs/configuration.md"
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/queenmq/queen-go/console"
	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/config"
	"github.com/queenmq/queen-go/internal/pgcluster"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}

// errUsage marks an error of the command line; run appends a pointer to
// `queen help`.
var errUsage = errors.New("run `queen help` for the commands")

// run dispatches args (without the program name); help and version write
// to stdout.
func run(args []string, stdout io.Writer) error {
	cmd := ""
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "help", "-h", "--help", "-help":
		return help(stdout, args[1:])
	case "version", "--version", "-version":
		if len(args) > 1 {
			return fmt.Errorf("version takes no arguments: %w", errUsage)
		}
		printVersion(stdout)
		return nil
	case "dev", "wal":
		if wantsHelp(args[1:]) {
			return helpFor(stdout, commandName(args))
		}
	case "":
	default:
		return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
	}
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(logger)
	switch cmd {
	case "":
		return serve(cfg, logger, false)
	case "dev":
		if len(args) > 1 {
			return fmt.Errorf("dev takes no arguments: %w", errUsage)
		}
		return serve(cfg, logger, true)
	default: // "wal"
		return walCommand(cfg, args[1:], stdout)
	}
}

// serve runs the broker until SIGTERM or SIGINT. With dev it starts a
// throwaway PostgreSQL when no database is configured, keeps the WAL in a
// temporary directory unless FILE_BUFFER_DIR is set, and listens on
// 127.0.0.1 unless HOST is set. Both are deleted at shutdown; if the
// process dies instead, its PostgreSQL stops with it (pgcluster's
// parent-death signal) and the next dev run deletes the directories
// (pgcluster.RemoveLeftovers).
func serve(cfg *config.Config, logger *slog.Logger, dev bool) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(config.DefaultMemoryLimit)
	}
	v := buildVersion()
	logger.Info("queen starting", "version", v.version, "commit", v.commit, "go", v.goVersion)
	pgURL := cfg.PGURL()
	walDir := cfg.WALDir
	tempWAL := false
	if dev {
		// A dev broker that died without its shutdown (kill -9, OOM) took
		// its PostgreSQL with it (the parent-death signal) but left both
		// temporary directories: delete those whose owner is gone.
		removed, err := pgcluster.RemoveLeftovers(pgcluster.ClusterDirPrefix, pgcluster.WALDirPrefix)
		for _, d := range removed {
			logger.Info("dev: deleted the leftover of a queen dev that did not shut down", "dir", d)
		}
		if err != nil {
			logger.Warn("dev: could not delete a leftover of an earlier queen dev", "err", err)
		}
		if !cfg.DatabaseConfigured() {
			logger.Info("dev: no database configured; starting a throwaway PostgreSQL")
			c, err := pgcluster.Start(context.Background())
			if err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			defer func() {
				pid, _ := c.Pid()
				logger.Info("dev: stopping and deleting the throwaway PostgreSQL", "pid", pid, "dir", c.Dir)
				c.Destroy()
			}()
			pgURL = c.URL("postgres")
			pid, _ := c.Pid()
			logger.Info("dev: throwaway PostgreSQL is up", "url", pgURL, "pid", pid, "dir", c.Dir)
		}
		if !cfg.IsSet("FILE_BUFFER_DIR") {
			d, err := pgcluster.OwnedTempDir(pgcluster.WALDirPrefix) // a later dev run deletes it if this one dies
			if err != nil {
				return err
			}
			defer os.RemoveAll(d) // throwaway, like the database; logged at shutdown
			walDir, tempWAL = d, true
		}
		if !cfg.IsSet("HOST") {
			cfg.Host = "127.0.0.1" // a dev broker listens on loopback only
		}
	}
	b, err := broker.Start(broker.Config{
		Addr:              cfg.Addr(),
		PGURL:             pgURL,
		WALDir:            walDir,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		MaxPushItems:      cfg.PushItemLimit(),
		MaxPushPartitions: cfg.PushPartitionLimit(),
		WAL:               wal.Options{SegmentSize: cfg.WALSegmentBytes, MaxBytes: int64(cfg.WALMaxBytes), NoPreallocate: !cfg.WALPreallocate},
		Projector:         projector.Config{WALRetention: cfg.WALRetention()},
		VerdictTimeout:    cfg.VerdictTimeout,
		RetentionInterval: cfg.RetentionInterval,
		PoolSize:          int32(cfg.PoolSize),
		PlainSegments:     !cfg.SegmentCompression,
		MaxPopBytes:       int64(cfg.MaxPopBytes),
		HTTP: fastapi.Config{BodyMemoryBytes: int64(cfg.BodyMemoryBytes), MaxConns: cfg.ConnLimit(), Pprof: cfg.Pprof, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, MaxHeaderBytes: cfg.MaxHeaderBytes,
			WriteStallTimeout: cfg.WriteStallTimeout, MaxPendingAnswerBytes: int64(cfg.MaxPendingAnswerBytes),
			DBTimeout: cfg.DBTimeout, AdminDBTimeout: cfg.AdminDBTimeout, MaxListingRequests: max(1, cfg.PoolSize/4)},
		Auth:          cfg.Auth,
		Console:       console.Config{Disabled: !cfg.Console, Path: cfg.ConsolePath},
		EncryptionKey: cfg.EncryptionKey,
		Logger:        logger,
	})
	if de := (*broker.DirError)(nil); errors.As(err, &de) && !tempWAL {
		return fileBufferDirError(de, cfg.IsSet("FILE_BUFFER_DIR"), os.Geteuid())
	}
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
	durable, checkpoint := b.WAL.DurableIndex(), b.Projector.Checkpoint()
	logger.Info("stopped cleanly: in-flight requests finished, WAL flushed and closed",
		"wal_durable_index", durable, "checkpoint", checkpoint)
	if tempWAL {
		unprojected := uint64(0)
		if durable > checkpoint {
			unprojected = durable - checkpoint
		}
		if unprojected > 0 {
			logger.Warn("dev: deleting the temporary WAL with records that never reached PostgreSQL: they are gone (set FILE_BUFFER_DIR to keep the WAL)",
				"dir", walDir, "unprojected_records", unprojected)
		} else {
			logger.Info("dev: deleting the temporary WAL; every record was projected", "dir", walDir, "unprojected_records", 0)
		}
	}
	return nil
}

// fileBufferDirError is de, an error about the broker directory at start,
// as an error naming FILE_BUFFER_DIR: its value, or when it is unset (set
// false) that its default is in use; and, when this user (uid) may not
// create or write the directory (permission denied, a read-only file
// system, a file in its path), what to do about it. An operator who never
// set the variable otherwise sees only "mkdir /var/lib/queen: permission
// denied", with nothing pointing at the variable.
func fileBufferDirError(de *broker.DirError, set bool, uid int) error {
	which := fmt.Sprintf("FILE_BUFFER_DIR=%s (the broker directory)", de.Dir)
	if !set {
		which = fmt.Sprintf("FILE_BUFFER_DIR is unset, so the broker directory is its default, %s,", de.Dir)
	}
	if !errors.Is(de.Err, fs.ErrPermission) && !errors.Is(de.Err, syscall.EROFS) && !errors.Is(de.Err, syscall.ENOTDIR) {
		return fmt.Errorf("%s: %w", strings.TrimSuffix(which, ","), de.Err)
	}
	todo := fmt.Sprintf("make it writable for this user (uid %d), or set FILE_BUFFER_DIR to a directory it can create or write", uid)
	if !set {
		todo = fmt.Sprintf("set FILE_BUFFER_DIR to a directory this user (uid %d) can create or write, or create %s writable for it", uid, de.Dir)
	}
	return fmt.Errorf("%s and this user cannot use it: %w; %s, on a disk that keeps it across restarts "+
		"(docs/operations.md, \"What a broker needs\"; `queen dev` uses a temporary one)", which, de.Err, todo)
}
