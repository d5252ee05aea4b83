package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queenmq/queen-go/bench"
)

// TestFlags: bad scenario flags are refused with exit status 2 before
// anything starts.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-scenario", "push-8x100-p10", "-txid", "sometimes"},
		{"-txid", "both"}, // both is for scenarios only
		{"stray"},
		{"-from", "/nonexistent", "-repeat", "0"}, // would be 1 (no such file) without the check
		{"-from", "/nonexistent", "-repeat", "2"}, // -repeat runs scenarios; -from renders
		{"-repeat", "2"}, // nor a single run against -url
	} {
		if got := run(args); got != 2 {
			t.Errorf("%q: exit %d, want 2", args, got)
		}
	}
	// No broker binary: none here (the test runs in cmd/queen-bench) and,
	// unless one is installed, none on PATH.
	if _, err := findBroker(""); err != nil {
		if got := run([]string{"-scenario", "rows"}); got != 2 {
			t.Errorf("no broker: exit %d, want 2", got)
		}
	}
	if got := run([]string{"-list"}); got != 0 {
		t.Errorf("-list: exit %d", got)
	}
}

// TestFromRendersReport: -from renders saved results, from one or more
// files, into the report and plots without running anything; a scenario
// found in two files is one row, with its runs' range.
func TestFromRendersReport(t *testing.T) {
	dir := t.TempDir()
	write := func(file string, names []string, msgPerSec float64) string {
		var lines []string
		for _, name := range names {
			sc, err := bench.ParseScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(&bench.ScenarioResult{Scenario: sc, Durable: true, MsgPerSec: msgPerSec, Messages: 5000,
				CPUPerMsgUs: 20, BrokerCPUPerMsgUs: 10, PGCPUPerMsgUs: 10, PGCPUMeasured: true, VerifyOK: true})
			lines = append(lines, string(b))
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	from := write("results.jsonl", []string{"push-8x1-p10-minted", "push-8x100-p10-minted", "push-8x100-p1000-client"}, 1000)
	more := write("more.jsonl", []string{"push-8x100-p10-minted"}, 3000)
	md := filepath.Join(dir, "BENCHMARKS.md")
	if got := run([]string{"-from", from + "," + more, "-markdown", md, "-plots", filepath.Join(dir, "plots"), "-note", "a check", "-made-with", "make bench"}); got != 0 {
		t.Fatalf("exit %d", got)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "| push-8x100-p10-minted "); n != 2+len(targetsOf("push-8x100-p10")) {
		t.Errorf("push-8x100-p10-minted in %d rows, want one in the results, one in the repeated runs and one per target:\n%s", n, b)
	}
	for _, want := range []string{"> **a check**", "`make bench`", "| push-8x100-p1000-client ", "](plots/throughput-items.png)",
		"### Repeated runs", "1000 – 3000", "## Against the targets"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "plots", "cpu-partitions.png")); err != nil {
		t.Error(err)
	}
}

// targetsOf is the targets of scenario sc.
func targetsOf(sc string) []bench.Target {
	var out []bench.Target
	for _, t := range bench.Targets {
		if t.Scenario == sc {
			out = append(out, t)
		}
	}
	return out
}
