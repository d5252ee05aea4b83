package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/config"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/wal"
)

// walCommand runs `queen wal status|verify|dump`; DIR defaults to
// FILE_BUFFER_DIR.
func walCommand(cfg *config.Config, args []string, w io.Writer) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	dirArg := func(rest []string) (string, error) {
		switch len(rest) {
		case 0:
			return cfg.WALDir, nil
		case 1:
			return rest[0], nil
		}
		return "", fmt.Errorf("wal %s takes one directory: %w", sub, errUsage)
	}
	switch sub {
	case "status":
		fs := flag.NewFlagSet("queen wal status", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		walOnly := fs.Bool("wal-only", false, "check the WAL alone; do not ask the database")
		rest, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return fmt.Errorf("wal status: %v: %w", err, errUsage)
		}
		dir, err := dirArg(rest)
		if err != nil {
			return err
		}
		pgURL := ""
		if cfg.DatabaseConfigured() {
			pgURL = cfg.PGURL()
		}
		return walStatus(w, dir, pgURL, *walOnly)
	case "verify":
		dir, err := dirArg(args[1:])
		if err != nil {
			return err
		}
		return walVerify(w, dir)
	case "dump":
		return walDump(w, cfg.WALDir, args[1:])
	}
	return fmt.Errorf("usage: queen wal status|verify|dump [DIR]: %w", errUsage)
}

// walVerify checks every record's checksum in dir: the broker directory
// (FILE_BUFFER_DIR, holding wal/), or the segment directory itself.
func walVerify(w io.Writer, dir string) error {
	dir = segmentDir(dir)
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
		padding := ""
		if r.Padding > 0 { // the zeros of a preallocated tail (wal/doc.go, "Preallocation")
			padding = fmt.Sprintf(" padding=%d", r.Padding)
		}
		fmt.Fprintf(w, "%s first=%d records=%d bytes=%d%s %s\n", r.Name, r.FirstIndex, r.Records, r.Bytes, padding, status)
	}
	if !ok {
		return fmt.Errorf("wal verify: problems found in %s", dir)
	}
	fmt.Fprintf(w, "wal verify: %d %s ok\n", len(reports), plural(len(reports), "segment"))
	return nil
}

// segmentDir is dir/wal when dir is a broker directory, else dir.
func segmentDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, "wal")); err == nil && st.IsDir() {
		return filepath.Join(dir, "wal")
	}
	return dir
}

// brokerDir is the broker directory for dir, as given to `wal status`: dir
// itself when it holds broker.id or wal/, else its parent when dir is that
// parent's wal/ (segmentDir of the parent is dir), else dir. So DIR may be
// the broker directory or its wal/ subdirectory, as for `wal verify` and
// `wal dump`.
func brokerDir(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, "broker.id")); err == nil {
		return dir
	}
	if segmentDir(dir) != dir {
		return dir
	}
	clean := filepath.Clean(dir)
	if parent := filepath.Dir(clean); segmentDir(parent) == clean {
		return parent
	}
	return dir
}

