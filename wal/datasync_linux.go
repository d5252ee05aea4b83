package wal

import (
	"errors"
	"os"
	"syscall"
)

// dataSync flushes f's data and the metadata needed to read it back (its
// size, its block map), not its timestamps: fdatasync(2). In a
// preallocated segment a group commit changes no metadata but the
// modification time, so this writes the data blocks and the disk cache
// flush only, where an fsync would also commit the file system journal.
func dataSync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// freeBytes is the space in bytes that an unprivileged writer may still
// use on the file system holding dir (statfs(2), f_bavail × f_bsize).
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bavail) * st.Bsize, nil
}
