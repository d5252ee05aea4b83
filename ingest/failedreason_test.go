package ingest

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/queenmq/queen-go/wal"
)

// TestFailedReason: a failed verdict names the byte cap by its setting and
// a full disk, an I/O error or a read-only file system by what it is, and
// never carries the write error's own text (the broker's paths).
func TestFailedReason(t *testing.T) {
	path := &fs.PathError{Op: "write", Path: "/var/lib/queen/buffers/wal/00000000000000000007", Err: syscall.ENOSPC}
	for _, c := range []struct {
		err  error
		want string
	}{
		{wal.ErrFull, "WAL full: QUEEN_WAL_MAX_BYTES reached while records wait for PostgreSQL"},
		{fmt.Errorf("wal: write: %w", path), "WAL write failed: no space left on device"},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.EIO}, "WAL write failed: I/O error"},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, "WAL write failed: read-only file system"},
		{errors.New("wal: closed at /var/lib/queen"), "WAL write failed"},
		{nil, "WAL write failed"},
	} {
		if got := FailedReason(c.err); got != c.want || strings.Contains(got, "/var") || strings.Contains(got, "/x") {
			t.Errorf("FailedReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
