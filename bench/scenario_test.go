package bench

import (
	"bytes"
	"compress/flate"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/queenmq/queen-go/pg"
)

func scenarioNames(scs []Scenario) []string {
	out := make([]string, len(scs))
	for i, s := range scs {
		out[i] = s.Name
	}
	return out
}

func TestParseScenarios(t *testing.T) {
	t.Parallel()
	scs, err := ParseScenarios("push-8x100-p10,pop-c10-b100", TxIDBoth)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := scenarioNames(scs), []string{"push-8x100-p10-minted", "push-8x100-p10-client", "pop-c10-b100"}; !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
	push := scs[1]
	if push.Kind != KindPush || push.Producers != 8 || push.Batch != 100 || push.Partitions != 10 || push.TxIDs != TxIDClient {
		t.Errorf("push scenario %+v", push)
	}
	if pop := scs[2]; pop.Kind != KindPop || pop.Consumers != 10 || pop.PopBatch != 100 || !pop.AutoAck || pop.Groups != 0 || pop.Connections() != 10 {
		t.Errorf("pop scenario %+v", pop)
	}

	// Every row of the published table, in both id variants.
	rows, err := ParseScenarios("rows", TxIDBoth)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"push-8x100-p10-minted", "push-8x100-p10-client", "push-50x100-p1001-minted", "push-50x100-p1001-client",
		"push-50x10-p1001-client", "push-64x1-p10-minted", "push-16x100-p10000-client", "pop-c10-b100", "fanout-g5-c2-b100",
		"fanout-g5-c2-b100-autoack", "fanout-g5-c10-b100-autoack", "push-8x100-p10-uuid7", "push-64x1-p10-uuid7",
	} {
		if !slices.Contains(scenarioNames(rows), want) {
			t.Errorf("rows lack %s: %q", want, scenarioNames(rows))
		}
	}
	fan, _ := ParseScenario("fanout-g5-c2-b100")
	if fan.Kind != KindFanout || fan.Groups != 5 || fan.Consumers != 2 || fan.AutoAck || fan.Connections() != 10 {
		t.Errorf("fan-out scenario %+v", fan)
	}
	fanAuto, err := ParseScenario("fanout-g5-c2-b100-autoack")
	if err != nil || fanAuto.Kind != KindFanout || fanAuto.Groups != 5 || fanAuto.Consumers != 2 || fanAuto.PopBatch != 100 ||
		!fanAuto.AutoAck || fanAuto.Connections() != 10 {
		t.Errorf("autoAck fan-out scenario %+v, %v", fanAuto, err)
	}
	if _, err := ParseScenario("fanout-g5-c2-b100-ack"); err == nil {
		t.Error("fanout-g5-c2-b100-ack parsed; only -autoack is a fan-out suffix")
	}

	// all = rows + sweep, each once; -txid narrows the variants; an
	// explicit suffix stands.
	all, _ := ParseScenarios("all", TxIDMinted)
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.Name] {
			t.Errorf("all lists %s twice", s.Name)
		}
		seen[s.Name] = true
		if s.TxIDs != TxIDMinted {
			t.Errorf("-txid minted ran %s", s.Name)
		}
	}
	for _, want := range []string{"push-8x1-p10-minted", "push-8x1000-p10-minted", "push-8x100-p1-minted", "push-8x100-p10000-minted"} {
		if !seen[want] {
			t.Errorf("all lacks sweep point %s", want)
		}
	}
	one, _ := ParseScenarios("push-64x1-p10-client", TxIDMinted)
	if got := scenarioNames(one); !slices.Equal(got, []string{"push-64x1-p10-client"}) {
		t.Errorf("explicit variant: %q", got)
	}

	for _, bad := range []string{"", "push-8x100", "push-0x1-p1-minted", "pop-c1-b20000", "fanout-g1-c1", "nope", "push-8x100-p10-other"} {
		if _, err := ParseScenarios(bad, TxIDBoth); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
	if _, err := ParseScenarios("rows", "sometimes"); !errors.Is(err, ErrConfig) {
		t.Errorf("bad -txid: %v", err)
	}

	// -random: incompressible payloads, on push, pop and fan-out names;
	// a push name's variant goes before it.
	rnd, err := ParseScenarios("push-8x100-p10-random,pop-c10-b100-random,fanout-g5-c2-b100-autoack-random,push-8x1-p10", TxIDBoth)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := scenarioNames(rnd), []string{"push-8x100-p10-minted-random", "push-8x100-p10-client-random",
		"pop-c10-b100-random", "fanout-g5-c2-b100-autoack-random", "push-8x1-p10-minted", "push-8x1-p10-client"}; !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
	for i, s := range rnd {
		if s.RandomPayload != (i < 4) {
			t.Errorf("%s: RandomPayload %v", s.Name, s.RandomPayload)
		}
	}
	if s := rnd[3]; s.Kind != KindFanout || !s.AutoAck || s.Groups != 5 {
		t.Errorf("random fan-out %+v", s)
	}
	set, _ := ParseScenarios("random", TxIDBoth)
	for _, s := range set {
		if !s.RandomPayload {
			t.Errorf("random set: %s", s.Name)
		}
	}
	for _, bad := range []string{"push-8x100-p10-random-minted", "fanout-g5-c2-b100-random-autoack", "stream-w4-b100-random", "push-16x100-p1M-new-random"} {
		if _, err := ParseScenario(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
}

// TestRandomPad checks what -random promises: a pad of the base64url
// alphabet, the same for the same item, another for every other item,
// and bytes that a compressor cannot shrink the way it shrinks 'x' pads.
func TestRandomPad(t *testing.T) {
	t.Parallel()
	a := appendPayload(nil, 1, 7, payloadShape{4096, true}, noStamp)
	if b := appendPayload(nil, 1, 7, payloadShape{4096, true}, noStamp); !bytes.Equal(a, b) {
		t.Fatal("the same item got two pads")
	}
	pad := a[bytes.Index(a, []byte(`"pad":"`))+7 : len(a)-2]
	chars := map[byte]bool{}
	for _, c := range pad {
		if !strings.ContainsRune(padAlphabet, rune(c)) {
			t.Fatalf("pad byte %q is not base64url", c)
		}
		chars[c] = true
	}
	if len(chars) != 64 {
		t.Errorf("a 4 kB pad uses %d of 64 characters", len(chars))
	}
	seen := map[string]bool{}
	for p := range 4 {
		for seq := range 250 {
			b := appendPayload(nil, p, seq, payloadShape{64, true}, noStamp)
			k := string(b[bytes.Index(b, []byte(`"pad":"`)):])
			if seen[k] {
				t.Fatalf("producer %d seq %d repeats another item's pad %s", p, seq, k)
			}
			seen[k] = true
		}
	}
	// A segment's worth of payloads, compressed: random pads keep at
	// least 70% of their bytes (six bits of eight), 'x' pads under 20%.
	ratio := func(random bool) float64 {
		var raw, z bytes.Buffer
		for seq := range 100 {
			raw.Write(appendPayload(nil, 0, seq, payloadShape{256, random}, noStamp))
		}
		w, _ := flate.NewWriter(&z, flate.BestSpeed)
		w.Write(raw.Bytes())
		w.Close()
		return float64(z.Len()) / float64(raw.Len())
	}
	if r := ratio(true); r < 0.7 {
		t.Errorf("random payloads compress to %.2f of their size", r)
	}
	if r := ratio(false); r > 0.2 {
		t.Errorf("'x' payloads compress to %.2f of their size", r)
	}
}

func TestParsePayloadID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		data   string
		p, seq int
		ok     bool
	}{
		{string(appendPayload(nil, 3, 1234, payloadShape{bytes: 64}, noStamp)), 3, 1234, true},
		{string(appendPayload(nil, 0, 0, payloadShape{64, true}, 1700000000000000000)), 0, 0, true},
		{`{"p":1,"s":2}`, 0, 0, false},
		{`{"p":01,"s":2,`, 0, 0, false},
		{`{"s":2,"p":1,`, 0, 0, false},
		{`{"p":1,"s":,`, 0, 0, false},
		{`{"p":-1,"s":2,`, 0, 0, false},
		{``, 0, 0, false},
	} {
		p, seq, ok := parsePayloadID([]byte(tt.data))
		if p != tt.p || seq != tt.seq || ok != tt.ok {
			t.Errorf("%q: %d %d %v, want %d %d %v", tt.data, p, seq, ok, tt.p, tt.seq, tt.ok)
		}
	}
}

