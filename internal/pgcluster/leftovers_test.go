package pgcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRemoveLeftovers: only a directory whose owner is provably gone (the
// pid runs no more, or runs a process started at another time) and in
// which no server runs is deleted; one whose owner runs, one without an
// owner file and one with a live postmaster.pid are kept.
func TestRemoveLeftovers(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	mk := func(owner string, postmaster int) string {
		t.Helper()
		d, err := os.MkdirTemp("", "queen-x-")
		if err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, OwnerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if postmaster != 0 {
			if err := os.MkdirAll(filepath.Join(d, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "data", "postmaster.pid"), fmt.Appendf(nil, "%d\n/x\n", postmaster), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	alive, err := OwnedTempDir("queen-x-")
	if err != nil {
		t.Fatal(err)
	}
	reused := mk(fmt.Sprintf("%d 1\n", os.Getpid()), 0) // this pid, another start time
	gone := mk("2147483646 5\n", 0)                     // above any pid_max
	serving := mk("2147483646 5\n", os.Getpid())        // a server runs in it
	unowned := mk("", 0)
	removed, err := RemoveLeftovers("queen-x-")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{reused, gone}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, d := range []string{alive, serving, unowned} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was deleted: %v", d, err)
		}
	}
	for _, d := range want {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", d, err)
		}
	}
}
