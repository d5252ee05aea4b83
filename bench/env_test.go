package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReadCommitIgnoresTheReport: the bench's own report files, rewritten
// while a run goes, do not mark the checkout dirty; a source change does.
func TestReadCommitIgnoresTheReport(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q")
	write("main.go", "package main\n")
	write("BENCHMARKS.md", "old\n")
	write("docs/bench/results.jsonl", "{}\n")
	run("add", ".")
	run("commit", "-q", "-m", "x")

	write("BENCHMARKS.md", "new\n")
	write("docs/bench/results.jsonl", "{\"a\":1}\n")
	if c := readCommit(); c.Hash == "" || c.Dirty {
		t.Fatalf("report files rewritten: %+v, want a hash and not dirty", c)
	}
	write("main.go", "package main // changed\n")
	if c := readCommit(); !c.Dirty {
		t.Fatalf("source changed: %+v, want dirty", c)
	}
}