// TestCheckMinted: a run with broker-minted ids is traced by payload, and
// a stored transactionId other than the minted message id is a problem.
func TestCheckMinted(t *testing.T) {
	t.Parallel()
	mintedRun := func() (*Ledger, []pg.StoredMessage) {
		l, msgs := perfect()
		l.MintedIDs = true
		msgs = msgs[:len(msgs)-1] // a minted run's queue is its own
		for i := range msgs {
			msgs[i].ID = uuid.New()
			msgs[i].TransactionID = msgs[i].ID.String()
		}
		return l, msgs
	}
	l, msgs := mintedRun()
	if v := check(l, msgs); !v.OK() || v.Stored != 12 {
		t.Fatalf("perfect minted run: %+v", v)
	}
	l, msgs = mintedRun()
	msgs[3].TransactionID = "client-given"
	if v := check(l, msgs); v.WrongTransactionID != 1 || v.OK() {
		t.Errorf("wrong transactionId: %+v", v)
	}
	l, msgs = mintedRun()
	msgs = append(msgs[1:], msgs[0], msgs[0])
	if v := check(l, msgs); v.StoredTwice != 1 {
		t.Errorf("stored twice: %+v", v)
	}
	l, msgs = mintedRun()
	msgs[5].Payload = []byte(`{"p":7,"s":0,"pad":""}`)
	if v := check(l, msgs); v.NeverSent != 1 || v.Missing != 1 {
		t.Errorf("foreign payload: %+v", v)
	}
}

