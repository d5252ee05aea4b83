package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/config"
	"github.com/queenmq/queen-go/wal"
)

// TestHelpListsEverything: `queen help`, -h and --help list every
// subcommand and every environment variable with its default and unit.
func TestHelpListsEverything(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		var out bytes.Buffer
		if err := run([]string{arg}, &out); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		s := out.String()
		for _, c := range commands {
			if !strings.Contains(s, c.usage) {
				t.Errorf("%s: no command %q", arg, c.usage)
			}
		}
		for _, v := range config.Vars {
			line := ""
			for _, l := range strings.Split(s, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), v.Name+" ") {
					line = l
				}
			}
			want := v.Default
			if want == "" {
				want = "(none)"
			}
			if line == "" || !strings.Contains(line, "default "+want) || !strings.HasSuffix(line, v.Unit) {
				t.Errorf("%s: %s listed as %q, want its default %q and unit %q", arg, v.Name, line, want, v.Unit)
			}
		}
	}
}

// TestConfigurationDocIsGenerated: docs/configuration.md is exactly what
// `queen help --markdown` prints, so the docs cannot drift from the table.
func TestConfigurationDocIsGenerated(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"help", "--markdown"}, &out); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, out.Bytes()) {
		t.Fatal("docs/configuration.md differs from `queen help --markdown`: run `go generate ./cmd/queen` and commit the result")
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"version"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"queen dev\n", "commit  ", "go      go1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBadEnvironmentStops: a bad value is an error at start naming the
// variable, before anything is opened.
func TestBadEnvironmentStops(t *testing.T) {
	t.Setenv("PORT", "abc")
	t.Setenv("QUEEN_WAL_MAX_BYTES", "-1")
	err := run(nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `PORT="abc"`) || !strings.Contains(err.Error(), "QUEEN_WAL_MAX_BYTES") {
		t.Fatalf("err = %v", err)
	}
	if err := run([]string{"nonsense"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "queen help") {
		t.Fatalf("unknown command: %v", err)
	}
}

// walWithRecords writes n push records (two items each, the second with a
// producerSub and a long payload) into a fresh broker directory and
// returns it with the still open log.
func walWithRecords(t *testing.T, n int) (string, *wal.Log) {
	t.Helper()
	dir := t.TempDir()
	if _, err := broker.BrokerID(dir); err != nil {
		t.Fatal(err)
	}
	l, _, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sub := "alice"
	for i := range n {
		rec := &ingest.Record{AcceptedAt: 1700000000000000 + int64(i), Items: []ingest.Item{
			{Queue: "orders", Partition: "cust-1", TransactionID: "tx-" + string(rune('a'+i%26)), MessageID: uuid.New(),
				Payload: []byte(`{"n":1}`)},
			{Queue: "orders", Partition: "Default", TransactionID: "t2", MessageID: uuid.New(), ProducerSub: &sub,
				Payload: []byte(`"` + strings.Repeat("é", 100) + `"`)},
		}}
		if _, err := l.Append(ingest.EncodeRecord(nil, rec), nil); err != nil {
			t.Fatal(err)
		}
	}
	return dir, l
}

// TestWALDump reads records beside an open log (as beside a running
// broker): text and JSON, --from, --limit, --payload, flags after DIR.
func TestWALDump(t *testing.T) {
	dir, l := walWithRecords(t, 40) // 4 KiB segments: several of them
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	dump := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := walCommand(cfg, append([]string{"dump"}, args...), &out); err != nil {
			t.Fatalf("dump %v: %v", args, err)
		}
		return out.String()
	}
	out := dump(dir)
	if got := strings.Count(out, "\nrecord ") + strings.Count(out[:7], "record "); got != 40 {
		t.Errorf("%d records printed, want 40:\n%s", got, out)
	}
	for _, want := range []string{
		"record 1  accepted=2023-11-14T22:13:20.000000Z  items=2  bytes=",
		`  [0] queue="orders" partition="cust-1" id=`,
		`transactionId="tx-a" payload(7)={"n":1}`,
		`producerSub="alice" payload(202)="`,
		"wal dump: 40 records (1..40) from " + filepath.Join(dir, "wal"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
	// The excerpt is cut at a character boundary and marked.
	if !strings.Contains(out, strings.Repeat("é", 39)+"…") || strings.Contains(out, "\uFFFD") {
		t.Errorf("payload excerpt:\n%s", out)
	}

	out = dump("--from", "10", dir, "--limit", "3", "--json", "--payload", "-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("--limit 3 --json: %d lines:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var r dumpRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Index != uint64(10+i) || len(r.Items) != 2 || r.Items[1].PayloadTruncated || r.Items[1].PayloadBytes != 202 ||
			*r.Items[1].ProducerSub != "alice" || r.Items[0].Queue != "orders" || r.Items[0].MessageID == "" {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	// Appends while dumping, and past the end.
	go func() {
		for range 20 {
			_, _ = l.Append(ingest.EncodeRecord(nil, &ingest.Record{AcceptedAt: 1}), nil)
		}
	}()
	if out := dump("--from", "1000", filepath.Join(dir, "wal")); !strings.Contains(out, "no records from index 1000") {
		t.Errorf("past the end: %s", out)
	}
	if err := walCommand(cfg, []string{"dump", t.TempDir()}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no WAL segments") {
		t.Errorf("empty dir: %v", err)
	}
	if err := walCommand(cfg, []string{"dump", "--limit", "-1", dir}, &bytes.Buffer{}); err == nil {
		t.Error("--limit -1 accepted")
	}
}

// TestWALStatusPostgresDown: with the database unreachable, `wal status`
// still reports the WAL side, says PostgreSQL could not be asked, and
// exits non-zero.
func TestWALStatusPostgresDown(t *testing.T) {
	dir, l := walWithRecords(t, 5)
	id, _ := broker.BrokerID(dir)
	l.Close()
	var out bytes.Buffer
	// Port 1 on loopback: nothing listens there, the connection is refused.
	err := walStatus(&out, dir, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", false)
	s := out.String()
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL unreachable") {
		t.Errorf("err = %v", err)
	}
	for _, want := range []string{
		"broker id   " + id.String(),
		"records 1..5",
		"checkpoint  not checked: PostgreSQL unreachable: ",
		"5 records in it",
		"state       WAL ok; checkpoint not checked (PostgreSQL unreachable)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, s)
		}
	}
}

// TestCommandHelp: `queen help COMMAND` and `queen COMMAND --help` print
// that command's usage alone and succeed; an unknown command, and
// arguments to a command that takes none, are errors pointing at `queen
// help`.
func TestCommandHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "wal", "dump"}, {"wal", "dump", "--help"}, {"wal", "dump", "-h"}, {"wal", "dump", "/some/dir", "--help"}} {
		var out bytes.Buffer
		if err := run(args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if s := out.String(); !strings.HasPrefix(s, "queen wal dump [--from N]") || strings.Contains(s, "queen wal status") {
			t.Errorf("%v printed:\n%s", args, s)
		}
	}
	var out bytes.Buffer
	if err := run([]string{"wal", "--help"}, &out); err != nil || !strings.Contains(out.String(), "queen wal status") ||
		!strings.Contains(out.String(), "queen wal verify") || strings.Contains(out.String(), "queen dev") {
		t.Errorf("wal --help: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"wal", "/some/dir", "--help"}, &out); err != nil || !strings.Contains(out.String(), "queen wal dump") {
		t.Errorf("wal DIR --help: %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{"help", "nope"}, {"version", "extra"}, {"dev", "extra"}, {"help", "--markdown", "x"}} {
		if err := run(args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "queen help") {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}

// TestWALStatusNotABrokerDirectory: a directory with neither broker.id nor
// wal/ (a mistyped FILE_BUFFER_DIR) is an error, not an empty, healthy WAL;
// a broker directory whose WAL holds no records yet is not.
func TestWALStatusNotABrokerDirectory(t *testing.T) {
	err := walStatus(&bytes.Buffer{}, t.TempDir(), "", true)
	if err == nil || !strings.Contains(err.Error(), "neither broker.id nor wal/") {
		t.Fatalf("empty directory: err = %v", err)
	}
	dir := t.TempDir()
	if _, err := broker.BrokerID(dir); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := walStatus(&out, dir, "", true); err != nil || !strings.Contains(out.String(), "no records") {
		t.Fatalf("fresh broker directory: %v\n%s", err, out.String())
	}
}

// TestWALStatusOfTheWALSubdirectory: `wal status DIR/wal` reports the
// broker directory DIR, broker id included (the key of its checkpoint),
// as `wal verify` and `wal dump` accept DIR/wal (docs/operations.md,
// "WAL tools").
func TestWALStatusOfTheWALSubdirectory(t *testing.T) {
	dir, l := walWithRecords(t, 3)
	id, _ := broker.BrokerID(dir)
	l.Close()
	for _, arg := range []string{filepath.Join(dir, "wal"), filepath.Join(dir, "wal") + "/"} {
		var out bytes.Buffer
		if err := walStatus(&out, arg, "", true); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"broker id   " + id.String(), "wal         " + filepath.Join(dir, "wal") + ": 1 segment, records 1..3"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: status lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}

// TestWALStatusWithoutDatabase: with no database configured, `wal status`
// reports the WAL side and exits non-zero, because the checkpoint was not
// checked (help: "exit status 1 when something is wrong or could not be
// checked"); --wal-only, before or after DIR, asks for the WAL alone and
// succeeds on a healthy WAL.
func TestWALStatusWithoutDatabase(t *testing.T) {
	dir, l := walWithRecords(t, 3)
	l.Close()
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = walCommand(cfg, []string{"status", dir}, &out)
	if err == nil || !strings.Contains(err.Error(), "no database configured") || !strings.Contains(err.Error(), "--wal-only") {
		t.Errorf("without a database: err = %v", err)
	}
	for _, want := range []string{"records 1..3", "checkpoint  not checked (no database configured", "state       WAL ok; checkpoint not checked"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"status", "--wal-only", dir}, {"status", dir, "--wal-only"}} {
		out.Reset()
		if err := walCommand(cfg, args, &out); err != nil || !strings.Contains(out.String(), "checkpoint  not checked (--wal-only)") ||
			!strings.Contains(out.String(), "state       ok") {
			t.Errorf("%v: %v\n%s", args, err, out.String())
		}
	}
	if err := walCommand(cfg, []string{"status", "--nope", dir}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "queen help") {
		t.Errorf("unknown flag: %v", err)
	}
}

// TestFileBufferDirErrors: a broker directory that cannot be used stops
// the broker with an error naming FILE_BUFFER_DIR (its value, or that its
// default is in use) and, when this user may not create or write it, what
// to do; before, it said only "broker id: mkdir /var/lib/queen:
// permission denied". A broker.id that does not parse is named too, with
// no advice to move the directory.
func TestFileBufferDirErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FILE_BUFFER_DIR", filepath.Join(file, "buffers")) // a file in its path: ENOTDIR, even for root
	t.Setenv("QUEEN_PG_URL", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	t.Setenv("PORT", "0")
	err := run(nil, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "FILE_BUFFER_DIR="+filepath.Join(file, "buffers")+" (the broker directory) and this user cannot use it: ") ||
		!strings.Contains(err.Error(), "not a directory") || !strings.Contains(err.Error(), "make it writable for this user") {
		t.Errorf("a file in the path: %v", err)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broker.id"), []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FILE_BUFFER_DIR", dir)
	err = run(nil, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "FILE_BUFFER_DIR="+dir+" (the broker directory): broker id: "+filepath.Join(dir, "broker.id")+": ") ||
		strings.Contains(err.Error(), "writable") {
		t.Errorf("a broker.id that does not parse: %v", err)
	}

	// The operator's case, which root cannot reproduce for real: the
	// default directory under a parent this user may not write.
	de := &broker.DirError{Dir: "/var/lib/queen/buffers",
		Err: fmt.Errorf("broker id: %w", &fs.PathError{Op: "mkdir", Path: "/var/lib/queen", Err: syscall.EACCES})}
	err = fileBufferDirError(de, false, 1000)
	for _, want := range []string{"FILE_BUFFER_DIR is unset, so the broker directory is its default, /var/lib/queen/buffers,",
		"mkdir /var/lib/queen: permission denied", "set FILE_BUFFER_DIR to a directory this user (uid 1000) can create or write",
		"or create /var/lib/queen/buffers writable for it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the default, permission denied: %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("%v does not wrap its cause", err)
	}
}
