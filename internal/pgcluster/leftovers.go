package pgcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// OwnerFile is the file in a directory made by OwnedTempDir that names the
// process owning it: "<pid> <start time>\n", the start time in clock ticks
// since boot (field 22 of /proc/<pid>/stat), so that a pid reused by
// another process does not pass for the owner.
const OwnerFile = "queen-owner"

// Prefixes of the temporary directories OwnedTempDir makes: a cluster's
// (ClusterDirPrefix) and queen dev's WAL (WALDirPrefix); RemoveLeftovers
// takes them.
const (
	ClusterDirPrefix = "queen-pg-"
	WALDirPrefix     = "queen-wal-"
)

// OwnedTempDir is os.MkdirTemp("", prefix+"*") with OwnerFile written
// into it naming this process: a directory that RemoveLeftovers of a later
// process may delete once this process is gone. The directory is 0700 and
// the file 0644 (a server running as another user only reads past it).
func OwnedTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	start, err := processStart(os.Getpid())
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("pgcluster: this process's start time: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, OwnerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// RemoveLeftovers deletes the directories under os.TempDir() named
// prefix* (for each prefix) that are provably leftovers: OwnerFile names a
// process that no longer runs, and no PostgreSQL runs in them
// (data/postmaster.pid is missing or names a process gone). A directory
// without OwnerFile (another program's, or one made by an earlier build)
// or with an owner alive is left alone. It returns the directories
// deleted; the error joins those that could not be.
func RemoveLeftovers(prefixes ...string) ([]string, error) {
	var removed []string
	var errs []error
	for _, prefix := range prefixes {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		for _, dir := range dirs {
			if !leftover(dir) {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// leftover reports whether dir's owner (OwnerFile) is gone and no server
// runs in it.
func leftover(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil || pid <= 0 {
		return false
	}
	if s, err := processStart(pid); err == nil && s == start {
		return false // the owner runs
	}
	if _, pm, err := readPostmasterPID(dir); !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return false
		}
		if _, err := processStart(pm); err == nil {
			return false // a server still runs here (started by a build before the parent-death signal)
		}
	}
	return true
}

// processStart is the start time of process pid in clock ticks since boot
// (/proc/<pid>/stat field 22); an error when no such process runs or it
// is a zombie (it has exited, unreaped).
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start past the last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, syscall.ESRCH
	}
	return strconv.ParseUint(f[19], 10, 64)
}
