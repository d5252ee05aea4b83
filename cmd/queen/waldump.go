package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/wal"
)

// dumpItem and dumpRecord are the --json shapes of `queen wal dump`, one
// dumpRecord per line.
type dumpItem struct {
	Queue            string  `json:"queue"`
	Partition        string  `json:"partition"`
	MessageID        string  `json:"messageId"`
	TransactionID    string  `json:"transactionId"`
	ProducerSub      *string `json:"producerSub,omitempty"`
	PayloadBytes     int     `json:"payloadBytes"`
	Payload          string  `json:"payload"`
	PayloadTruncated bool    `json:"payloadTruncated"`
}

type dumpRecord struct {
	Index      uint64     `json:"index"`
	AcceptedAt string     `json:"acceptedAt,omitempty"`
	Bytes      int        `json:"bytes"`
	Items      []dumpItem `json:"items,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// walDump is `queen wal dump [--from N] [--limit N] [--json] [--payload
// BYTES] [DIR]`: the records of the WAL in broker directory DIR (default
// defDir) or segment directory DIR, from index --from on (default the
// first), at most --limit of them (0 = all). It reads the segment files
// (wal.Scan), so it is safe beside a running broker; the newest records
// shown may still be waiting for their fsync. Flags and DIR may come in
// any order.
func walDump(w io.Writer, defDir string, args []string) error {
	fs := flag.NewFlagSet("queen wal dump", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.Uint64("from", 0, "first WAL index to print")
	limit := fs.Int("limit", 0, "most records to print (0 = all)")
	asJSON := fs.Bool("json", false, "one JSON object per record")
	payload := fs.Int("payload", 80, "payload bytes to show per item (-1 = all)")
	dirs, err := parseInterspersed(fs, args)
	if err != nil {
		return fmt.Errorf("wal dump: %v: %w", err, errUsage)
	}
	if len(dirs) > 1 || *limit < 0 || *payload < -1 {
		return fmt.Errorf("wal dump: one DIR, --limit >= 0, --payload >= -1: %w", errUsage)
	}
	dir := defDir
	if len(dirs) == 1 {
		dir = dirs[0]
	}
	dir = segmentDir(dir)
	reports, _, err := wal.Verify(dir)
	if err != nil {
		return fmt.Errorf("wal dump: %w", err)
	}
	if len(reports) == 0 {
		return fmt.Errorf("wal dump: no WAL segments in %s (give the broker's FILE_BUFFER_DIR)", dir)
	}
	enc := json.NewEncoder(w)
	n := 0
	var first, last uint64
	err = wal.Scan(dir, *from, func(index uint64, p []byte) error {
		if *limit > 0 && n == *limit {
			return wal.ErrStopScan
		}
		n++
		if first == 0 {
			first = index
		}
		last = index
		r := dumpRecord{Index: index, Bytes: len(p)}
		rec, err := ingest.DecodeRecord(p)
		if err != nil {
			r.Error = err.Error()
		} else {
			r.AcceptedAt = time.UnixMicro(rec.AcceptedAt).UTC().Format("2006-01-02T15:04:05.000000Z")
			for _, it := range rec.Items {
				ex, cut := excerpt(it.Payload, *payload)
				r.Items = append(r.Items, dumpItem{Queue: it.Queue, Partition: it.Partition, MessageID: it.MessageID.String(),
					TransactionID: it.TransactionID, ProducerSub: it.ProducerSub, PayloadBytes: len(it.Payload),
					Payload: ex, PayloadTruncated: cut})
			}
		}
		if *asJSON {
			return enc.Encode(r)
		}
		writeDumpText(w, r)
		return nil
	})
	if err != nil {
		if errors.Is(err, wal.ErrCorruptRecord) || errors.Is(err, wal.ErrUnknownVersion) {
			return fmt.Errorf("wal dump: stopped at a record that does not verify (see `queen wal verify`): %w", err)
		}
		return fmt.Errorf("wal dump: %w", err)
	}
	if !*asJSON {
		if n == 0 {
			fmt.Fprintf(w, "wal dump: no records from index %d in %s\n", *from, dir)
		} else {
			fmt.Fprintf(w, "wal dump: %d records (%d..%d) from %s\n", n, first, last, dir)
		}
	}
	return nil
}

// parseInterspersed parses args with fs, flags and operands in any order
// (the flag package stops at the first operand), and returns the operands.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return operands, nil
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func writeDumpText(w io.Writer, r dumpRecord) {
	if r.Error != "" {
		fmt.Fprintf(w, "record %d  bytes=%d  not a push record this build can read: %s\n", r.Index, r.Bytes, r.Error)
		return
	}
	fmt.Fprintf(w, "record %d  accepted=%s  items=%d  bytes=%d\n", r.Index, r.AcceptedAt, len(r.Items), r.Bytes)
	for i, it := range r.Items {
		sub := ""
		if it.ProducerSub != nil {
			sub = fmt.Sprintf(" producerSub=%q", *it.ProducerSub)
		}
		more := ""
		if it.PayloadTruncated {
			more = "…"
		}
		fmt.Fprintf(w, "  [%d] queue=%q partition=%q id=%s transactionId=%q%s payload(%d)=%s%s\n",
			i, it.Queue, it.Partition, it.MessageID, it.TransactionID, sub, it.PayloadBytes,
			strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(it.Payload), more)
	}
}

// excerpt is the first n bytes of p (all for n < 0), cut back to a whole
// UTF-8 character, and whether it was cut.
func excerpt(p []byte, n int) (string, bool) {
	if n < 0 || len(p) <= n {
		return string(p), false
	}
	e := p[:n]
	for len(e) > 0 && !utf8.Valid(e) {
		e = e[:len(e)-1]
	}
	return string(e), true
}