func TestParseBacklog(t *testing.T) {
	t.Parallel()
	n, err := parseBacklog(strings.NewReader("# HELP queen_projector_backlog WAL records not yet in PostgreSQL.\n" +
		"# TYPE queen_projector_backlog gauge\nqueen_projector_backlog_other 5\nqueen_projector_backlog 1234\n"))
	if err != nil || n != 1234 {
		t.Errorf("got %d, %v", n, err)
	}
	if _, err := parseBacklog(strings.NewReader("queen_wal_bytes 1\n")); !errors.Is(err, errNoBacklog) {
		t.Errorf("no gauge: %v", err)
	}
}

func TestHumanSetting(t *testing.T) {
	t.Parallel()
	for _, tt := range [][3]string{
		{"16384", "8kB", "128MB"}, {"512", "8kB", "4MB"}, {"1024", "MB", "1GB"}, {"300", "s", "300s"},
		{"on", "", "on"}, {"100", "kB", "100kB"}, {"-1", "8kB", "-1 8kB"},
	} {
		if got := humanSetting(tt[0], tt[1]); got != tt[2] {
			t.Errorf("%s %s: %s, want %s", tt[0], tt[1], got, tt[2])
		}
	}
}

func TestPGInfoDurable(t *testing.T) {
	t.Parallel()
	on := map[string]string{"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on"}
	if !(PGInfo{Settings: on}).Durable() {
		t.Error("defaults not durable")
	}
	for _, k := range []string{"fsync", "full_page_writes", "synchronous_commit"} {
		s := map[string]string{}
		for kk, v := range on {
			s[kk] = v
		}
		s[k] = "off"
		if (PGInfo{Settings: s}).Durable() {
			t.Errorf("%s=off counted durable", k)
		}
	}
}

