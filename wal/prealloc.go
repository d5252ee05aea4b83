package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/queenmq/queen-go/internal/startstop"
)

// Preallocated segments (doc.go, "Preallocation"). A segment file is
// written with zeros to its full size before the writer puts records in
// it, and that is fsynced, so the writer's group commits overwrite
// allocated, initialised blocks: the file's size and block map never
// change, and fdatasync flushes the data alone, without a journal commit
// of the inode (an fsync of an appended file, or of fallocated blocks that
// are converted from unwritten on first write, commits one every time).
// The zero bytes are padding, not records: a record is never shorter than
// HeaderSize, so a zero length prefix where a record would start ends the
// segment's data, provided everything after it is zero too.

// preparedName is the file the preparer writes the next segment into; a
// roll renames it to the new segment's name. It is not a segment
// (listSegments takes 20-digit names only) and holds no records, so Open
// removes one left by a crash.
const preparedName = "next-segment.prepared"

// zeros is the source of the padding writes (BSS: no memory until read,
// and then the kernel's zero page).
var zeros [1 << 20]byte

// padSize is how large a preallocated segment of a log with segSize is:
// the segment plus the slack a tail buffer has beyond it (segmentSlack),
// so the record that fills a segment is still written into zeros.
func padSize(segSize int) int64 {
	return int64(segSize) + int64(min(segSize, segmentSlack))
}

// allZero reports whether b holds zero bytes only.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if string(b[:n]) != string(zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// zeroTailStart is the offset after the last non-zero byte of b (0 when b
// is all zeros): what of b is more than padding.
func zeroTailStart(b []byte) int {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return n
}

// writeZeros writes zeros to f over [from, to).
func writeZeros(f *os.File, from, to int64) error {
	for off := from; off < to; {
		n := min(to-off, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// errLowSpace is returned by padFile when the file system has too little
// free space to pad without nearly filling it.
var errLowSpace = errors.New("wal: too little free space to preallocate a segment")

// padFile extends f, holding size bytes, with zeros to want bytes and
// fsyncs it (unless noSync): the file's size and blocks are then durable,
// so later writes below want change data only. It writes nothing, and
// returns errLowSpace, unless the file system holding f has at least
// twice the padding free: zeros written until ENOSPC would fill, for a
// moment, a disk that appends (and PostgreSQL, when it shares the disk)
// need. On failure (a full disk) the file is cut back to size and the
// error returned: the segment is then written by appending, as an
// unpadded one.
func padFile(f *os.File, size, want int64, noSync bool) error {
	if size >= want {
		return nil
	}
	free, err := freeBytes(filepath.Dir(f.Name()))
	if err != nil {
		return err
	}
	if free < 2*(want-size) {
		return fmt.Errorf("%w: %d bytes free, padding takes %d", errLowSpace, free, want-size)
	}
	err = writeZeros(f, size, want)
	if err == nil && !noSync {
		err = f.Sync()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("pad segment to %d bytes: %w", want, err), f.Truncate(size))
	}
	return nil
}

// preparer is the service that writes the next segment file ahead of the
// roll that needs it, off the writer's path. It writes preparedName, hands
// it over (ready) and waits until the writer has renamed it away (taken)
// before writing the next, so the writer never opens a file the preparer
// is still writing. A failed preparation is retried when a roll found
// nothing ready (retry). It owns preparedName while it runs; Open removes
// a leftover one before starting it, and Stop removes an unused one. Its
// lifecycle is internal/startstop's (Start once, Stop idempotent).
type preparer struct {
	dir    string
	size   int64
	noSync bool
	warn   func(msg string, args ...any)

	ready chan struct{} // preparedName is written and fsynced (at most one)
	taken chan struct{} // the writer renamed preparedName away
	retry chan struct{} // a roll found nothing ready (coalesced)
	loop  startstop.Loop
}

// newPreparer returns a preparer for segment files of size bytes in dir;
// Start runs it.
func newPreparer(dir string, size int64, noSync bool, warn func(string, ...any)) *preparer {
	return &preparer{dir: dir, size: size, noSync: noSync, warn: warn,
		ready: make(chan struct{}, 1), taken: make(chan struct{}, 1), retry: make(chan struct{}, 1)}
}

// Start runs the service until Stop or the end of ctx; it prepares a first
// file at once. startstop.ErrStarted: it was started before.
func (p *preparer) Start(ctx context.Context) error { return p.loop.Start(ctx, p.run) }

func (p *preparer) run(ctx context.Context) {
	for {
		wait := p.taken
		if err := p.prepare(); err != nil {
			p.warn("wal: preparing the next segment failed; the next roll creates it unpadded", "err", err)
			wait = p.retry
		} else {
			p.ready <- struct{}{} // empty: the last one was taken
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
	}
}

// prepare writes preparedName with size zero bytes and fsyncs it (unless
// noSync). A failure removes the partial file (it would hold disk space
// for nothing).
func (p *preparer) prepare() error {
	path := filepath.Join(p.dir, preparedName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	err = padFile(f, 0, p.size, p.noSync)
	err = errors.Join(err, f.Close())
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// take renames the prepared file, when one is ready, to path and returns
// it opened for writing, with its size; nil when none is ready (the
// preparer is asked to retry a failed preparation) or the rename or open
// failed (logged). Only the writer calls it.
func (p *preparer) take(path string) (*os.File, int64) {
	if p == nil {
		return nil, 0
	}
	select {
	case <-p.ready:
	default:
		select {
		case p.retry <- struct{}{}:
		default:
		}
		return nil, 0
	}
	defer func() { p.taken <- struct{}{} }() // after the rename: the next is written under the old name
	if err := os.Rename(filepath.Join(p.dir, preparedName), path); err != nil {
		p.warn("wal: taking the prepared segment failed; creating it unpadded", "segment", path, "err", err)
		return nil, 0
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o640)
	if err != nil {
		p.warn("wal: opening the prepared segment failed; creating it unpadded", "segment", path, "err", err)
		return nil, 0
	}
	return f, p.size
}

// Stop ends the service and removes a prepared file nobody took; call it
// after the writer has stopped. Idempotent.
func (p *preparer) Stop() {
	p.loop.Stop()
	select {
	case <-p.ready:
		_ = os.Remove(filepath.Join(p.dir, preparedName))
	default:
	}
}
