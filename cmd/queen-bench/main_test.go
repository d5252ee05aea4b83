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

// TestFromRendersReport: -from renders saved results into the report and
// plots without running anything.
func TestFromRendersReport(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for _, name := range []string{"push-8x1-p10-minted", "push-8x100-p10-minted", "push-8x100-p1000-client"} {
		sc, err := bench.ParseScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(&bench.ScenarioResult{Scenario: sc, Durable: true, MsgPerSec: 1000, Messages: 5000,
			CPUPerMsgUs: 20, BrokerCPUPerMsgUs: 10, PGCPUPerMsgUs: 10, PGCPUMeasured: true, VerifyOK: true})
		lines = append(lines, string(b))
	}
	from := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(from, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "BENCHMARKS.md")
	if got := run([]string{"-from", from, "-markdown", md, "-plots", filepath.Join(dir, "plots"), "-note", "a check", "-made-with", "make bench"}); got != 0 {
		t.Fatalf("exit %d", got)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"> **a check**", "`make bench`", "| push-8x100-p1000-client ", "](plots/throughput-items.png)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "plots", "cpu-partitions.png")); err != nil {
		t.Error(err)
	}
}