// walStatus prints what broker directory dir (FILE_BUFFER_DIR: broker.id
// and wal/; or its wal/ subdirectory, see brokerDir) holds and how it
// stands against this broker's checkpoint in PostgreSQL at pgURL: the same
// checks the projector makes before it projects
// (projector.ErrWALDiverged). It reads only. The error is non-nil when the
// WAL does not verify, the WAL and the checkpoint disagree, or the
// checkpoint could not be checked: the database cannot be asked, or pgURL
// is "" (no database configured) without walOnly. walOnly (--wal-only)
// checks the WAL alone and leaves the database out, so that a WAL-only
// check can succeed while a script that wants the checkpoint checked is
// never told "ok" without it.
func walStatus(w io.Writer, dir, pgURL string, walOnly bool) error {
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("wal status: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("wal status: %s is not a directory (give the broker's FILE_BUFFER_DIR)", dir)
	}
	dir = brokerDir(dir)
	walDir := filepath.Join(dir, "wal")
	_, idErr := os.Stat(filepath.Join(dir, "broker.id"))
	if _, err := os.Stat(walDir); err != nil && idErr != nil {
		// Neither: not a broker directory (a mistyped path would
		// otherwise read as a healthy, empty one).
		return fmt.Errorf("wal status: %s holds neither broker.id nor wal/ (give the broker's FILE_BUFFER_DIR or its wal/)", dir)
	}
	var id uuid.UUID
	if b, err := os.ReadFile(filepath.Join(dir, "broker.id")); err != nil {
		fmt.Fprintf(w, "broker id   none (%s has no broker.id: no broker has run here)\n", dir)
	} else if id, err = uuid.Parse(strings.TrimSpace(string(b))); err != nil {
		return fmt.Errorf("wal status: %s/broker.id: %w", dir, err)
	} else {
		fmt.Fprintf(w, "broker id   %s\n", id)
	}
	reports, ok, err := wal.Verify(walDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal status: %w", err)
	}
	var first, last uint64
	var bytes int64
	for _, r := range reports {
		if first == 0 {
			first = r.FirstIndex
		}
		if r.Records > 0 {
			last = r.FirstIndex + uint64(r.Records) - 1
		}
		bytes += r.Bytes - r.Padding // records, as queen_wal_bytes counts them
	}
	switch {
	case last == 0:
		fmt.Fprintf(w, "wal         %s: no records\n", walDir)
	default:
		fmt.Fprintf(w, "wal         %s: %d %s, records %d..%d, %d bytes\n", walDir, len(reports), plural(len(reports), "segment"), first, last, bytes)
	}
	var problems []string
	// unreadable is the first run of records a sealed segment holds but
	// cannot serve (from its first bad record to the next segment's start).
	var unreadable [2]uint64
	if !ok && len(reports) > 0 {
		problems = append(problems, fmt.Sprintf("the WAL does not verify (run `queen wal verify %s`)", walDir))
		for i := 0; i+1 < len(reports); i++ {
			r, next := reports[i], reports[i+1]
			if bad := r.FirstIndex + uint64(r.Records); bad < next.FirstIndex {
				unreadable = [2]uint64{bad, next.FirstIndex - 1}
				fmt.Fprintf(w, "unreadable  records %d..%d (segment %s: %s)\n", bad, next.FirstIndex-1, r.Name, r.Problem)
				break
			}
		}
	}
	switch {
	case walOnly:
		fmt.Fprintln(w, "checkpoint  not checked (--wal-only)")
		return report(w, problems)
	case id == uuid.Nil: // no broker has run here: it has no checkpoint
		return report(w, problems)
	case pgURL == "":
		fmt.Fprintln(w, "checkpoint  not checked (no database configured: QUEEN_PG_URL or PG_HOST; --wal-only checks the WAL alone)")
		if len(problems) == 0 {
			fmt.Fprintln(w, "state       WAL ok; checkpoint not checked (no database configured)")
		} else {
			report(w, problems)
		}
		return errors.New("wal status: no database configured (QUEEN_PG_URL or PG_HOST): only the WAL side was checked; run with --wal-only to check the WAL alone")
	}
	store, err := pg.Open(pg.Config{URL: pgURL, PoolSize: 1, ConnectTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("wal status: %w", err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, found, err := store.Checkpoint(ctx, id)
	if err != nil {
		// PostgreSQL is down (or refuses us): the WAL side above stands on
		// its own; say what could not be checked.
		fmt.Fprintf(w, "checkpoint  not checked: PostgreSQL unreachable: %v\n", err)
		fmt.Fprintf(w, "            (every record of this WAL may be waiting: %d records in it)\n", recordCount(first, last))
		if len(problems) == 0 {
			fmt.Fprintln(w, "state       WAL ok; checkpoint not checked (PostgreSQL unreachable)")
		} else {
			report(w, problems)
		}
		return fmt.Errorf("wal status: PostgreSQL unreachable; only the WAL side was checked: %w", err)
	}
	if !found {
		fmt.Fprintln(w, "checkpoint  none for this broker (nothing projected yet, or the database predates it)")
		return report(w, problems)
	}
	pending := uint64(0)
	if last > cp.Index {
		pending = last - cp.Index
	}
	fmt.Fprintf(w, "checkpoint  %d (%d records not yet in PostgreSQL)\n", cp.Index, pending)
	if cp.PartialItems > 0 {
		fmt.Fprintf(w, "            record %d is being projected in pieces: %d of its items are in PostgreSQL\n", cp.Index+1, cp.PartialItems)
	}
	switch {
	case cp.Index > last:
		problems = append(problems, fmt.Sprintf("WAL and database disagree: the checkpoint is at %d but this WAL ends at %d", cp.Index, last))
	case cp.Index+1 < first:
		problems = append(problems, fmt.Sprintf("records %d..%d after the checkpoint are no longer in this WAL", cp.Index+1, first-1))
	case cp.Index < first: // the record at the checkpoint is truncated: nothing to compare
	case cp.HasCRC:
		payload, err := wal.ReadRecordAt(walDir, cp.Index)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cannot read WAL record %d at the checkpoint: %v", cp.Index, err))
		} else if got := wal.PayloadCRC(payload); got != cp.RecordCRC {
			problems = append(problems, fmt.Sprintf("WAL and database disagree: record %d has CRC-32C %08x, the checkpoint names %08x", cp.Index, got, cp.RecordCRC))
		}
	}
	if unreadable[1] > cp.Index {
		from := max(unreadable[0], cp.Index+1)
		problems = append(problems, fmt.Sprintf("projection stops at record %d, which does not verify; to give up records %d..%d "+
			"and project the rest, run: UPDATE queen.projector_checkpoints SET wal_index = %d, record_crc32c = NULL, partial_index = NULL WHERE broker_id = '%s'",
			from, from, unreadable[1], unreadable[1], id))
	}
	return report(w, problems)
}

// recordCount is how many records first..last is (0 for an empty WAL).
func recordCount(first, last uint64) uint64 {
	if last == 0 || last < first {
		return 0
	}
	return last - first + 1
}

func report(w io.Writer, problems []string) error {
	if len(problems) == 0 {
		fmt.Fprintln(w, "state       ok")
		return nil
	}
	for _, p := range problems {
		fmt.Fprintf(w, "state       PROBLEM: %s\n", p)
	}
	return errors.New("wal status: problems found (docs/operations.md: \"A corrupt WAL record\", \"WAL and database disagree\")")
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