// TestServerCPU: the CPU of a process tree counts a child that ran and
// exited between two samples (through cutime), and a process's own CPU
// only grows.
func TestServerCPU(t *testing.T) {
	pid := os.Getpid()
	before, err := serverCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	own0, _ := processCPU(pid)
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	after, err := serverCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	own1, _ := processCPU(pid)
	if child < 0.05 {
		t.Skipf("child used only %.3f s: too little to tell", child)
	}
	// Ticks are 10 ms: allow two of them.
	if got := after - before; got < child-0.02 {
		t.Errorf("tree CPU grew %.2f s, the exited child alone used %.2f s", got, child)
	}
	if own1 < own0 {
		t.Errorf("own CPU went back: %.2f → %.2f", own0, own1)
	}
	if _, err := serverCPU(0); !errors.Is(err, errNoPID) {
		t.Errorf("pid 0: %v", err)
	}
}

func syntheticResult(name string, durable bool, msgPerSec, cpu float64) *ScenarioResult {
	sc, err := ParseScenario(name)
	if err != nil {
		panic(err)
	}
	return &ScenarioResult{Scenario: sc, Started: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC), DurationSec: 10, PayloadBytes: 256,
		Durable: durable, MsgPerSec: msgPerSec, Messages: 1000, Status: StatusCounts{Queued: 990, Buffered: 10},
		Latency: LatencySummary{P50ms: 1, P99ms: 2, P999ms: 3}, BrokerPeakRSSBytes: 64 << 20, PGCPUMeasured: true,
		BrokerCPUPerMsgUs: cpu / 2, PGCPUPerMsgUs: cpu / 2, CPUPerMsgUs: cpu, VerifyOK: true,
		Machine: Machine{Cores: 2, CPUModel: "Test CPU", MemBytes: 8 << 30},
		PG:      PGInfo{Version: "15.0", Settings: map[string]string{"fsync": "on", "synchronous_commit": "on", "shared_buffers": "128MB"}},
		Commit:  Commit{Hash: "abc123"}}
}

// TestReportAndPlots: the Markdown report has the setup, one table row per
// scenario (non-durable and failed rows marked), and links the PNGs the
// sweeps produce.
func TestReportAndPlots(t *testing.T) {
	t.Parallel()
	var results []*ScenarioResult
	for i, n := range []int{1, 10, 100, 1000} {
		results = append(results, syntheticResult("push-8x"+strconv.Itoa(n)+"-p10-minted", true, float64(1000*(i+1)), float64(40-5*i)))
		results = append(results, syntheticResult("push-8x"+strconv.Itoa(n)+"-p10-client", true, float64(800*(i+1)), float64(50-5*i)))
	}
	for _, p := range []int{1, 1000, 10000} {
		results = append(results, syntheticResult("push-8x100-p"+strconv.Itoa(p)+"-minted", true, 3000, 20))
	}
	nd := syntheticResult("pop-c10-b100", false, 50000, 10)
	results = append(results, nd)
	bad := syntheticResult("fanout-g5-c2-b100", true, 0, 0)
	bad.VerifyOK, bad.Problems = false, []string{"3 items answered queued but not stored"}
	results = append(results, bad)

	dir := t.TempDir()
	plots, err := WritePlots(filepath.Join(dir, "plots"), results)
	if err != nil {
		t.Fatal(err)
	}
	if len(plots) != 4 {
		t.Fatalf("%d plots, want 4: %+v", len(plots), plots)
	}
	for _, p := range plots {
		f, err := os.Open(p.Path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p.Path, err)
		}
		if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
			t.Errorf("%s is %v", p.Path, b)
		}
		if !strings.Contains(p.Title, "non-durable") {
			t.Errorf("plot %q of a run with a non-durable row is not labelled", p.Title)
		}
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, results, MarkdownOptions{Note: "Pipeline check on a loaded machine.", Command: "make bench",
		Plots: plots, RelTo: dir}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"> **Pipeline check on a loaded machine.**", "`make bench`", "Commit: `abc123`", "Test CPU, 2 logical cores",
		"PostgreSQL 15.0:", "fsync=on", "| push-8x1000-p10-client ", "| pop-c10-b100 (non-durable) ",
		"](plots/throughput-items.png)", "](plots/cpu-partitions.png)", "### Failed scenarios",
		"`fanout-g5-c2-b100`: 3 items answered queued but not stored", "FAILED |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	table := resultsTable(t, md)
	if n := strings.Count(table, "\n| push-") + strings.Count(table, "\n| pop-") + strings.Count(table, "\n| fanout-"); n != len(results) {
		t.Errorf("%d table rows, want %d", n, len(results))
	}
}

