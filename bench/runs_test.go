package bench

import (
	"bytes"
	"strings"
	"testing"
)

// resultsTable is the report's "## Results" section up to the next
// heading: the table of one row per scenario.
func resultsTable(t *testing.T, md string) string {
	t.Helper()
	i := strings.Index(md, "## Results\n")
	if i < 0 {
		t.Fatalf("report has no Results section:\n%s", md)
	}
	rest := md[i+len("## Results\n"):]
	if j := strings.Index(rest, "\n#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// section is the report's section under heading (a whole line, "## …" or
// "### …") up to the next heading.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("report has no %q:\n%s", heading, md)
	}
	rest := md[i+len(heading)+2:]
	if j := strings.Index(rest, "\n#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// rowOf is the table row of section s whose first two cells are name and
// ids and whose third is figure (empty: any), split into trimmed cells.
func rowOf(s, name, ids, figure string) []string {
	for _, line := range strings.Split(s, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= 3 && cells[0] == name && cells[1] == ids && (figure == "" || cells[2] == figure) {
			return cells
		}
	}
	return nil
}

// TestGroupRuns: repeated runs of a scenario are one group in the order
// the name first ran; its representative is the run of the median msg/s
// (the lower middle one of an even count), or a failed run when any
// failed; its plot point is the median of the verified runs.
func TestGroupRuns(t *testing.T) {
	t.Parallel()
	a1 := syntheticResult("push-8x100-p10-minted", true, 90_000, 9)
	b1 := syntheticResult("pop-c10-b100", true, 200_000, 4)
	a2 := syntheticResult("push-8x100-p10-minted", true, 150_000, 6)
	b2 := syntheticResult("pop-c10-b100", true, 100_000, 5)
	a3 := syntheticResult("push-8x100-p10-minted", true, 120_000, 7)
	c1 := syntheticResult("fanout-g5-c2-b100", true, 100_000, 10)
	c2 := syntheticResult("fanout-g5-c2-b100", true, 0, 0)
	c2.VerifyOK = false
	c3 := syntheticResult("fanout-g5-c2-b100", true, 110_000, 10)
	groups := groupRuns([]*ScenarioResult{a1, b1, a2, b2, a3, c1, c2, c3})
	if len(groups) != 3 {
		t.Fatalf("%d groups, want 3", len(groups))
	}
	for i, want := range []struct {
		name string
		runs int
		rep  *ScenarioResult
		ok   int
	}{
		{"push-8x100-p10-minted", 3, a3, 3},
		{"pop-c10-b100", 2, b2, 2},
		{"fanout-g5-c2-b100", 3, c2, 2},
	} {
		g := groups[i]
		if g.name != want.name || len(g.runs) != want.runs || g.rep != want.rep || g.okRuns() != want.ok {
			t.Errorf("group %d: %s, %d runs, %d verified, rep %.0f msg/s; want %s, %d, %d, %.0f",
				i, g.name, len(g.runs), g.okRuns(), g.rep.MsgPerSec, want.name, want.runs, want.ok, want.rep.MsgPerSec)
		}
	}
	// A plot's point is the verified run of the median msg/s: for the
	// fan-out, c1 (the lower middle of c1 and c3), not the failed c2.
	if pr := plotRuns(groups); pr[0] != a3 || pr[1] != b2 || pr[2] != c1 {
		t.Errorf("plot runs %.0f %.0f %.0f msg/s, want 120000 100000 100000", pr[0].MsgPerSec, pr[1].MsgPerSec, pr[2].MsgPerSec)
	}
	if lo, hi, ok := spread(groups[2].runs, func(r *ScenarioResult) float64 { return r.MsgPerSec }); !ok || lo != 100_000 || hi != 110_000 {
		t.Errorf("spread over the verified fan-out runs: %v %v %v, want 100000 110000 (the failed run left out)", lo, hi, ok)
	}
}

// TestTargetsInReport: the report checks each row a target holds for
// (every ids variant of a push row, not its -random twin) against the
// representative run, says in how many runs it held and over what range,
// counts the checks met, and shows repeated scenarios once in the table,
// with their range below it.
func TestTargetsInReport(t *testing.T) {
	t.Parallel()
	mk := func(name string, msgs, cpu, p99 float64, rss int64) *ScenarioResult {
		r := syntheticResult(name, true, msgs, cpu)
		r.Latency.P99ms, r.BrokerPeakRSSBytes, r.OverheadPerMsg = p99, rss, 40
		r.Status.Buffered = 0
		return r
	}
	results := []*ScenarioResult{
		mk("push-8x100-p10-minted", 90_000, 9, 20, 50e6),
		mk("push-8x100-p10-client", 95_000, 12, 30, 50e6),
		mk("push-64x1-p10-minted", 13_000, 80, 25, 70e6),
		mk("push-8x100-p10-minted-random", 200_000, 5, 20, 50e6),
		mk("push-8x100-p10-minted", 150_000, 6, 20, 50e6),
		mk("push-8x100-p10-minted", 120_000, 7, 120, 60e6),
		mk("push-8x100-p10-uuid7", 110_000, 9, 30, 50e6),
		mk("pop-c10-b100-random", 100_000, 7, 30, 50e6),
	}
	random := results[3]
	random.OverheadPerMsg = 70
	buffered := results[6]
	buffered.Status.Buffered = 25
	var b bytes.Buffer
	if err := WriteMarkdown(&b, results, MarkdownOptions{Command: "make bench"}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if n := strings.Count(resultsTable(t, md), "\n| push-8x100-p10-minted "); n != 1 {
		t.Errorf("%d table rows of the repeated scenario, want 1", n)
	}
	if row := rowOf(resultsTable(t, md), "push-8x100-p10-minted", "minted", ""); row == nil || row[3] != "120000" {
		t.Errorf("the repeated scenario's row is %q, want its median run (120000 msg/s)", row)
	}
	rep := section(t, md, "### Repeated runs")
	if row := rowOf(rep, "push-8x100-p10-minted", "minted", ""); row == nil ||
		row[2] != "3 of 3" || row[3] != "90000 – 150000" || row[4] != "6.0 – 9.0" || row[5] != "20.0 – 120.0" {
		t.Errorf("repeats row %q", row)
	}
	if rowOf(rep, "push-64x1-p10-minted", "minted", "") != nil {
		t.Error("a scenario that ran once is in the repeats table")
	}

	tg := section(t, md, "## Against the targets")
	for _, want := range []struct {
		name, ids, figure string
		cells             []string // target, this row, met, runs meeting it, range
	}{
		{"push-8x100-p10-minted", "minted", "msg/s", []string{"≥ 100000", "120000", "yes", "2 of 3", "90000 – 150000"}},
		{"push-8x100-p10-minted", "minted", "p99 ms", []string{"≤ 100.0", "120.0", "no", "2 of 3", "20.0 – 120.0"}},
		{"push-8x100-p10-minted", "minted", "total CPU µs/msg", []string{"≤ 8.0", "7.0", "yes", "2 of 3", "6.0 – 9.0"}},
		{"push-8x100-p10-minted", "minted", "beyond payload B/msg", []string{"≤ 64", "40", "yes", "3 of 3", "40 – 40"}},
		{"push-8x100-p10-client", "client", "msg/s", []string{"≥ 100000", "95000", "no", "0 of 1", "–"}},
		{"push-8x100-p10-client", "client", "total CPU µs/msg", []string{"≤ 8.0", "12.0", "no", "0 of 1", "–"}},
		{"push-64x1-p10-minted", "minted", "broker peak RSS", []string{"≤ 64.0 MB (61.0 MiB)", "70.0 MB (66.8 MiB)", "no", "0 of 1", "–"}},
		{"push-64x1-p10-minted", "minted", "p99 ms", []string{"≤ 30.0", "25.0", "yes", "1 of 1", "–"}},
		// A push row with buffered answers does not meet its rate.
		{"push-8x100-p10-uuid7", "uuid7", "msg/s", []string{"≥ 100000", "110000", "no (25 buffered)", "0 of 1", "–"}},
		{"push-8x100-p10-uuid7", "uuid7", "p99 ms", []string{"≤ 100.0", "30.0", "yes", "1 of 1", "–"}},
		// The -random twin is checked for its bytes alone.
		{"push-8x100-p10-minted-random", "minted", "beyond payload B/msg", []string{"≤ 64", "70", "no", "0 of 1", "–"}},
	} {
		row := rowOf(tg, want.name, want.ids, want.figure)
		if row == nil {
			t.Errorf("no targets row %s %s %s:\n%s", want.name, want.ids, want.figure, tg)
			continue
		}
		if got := strings.Join(row[3:], " | "); got != strings.Join(want.cells, " | ") {
			t.Errorf("%s %s %s: %s, want %s", want.name, want.ids, want.figure, got, strings.Join(want.cells, " | "))
		}
	}
	if rowOf(tg, "push-8x100-p10-minted-random", "minted", "msg/s") != nil || strings.Contains(tg, "pop-c10-b100-random") {
		t.Error("a -random row was checked against its twin's targets")
	}
	// push-8x100-p10: 5 checks for each of minted, client and uuid7; its
	// -random twin: 1; 64 × 1: 4. Met: minted msg/s, CPU, bytes, RSS;
	// client p99, bytes, RSS; uuid7 p99, bytes, RSS; 64 × 1 p99.
	if !strings.Contains(tg, "**11 of 20 met**") {
		t.Errorf("targets summary:\n%s", tg)
	}

	// CPU per message without PostgreSQL's is not measured: no CPU
	// target is met, and the ranges say n/a.
	nm1, nm2 := mk("push-8x100-p10-minted", 150_000, 3, 20, 50e6), mk("push-8x100-p10-minted", 160_000, 3, 20, 50e6)
	nm1.PGCPUMeasured, nm2.PGCPUMeasured = false, false
	b.Reset()
	if err := WriteMarkdown(&b, []*ScenarioResult{nm1, nm2}, MarkdownOptions{}); err != nil {
		t.Fatal(err)
	}
	if row := rowOf(section(t, b.String(), "## Against the targets"), "push-8x100-p10-minted", "minted", "total CPU µs/msg"); row == nil ||
		row[4] != "n/a" || row[5] != "no (not measured)" || row[6] != "0 of 2" || row[7] != "–" {
		t.Errorf("CPU not measured: %q", row)
	}
	if row := rowOf(section(t, b.String(), "### Repeated runs"), "push-8x100-p10-minted", "minted", ""); row == nil || row[4] != "n/a" {
		t.Errorf("repeats row with CPU not measured: %q", row)
	}

	// A non-durable row meets nothing.
	nd := mk("pop-c10-b100", 300_000, 3, 10, 50e6)
	nd.Durable = false
	b.Reset()
	if err := WriteMarkdown(&b, []*ScenarioResult{nd}, MarkdownOptions{}); err != nil {
		t.Fatal(err)
	}
	tg = section(t, b.String(), "## Against the targets")
	if row := rowOf(tg, "pop-c10-b100", "minted", "msg/s"); row == nil || row[4] != "300000" || row[5] != "no (non-durable)" || row[6] != "0 of 1" {
		t.Errorf("non-durable row: %q\n%s", row, tg)
	}
	if !strings.Contains(tg, "**0 of 2 met**") {
		t.Errorf("non-durable summary:\n%s", tg)
	}

	// A failed representative meets nothing.
	bad := mk("pop-c10-b100", 300_000, 3, 10, 50e6)
	bad.VerifyOK = false
	b.Reset()
	if err := WriteMarkdown(&b, []*ScenarioResult{mk("pop-c10-b100", 300_000, 3, 10, 50e6), bad}, MarkdownOptions{}); err != nil {
		t.Fatal(err)
	}
	tg = section(t, b.String(), "## Against the targets")
	if row := rowOf(tg, "pop-c10-b100", "minted", "msg/s"); row == nil || row[4] != "failed" || row[5] != "no" || row[6] != "1 of 2" {
		t.Errorf("failed representative: %q\n%s", row, tg)
	}
}