func TestParseStreamAndPartitionScenarios(t *testing.T) {
	t.Parallel()
	s, err := ParseScenario("push-16x100-p1M-new")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != KindPartitions || s.Producers != 16 || s.Batch != 100 || s.Prebuilt != 1_000_000 || s.Partitions != 1_000_000 ||
		!s.FreshPartitions || s.TxIDs != TxIDMinted || s.Connections() != 16 {
		t.Errorf("new: %+v", s)
	}
	if s, _ := ParseScenario("push-2x10-p3k-existing"); s.Prebuilt != 3000 || s.FreshPartitions {
		t.Errorf("existing: %+v", s)
	}
	st, err := ParseScenario("stream-w4-b100")
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != KindStream || st.Consumers != 4 || st.PopBatch != 100 || st.Window != streamWindow || st.Connections() != 4 ||
		st.Producers != streamProducers || st.Partitions != streamPartitions {
		t.Errorf("stream: %+v", st)
	}
	for _, bad := range []string{"push-1x1-p20M-new", "push-1x1-p1G-new", "stream-w0-b10", "stream-w1-b20000", "stream-w1", "push-1x1-p1M-old"} {
		if _, err := ParseScenario(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
	all, _ := ParseScenarios("all", TxIDBoth)
	smoke, _ := ParseScenarios("smoke", TxIDBoth)
	for _, want := range []string{"push-16x100-p1M-new", "push-16x100-p1M-existing", "stream-w4-b100"} {
		if !slices.Contains(scenarioNames(all), want) {
			t.Errorf("all lacks %s", want)
		}
		if strings.Contains(want, "p1M") == slices.Contains(scenarioNames(smoke), want) {
			t.Errorf("smoke: %q", scenarioNames(smoke))
		}
	}
}

// TestFreshPartitions: with fresh partitions every item of a run has a
// partition of its own, above the pre-built ones, and Verify checks it.
func TestFreshPartitions(t *testing.T) {
	t.Parallel()
	l := &Ledger{Partitions: 1000, FreshPartitions: true, Outcomes: make([][]Outcome, 3)}
	seen := map[int]bool{}
	for p := range 3 {
		for seq := range 50 {
			i := l.partitionOf(p, seq)
			if i < 1000 || seen[i] {
				t.Fatalf("producer %d seq %d: partition %d (seen %v)", p, seq, i, seen[i])
			}
			seen[i] = true
		}
	}
}

// TestCheckCommitted: the workers' record must hold every accepted event
// once.
func TestCheckCommitted(t *testing.T) {
	t.Parallel()
	l := &Ledger{Outcomes: [][]Outcome{{Queued, Queued, Failed}, {Buffered}}}
	ev := func(p, seq int) int64 { return int64(p)<<32 | int64(seq) }
	good := &StreamReport{}
	checkCommitted(good, l, []*streamWorker{{done: []int64{ev(0, 0), ev(1, 0)}}, {done: []int64{ev(0, 1)}}})
	if !good.OK() {
		t.Errorf("good: %q", good.Problems)
	}
	bad := &StreamReport{}
	checkCommitted(bad, l, []*streamWorker{{done: []int64{ev(0, 0), ev(0, 0), ev(0, 2), ev(5, 0)}}})
	if bad.OK() || bad.CommittedTwice != 1 || bad.NotCommitted != 2 || bad.CommittedUnsent != 2 {
		t.Errorf("bad: %+v", bad)
	}
}
