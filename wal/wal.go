package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/queen-go/internal/binenc"
	"github.com/queenmq/queen-go/internal/ratelog"
)

// Defaults applied where an Options field is zero.
const (
	// DefaultSegmentSize is the target segment file size: 4 MiB. The tail
	// segment and the last sealed one read are kept in memory, and one
	// dropped buffer is kept for reuse, so this bounds the broker's WAL
	// memory (about 3 × SegmentSize, plus any single record larger than
	// it).
	DefaultSegmentSize = 4 << 20
	// DefaultMaxRecordBytes bounds one record's payload: 80 MiB (the 64 MiB
	// default body limit plus the per-item overhead of the push record).
	DefaultMaxRecordBytes = 80 << 20
	// DefaultMaxBatchBytes bounds one group commit: 8 MiB. A single record
	// larger than this is written alone.
	DefaultMaxBatchBytes = 8 << 20
	// slowSync is the fsync duration above which a warning is logged.
	slowSync = time.Second
)

var (
	// ErrClosed is returned by Append and Read after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrNotFound is returned by Read for an index outside
	// [FirstIndex, DurableIndex].
	ErrNotFound = errors.New("wal: index not found")
	// ErrRecordTooLarge is returned by Append for a payload above
	// Options.MaxRecordBytes.
	ErrRecordTooLarge = errors.New("wal: record too large")
	// ErrFull is returned by Append when the record would take the
	// segment files past Options.MaxBytes; nothing was written.
	ErrFull = errors.New("wal: full (segment files at their byte cap)")
)

// Options configure a Log. Zero fields take the defaults above.
type Options struct {
	// SegmentSize is the target size of a segment file in bytes
	// (default DefaultSegmentSize).
	SegmentSize int
	// MaxRecordBytes is the largest payload Append accepts, in bytes
	// (default DefaultMaxRecordBytes).
	MaxRecordBytes int
	// MaxBatchBytes caps the payload bytes of one group commit
	// (default DefaultMaxBatchBytes).
	MaxBatchBytes int
	// MaxBytes caps the bytes of all segment files (QUEEN_WAL_MAX_BYTES):
	// an Append whose record would take them past it fails with ErrFull and
	// writes nothing. 0 = no cap (the disk is the cap: ENOSPC fails the
	// write instead). It protects what shares the disk, PostgreSQL above
	// all, from a WAL that grows through a long outage.
	MaxBytes int64
	// NoSync skips fsync. Only for tests that measure something else; the
	// broker never sets it.
	NoSync bool
	// NoPreallocate writes segments by appending to empty files, as
	// builds before preallocation did, instead of over zeros written
	// ahead (doc.go, "Preallocation"; default false: preallocate). For a
	// file system where overwriting in place allocates anyway
	// (copy-on-write: btrfs, ZFS), the zeros are written for nothing.
	NoPreallocate bool
	// Logger receives repair reports and slow-fsync warnings
	// (default slog.Default()).
	Logger *slog.Logger
	// ObserveSync, when set, is called with the duration of every fsync.
	ObserveSync func(time.Duration)

	// fsyncHook, when set (tests only), replaces the fsync of a segment
	// file, so a test can make one fail.
	fsyncHook func(*os.File) error
}

func (o *Options) withDefaults() Options {
	c := *o
	if c.SegmentSize <= 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

type appendReq struct {
	// vec is the whole record in pieces, in order: vec[0] starts with
	// room for the envelope header (which the writer fills in its copy),
	// and the record is the pieces' concatenation, n bytes. one backs vec
	// for a record in one piece (AppendEnveloped), so that neither kind
	// of append allocates.
	vec      [][]byte
	one      [1][]byte
	n        int
	onAssign func(uint64)
	index    uint64
	done     chan error
	// onDone, when set (AppendEnvelopedAsync, AppendGatheredAsync), is
	// called by the writer instead of a send on done.
	onDone func(index uint64, err error)
}

// recycle clears r's references to the caller's memory and callbacks
// and puts r back in appendReqs.
func (r *appendReq) recycle() {
	r.vec, r.one[0], r.onAssign, r.onDone = nil, nil, nil, nil
	appendReqs.Put(r)
}

// finish reports the outcome of r's append (nil once fsynced) to its
// caller: a send on done, or onDone after r went back to appendReqs.
// Called once, from the writer goroutine.
func (r *appendReq) finish(err error) {
	if r.onDone == nil {
		r.done <- err
		return
	}
	f, index := r.onDone, r.index
	r.recycle()
	f(index, err)
}

// Log is an open write-ahead log. Append is safe for concurrent use; so is
// Read (calls are serialised internally).
type Log struct {
	dir  string
	opts Options

	// lgMu guards st: writes and reads hold it shared (the segment store
	// serialises them itself; truncation is serialised with reads by
	// readMu); a reopen after a failure holds it exclusively.
	lgMu   sync.RWMutex
	readMu sync.Mutex
	st     *segStore

	// writer-goroutine state
	broken error // set after a failed write until a reopen succeeds

	// prep writes the next segment file ahead of its roll (nil with
	// NoPreallocate); it runs from Open to Close, across reopens.
	prep *preparer

	first atomic.Uint64
	// durable is the last index written and fsynced; only the writer
	// goroutine (and an open) stores it.
	durable atomic.Uint64
	// writing is the last index of the group commit being written and
	// fsynced while it is above durable (InFlight); only the writer
	// goroutine stores it.
	writing atomic.Uint64
	// size is the bytes of all segment files: summed on open and after a
	// truncation, grown by each write.
	size atomic.Int64
	// tail is tailStart for other goroutines (TruncateProjected).
	tail atomic.Uint64
	// sealedGood maps the first index of a checked sealed segment to how
	// many of its leading records verified (see checkSealed).
	sealedMu   sync.Mutex
	sealedGood map[uint64]uint64
	// lastSealed caches the range [from, to) and verified count of the
	// sealed segment read last, so sequential reads skip the directory scan.
	lastSealed struct{ from, to, good uint64 }

	// failLog rate-limits the lines a failure repeating on every append
	// writes (a full or read-only disk, the byte cap): the first is logged,
	// then one line per ratelog.DefaultInterval with a count.
	failLog *ratelog.Logger

	// Readers' hold on segment memory (segments.go, "Segment buffers"):
	// released is the lowest Cursor.Release mark of the open cursors
	// (MaxUint64 with none), guarded for writes by curMu; a View holds
	// pinMu shared while its callback runs.
	curMu    sync.Mutex
	cursors  map[*Cursor]struct{}
	released atomic.Uint64
	pinMu    sync.RWMutex

	// reqs queues appends for the writer (reqQueue deep, so that an
	// append does not sleep until the writer, busy with an fsync, takes
	// it). sendMu is held shared while an append hands its request over,
	// exclusively by Close before it answers what is left queued
	// ErrClosed; closed is then set.
	reqs     chan *appendReq
	sendMu   sync.RWMutex
	closed   bool
	notify   chan struct{}
	full     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Open repairs and opens the log in dir (created if missing) and starts its
// writer. The report is non-nil when a torn or corrupt tail was cut.
func Open(dir string, opts Options) (*Log, *RepairReport, error) {
	l := &Log{dir: dir, opts: opts.withDefaults(), reqs: make(chan *appendReq, reqQueue),
		notify: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.failLog = ratelog.New(l.opts.Logger, ratelog.DefaultInterval)
	l.released.Store(^uint64(0))
	if l.opts.MaxBytes > 0 && l.opts.MaxBytes < MinSegmentsUnderCap*int64(l.opts.SegmentSize) {
		return nil, nil, fmt.Errorf("wal: MaxBytes %d is below %d segments of %d bytes: truncation always keeps the tail and the newest sealed segment, so a smaller cap could fill for good",
			l.opts.MaxBytes, MinSegmentsUnderCap, l.opts.SegmentSize)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("wal: create dir: %w", err)
	}
	// A prepared segment a crash left holds no records; the preparer
	// writes a fresh one.
	if err := os.Remove(filepath.Join(dir, preparedName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("wal: remove prepared segment: %w", err)
	}
	if !l.opts.NoPreallocate {
		l.prep = newPreparer(dir, padSize(l.opts.SegmentSize), l.opts.NoSync, l.failLog.Warn)
	}
	rep, err := l.openLocked(-1)
	if err != nil {
		return nil, rep, err
	}
	if l.prep != nil {
		_ = l.prep.Start(context.Background()) // a fresh preparer: never ErrStarted
	}
	go l.writer()
	return l, rep, nil
}

// openLocked repairs (rolling back past keep when keep >= 0) and opens the
// segment files; the caller holds lgMu exclusively or owns l alone.
func (l *Log) openLocked(keep int64) (*RepairReport, error) {
	rep, err := repair(l.dir, keep)
	switch {
	case rep != nil && keep >= 0: // a rollback after a failed write: repeats with it
		l.failLog.Warn("wal: repaired log", "dir", l.dir, "report", rep.String())
	case rep != nil:
		l.opts.Logger.Warn("wal: repaired log", "dir", l.dir, "report", rep.String())
	}
	if err != nil {
		return rep, fmt.Errorf("wal: repair: %w", err)
	}
	st, err := openSegStore(l.dir, l.opts.SegmentSize, l.opts.NoSync, l.prep, l.failLog.Warn)
	if err != nil {
		return rep, fmt.Errorf("wal: open: %w", err)
	}
	st.fsync = l.opts.fsyncHook
	st.reusable = l.reusable
	first, last := st.bounds()
	if err := syncDir(l.dir); err != nil { // a first segment may have been created
		st.close(false)
		return rep, err
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		st.close(false)
		return rep, fmt.Errorf("wal: list segments after open: %v", err)
	}
	// The tail counts up to its last record: its zero padding is not
	// data (sealed segments have none).
	size, err := segmentFileBytes(l.dir, segs[:len(segs)-1])
	if err != nil {
		st.close(false)
		return rep, err
	}
	l.size.Store(size + int64(st.tailBytes()))
	// What checkSealed verified describes the files before this open: a
	// rollback cuts a segment that was sealed (and may have been verified
	// holding the failed batch's records) back to the tail, which later
	// seals again with other records.
	l.sealedMu.Lock()
	l.sealedGood = nil
	l.lastSealed.from, l.lastSealed.to, l.lastSealed.good = 0, 0, 0
	l.sealedMu.Unlock()
	l.st = st
	l.tail.Store(st.tailIndex())
	l.first.Store(first)
	l.durable.Store(last)
	return rep, nil
}

func segName(index uint64) string { return fmt.Sprintf("%020d", index) }

// segmentFileBytes sums the sizes of segs in dir.
func segmentFileBytes(dir string, segs []segFile) (int64, error) {
	var n int64
	for _, sg := range segs {
		st, err := os.Stat(filepath.Join(dir, sg.name))
		if err != nil {
			return 0, fmt.Errorf("wal: stat segment: %w", err)
		}
		n += st.Size()
	}
	return n, nil
}

// Size is the bytes of all segment files up to their last record, as
// MaxBytes counts them (the zero padding of the tail and the prepared next
// segment, up to 2 × (SegmentSize + 64 KiB) more on disk, is not counted).
func (l *Log) Size() int64 { return l.size.Load() }

// MaxBytes is Options.MaxBytes (0 = no cap).
func (l *Log) MaxBytes() int64 { return l.opts.MaxBytes }

// MinSegmentsUnderCap is the smallest Options.MaxBytes in segments: the
// tail and the newest sealed segment are never truncated, and the cap must
// leave room beyond them.
const MinSegmentsUnderCap = 4

// Full returns a channel that receives (coalesced) when an Append was
// refused with ErrFull, so that truncation can run at once instead of at
// its next tick.
func (l *Log) Full() <-chan struct{} { return l.full }

// recordBytes is what a payload of n bytes takes in a segment file.
func recordBytes(n int) int64 {
	return int64(binenc.UvarintLen(uint64(n+headerSize)) + n + headerSize)
}

// Append writes payload as one record and returns its index once the record
// is fsynced (group commit: it shares the write and the fsync with the
// Appends that arrived meanwhile). onAssign, if not nil, is called with the
// index from the writer goroutine before the record is written, so a caller
// can register interest in the index before any reader can see it; after a
// failed write the index is never visible. Errors: ErrRecordTooLarge,
// ErrFull (the MaxBytes cap; nothing written), ErrClosed, or the wrapped
// I/O error of a failed write (disk full...). payload is only read, and
// not copied before the writer copies it into the tail segment.
func (l *Log) Append(payload []byte, onAssign func(uint64)) (uint64, error) {
	return l.AppendGathered([][]byte{make([]byte, headerSize), payload}, onAssign)
}

// AppendEnveloped is Append for a caller that built the payload behind
// HeaderSize free bytes: rec is HeaderSize bytes (room for the envelope
// header, which the writer fills in its copy of the record; rec is only
// read) followed by the payload, so the payload is written without
// another copy. rec must not be modified until AppendEnveloped returns;
// afterwards it is the caller's again. Results and errors are
// Append's.
func (l *Log) AppendEnveloped(rec []byte, onAssign func(uint64)) (uint64, error) {
	r := newAppendReq()
	r.one[0] = rec
	return l.appendWait(r, r.one[:], onAssign)
}

// AppendGathered is AppendEnveloped for a record in pieces: the record is
// the concatenation of vec, whose first piece starts with HeaderSize free
// bytes (room for the envelope header). The writer copies the pieces
// straight into the tail segment's memory and seals the envelope there,
// so a caller whose payloads are slices of memory it holds anyway (a
// request body) does not copy them into a record buffer first. Neither
// vec nor the memory of its pieces may be modified until AppendGathered
// returns. Results and errors are Append's.
func (l *Log) AppendGathered(vec [][]byte, onAssign func(uint64)) (uint64, error) {
	return l.appendWait(newAppendReq(), vec, onAssign)
}

// AppendEnvelopedAsync is AppendEnveloped without the wait: it hands rec
// to the writer and returns; the outcome comes as one call of onDone(index,
// err), from the writer goroutine, once the record's group commit has been
// fsynced (err nil; the record is durable and readers may already have seen
// it) or has failed (err as Append's: ErrFull or the wrapped I/O error;
// nothing of it is visible), or, when Close came before the writer took
// rec, with ErrClosed (nothing written; index 0) from the goroutine
// calling Close. onAssign is called as for Append, before onDone. rec must
// not be modified until onDone is called, or until its index is durable
// (DurableIndex, a reader's record; it may come before onDone): the
// writer has copied a record into the tail segment before it writes it,
// and reads none of rec afterwards. onDone must not block (it holds
// up the writer, or Close), nor append to or close l (the writer would wait
// for itself). A caller that waits for something that follows durability
// (a projector verdict) thus sleeps once instead of twice per record.
//
// It returns ErrRecordTooLarge or ErrClosed (or the too-short error of
// AppendEnveloped) without calling onDone; nil once the writer has rec.
func (l *Log) AppendEnvelopedAsync(rec []byte, onAssign func(uint64), onDone func(index uint64, err error)) error {
	r := newAppendReq()
	r.one[0] = rec
	return l.appendAsync(r, r.one[:], onAssign, onDone)
}

// AppendGatheredAsync is AppendEnvelopedAsync for a record in pieces (as
// AppendGathered's vec): neither vec nor the memory of its pieces may be
// modified until onDone is called or the record's index is durable,
// whichever comes first (as for AppendEnvelopedAsync's rec). Outcome and
// errors are AppendEnvelopedAsync's.
func (l *Log) AppendGatheredAsync(vec [][]byte, onAssign func(uint64), onDone func(index uint64, err error)) error {
	return l.appendAsync(newAppendReq(), vec, onAssign, onDone)
}

// newAppendReq returns a cleared appendReq from appendReqs, or a new one.
func newAppendReq() *appendReq {
	r, _ := appendReqs.Get().(*appendReq)
	if r == nil {
		r = &appendReq{done: make(chan error, 1)}
	}
	return r
}

// prepare checks the record vec and sets r up for it. r is recycled on
// error.
func (r *appendReq) prepare(vec [][]byte, onAssign func(uint64), onDone func(uint64, error), maxPayload int) error {
	n := 0
	for _, p := range vec {
		n += len(p)
	}
	if len(vec) == 0 || len(vec[0]) < headerSize {
		r.recycle()
		return fmt.Errorf("wal: append: record of %d bytes does not start with the %d-byte header", n, headerSize)
	}
	if n-headerSize > maxPayload {
		r.recycle()
		return ErrRecordTooLarge
	}
	r.vec, r.n, r.onAssign, r.onDone, r.index = vec, n, onAssign, onDone, 0
	return nil
}

// appendWait is appendAsync without onDone (the writer's outcome comes
// on r.done) followed by the wait for that outcome (AppendEnveloped,
// AppendGathered).
func (l *Log) appendWait(r *appendReq, vec [][]byte, onAssign func(uint64)) (uint64, error) {
	if err := l.appendAsync(r, vec, onAssign, nil); err != nil {
		return 0, err
	}
	err := <-r.done // the writer's one send; it does not touch r after it
	index := r.index
	r.recycle()
	if err != nil {
		return 0, err
	}
	return index, nil
}

// appendAsync hands r (the record vec) to the writer, whose outcome comes
// through onDone, or on r.done when onDone is nil (AppendEnvelopedAsync,
// AppendGatheredAsync, appendWait). r is recycled on error.
func (l *Log) appendAsync(r *appendReq, vec [][]byte, onAssign func(uint64), onDone func(uint64, error)) error {
	if err := r.prepare(vec, onAssign, onDone, l.opts.MaxRecordBytes); err != nil {
		return err
	}
	if !l.send(r) {
		r.recycle()
		return ErrClosed
	}
	return nil
}

// reqQueue is how many appends wait for the writer without sleeping.
const reqQueue = 1024

// send queues r for the writer; false when the log is closed (r was not
// queued). A queued r is always finished: by the writer, or by Close with
// ErrClosed.
func (l *Log) send(r *appendReq) bool {
	l.sendMu.RLock()
	defer l.sendMu.RUnlock()
	if l.closed {
		return false
	}
	select {
	case l.reqs <- r:
		return true
	case <-l.stop:
		return false
	}
}

// appendReqs holds appendReqs for reuse (with their done channel): an
// append allocates neither.
var appendReqs sync.Pool

func (l *Log) writer() {
	defer close(l.done)
	batch := make([]*appendReq, 0, 256)
	for {
		var r *appendReq
		select {
		case r = <-l.reqs:
		case <-l.stop:
			return
		}
		batch = append(batch[:0], r)
		size := r.n
	collect:
		for size < l.opts.MaxBatchBytes {
			select {
			case r2 := <-l.reqs:
				batch = append(batch, r2)
				size += r2.n
			default:
				break collect
			}
		}
		batch = l.admit(batch)
		if len(batch) == 0 {
			continue
		}
		err := l.writeBatch(batch)
		for _, r := range batch {
			r.finish(err)
		}
	}
}

// admit answers ErrFull to the requests of batch that would take the
// segment files past MaxBytes (in arrival order: a request that fits after
// a refused larger one is still admitted) and returns the rest.
func (l *Log) admit(batch []*appendReq) []*appendReq {
	if l.opts.MaxBytes <= 0 {
		return batch
	}
	size := l.size.Load()
	kept := batch[:0]
	refused := 0
	for _, r := range batch {
		n := recordBytes(r.n - headerSize)
		if size+n > l.opts.MaxBytes {
			r.finish(ErrFull)
			refused++
			continue
		}
		size += n
		kept = append(kept, r)
	}
	if refused > 0 {
		select {
		case l.full <- struct{}{}:
		default:
		}
		l.failLog.Warn("wal: at its byte cap; appends refused (pushes answer failed) until projected segments are truncated",
			"bytes", size, "cap", l.opts.MaxBytes, "refused", refused)
	}
	return kept
}

// writeBatch writes and fsyncs one group commit. On failure the handle is
// failed, the log is rolled back to the durable index and reopened
// (fail-stop).
func (l *Log) writeBatch(batch []*appendReq) error {
	// broken and st are written only by this goroutine (and by Close, after
	// it has exited), so they are read here without the lock; the exclusive
	// lock, which waits for readers, is taken only for a reopen.
	if l.broken != nil || l.st == nil {
		l.lgMu.Lock()
		err := l.reopenLocked()
		l.lgMu.Unlock()
		if err != nil {
			return err
		}
	}

	l.lgMu.RLock()
	idx := l.durable.Load()
	var written int64
	for _, r := range batch {
		idx++
		r.index = idx
		written += int64(binenc.UvarintLen(uint64(r.n)) + r.n)
		if r.onAssign != nil {
			r.onAssign(idx)
		}
	}
	l.writing.Store(idx)
	rolled, err := l.st.writeBatch(batch)
	l.lgMu.RUnlock()
	if err == nil {
		if rolled {
			l.tail.Store(l.st.tailIndex())
		}
		err = l.sync(rolled)
	}
	if err != nil {
		err = fmt.Errorf("wal: write: %w", err)
		l.failLog.Error("wal: write failed; failing the handle and rolling back", "dir", l.dir, "durable", l.durable.Load(), "err", err)
		l.writing.Store(l.durable.Load())
		l.lgMu.Lock()
		l.broken = err
		if rerr := l.reopenLocked(); rerr != nil {
			l.failLog.Error("wal: reopen after failed write", "err", rerr)
		}
		l.lgMu.Unlock()
		return err
	}
	l.size.Add(written)
	l.durable.Store(idx)
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return nil
}

func (l *Log) sync(dir bool) error {
	if l.opts.NoSync {
		return nil
	}
	start := time.Now()
	if err := l.st.sync(); err != nil {
		return err
	}
	if dir {
		if err := l.st.syncDir(); err != nil {
			return err
		}
	}
	d := time.Since(start)
	if l.opts.ObserveSync != nil {
		l.opts.ObserveSync(d)
	}
	if d > slowSync {
		l.opts.Logger.Warn("wal: slow fsync", "took", d)
	}
	return nil
}

// reopenLocked closes the current handle (never written again) and reopens
// the log rolled back to the last durable index. Caller holds lgMu.
func (l *Log) reopenLocked() error {
	if l.st != nil {
		_ = l.st.close(false) // never written again; the repair cuts what was not durable
		l.st = nil
	}
	if _, err := l.openLocked(int64(l.durable.Load())); err != nil {
		l.broken = err
		return err
	}
	l.broken = nil
	return nil
}

// DurableIndex is the highest fsynced index (0 when the log is empty).
func (l *Log) DurableIndex() uint64 { return l.durable.Load() }

// FirstIndex is the lowest index still in the log (1 on a new log; after
// truncation, the first kept index; DurableIndex+1 when empty).
func (l *Log) FirstIndex() uint64 { return l.first.Load() }

// InFlight reports whether a group commit is being written and fsynced:
// records past DurableIndex that become durable (or fail) within one
// fsync. The projector uses it to let a small batch wait for them
// (projector.Config.MinBatchItems).
func (l *Log) InFlight() bool {
	w := l.writing.Load()
	return w > l.durable.Load()
}

// Notify returns a channel that receives (coalesced) after new records
// become durable.
func (l *Log) Notify() <-chan struct{} { return l.notify }

// Read returns a copy of the payload of the record at index (the caller's
// to keep; View reads without the copy). Errors: ErrNotFound (outside
// [FirstIndex, DurableIndex]), ErrCorruptRecord, ErrUnknownVersion,
// ErrClosed, or an I/O error.
func (l *Log) Read(index uint64) ([]byte, error) {
	var out []byte
	err := l.View(index, func(p []byte) error {
		out = append([]byte(nil), p...)
		return nil
	})
	return out, err
}

// View calls fn with the payload of the record at index and returns fn's
// error. The payload may be the log's in-memory copy of its segment: fn
// must not modify it, nor use it after returning (the buffer may then be
// reused for another segment: segments.go, "Segment buffers"). Errors:
// Read's, without calling fn.
func (l *Log) View(index uint64, fn func(payload []byte) error) error {
	l.pinMu.RLock()
	defer l.pinMu.RUnlock()
	p, err := l.read(index)
	if err != nil {
		return err
	}
	return fn(p)
}

// reusable reports whether a dropped segment buffer whose records end at
// index last may be overwritten: every open Cursor has released last, and
// no View is running (a View that starts later cannot reach the dropped
// buffer). It never blocks, so a reader never stalls the writer: a buffer
// that is not reusable now is left for a later roll or to the garbage
// collector.
func (l *Log) reusable(last uint64) bool {
	if last > l.released.Load() || !l.pinMu.TryLock() {
		return false
	}
	l.pinMu.Unlock()
	return true
}

// read is Read without the copy: the payload aliases the segment's memory
// (the tail's or the cached segment's) where it is resident, and the
// caller must hold it under a Cursor's release mark or a View.
func (l *Log) read(index uint64) ([]byte, error) {
	if index > l.durable.Load() || index < l.first.Load() {
		return nil, ErrNotFound
	}
	// The records the projector reads next are in the segments this
	// process wrote and still holds (the tail and the one rolled from):
	// served from that memory, with no check of the file (checkSealed reads
	// and verifies a whole sealed segment from disk).
	l.lgMu.RLock()
	var rec []byte
	ok := false
	if l.st != nil {
		rec, ok = l.st.readResident(index)
	}
	l.lgMu.RUnlock()
	if ok {
		p, err := DecodeRecord(rec)
		if err != nil {
			return nil, fmt.Errorf("wal: read %d: %w", index, err)
		}
		return p, nil
	}
	damaged, err := l.checkSealed(index)
	if err != nil {
		return nil, fmt.Errorf("wal: read %d: %w", index, err)
	}
	if damaged {
		// A damaged segment is never loaded into the segment store: the
		// records before the damage verify; read them from the file.
		p, err := ReadRecordAt(l.dir, index)
		if err != nil {
			return nil, fmt.Errorf("wal: read %d: %w", index, err)
		}
		return p, nil
	}
	l.readMu.Lock()
	defer l.readMu.Unlock()
	l.lgMu.RLock()
	defer l.lgMu.RUnlock()
	if l.st == nil {
		return nil, ErrClosed
	}
	rec, err = l.st.read(index)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err == nil {
		p, derr := DecodeRecord(rec)
		if derr == nil {
			return p, nil
		}
		err = derr
	}
	// A record of a sealed segment that checkSealed let through verifies
	// in the file; should the in-memory copy fail to serve it, read it
	// from the file instead (a sealed segment is never written again).
	if index < l.tail.Load() {
		if p, ferr := ReadRecordAt(l.dir, index); ferr == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("wal: read %d: %w", index, err)
}

// checkSealed verifies, once per segment, the records of the sealed
// segment holding index: a segment maps an index to a record by position,
// so a sealed segment that lost or merged records would otherwise be read
// as the wrong records (the checksum does not cover the index). Records
// before the first problem are served (damaged reports that the segment has
// a problem, so that Read serves them from the file, not from memory);
// from it on, and past a short segment's end, Read returns
// ErrCorruptRecord.
func (l *Log) checkSealed(index uint64) (damaged bool, err error) {
	if index >= l.tail.Load() {
		return false, nil
	}
	l.sealedMu.Lock()
	ls := l.lastSealed
	l.sealedMu.Unlock()
	if index >= ls.from && index < ls.to {
		if index >= ls.from+ls.good {
			return true, fmt.Errorf("%w: sealed segment %s verifies only up to index %d", ErrCorruptRecord, segName(ls.from), ls.from+ls.good-1)
		}
		return ls.from+ls.good < ls.to, nil
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return false, err
	}
	for i := 0; i+1 < len(segs); i++ {
		s, next := segs[i], segs[i+1]
		if index < s.index || index >= next.index {
			continue
		}
		l.sealedMu.Lock()
		good, ok := l.sealedGood[s.index]
		l.sealedMu.Unlock()
		if !ok {
			data, err := os.ReadFile(filepath.Join(l.dir, s.name))
			if err != nil {
				return false, err
			}
			_, n, reason := scanSegment(data, -1)
			good = uint64(n)
			if reason != "" || s.index+good != next.index {
				l.opts.Logger.Error("wal: sealed segment does not verify", "segment", s.name,
					"verified_records", n, "expected", next.index-s.index, "reason", reason)
			}
			l.sealedMu.Lock()
			if l.sealedGood == nil {
				l.sealedGood = make(map[uint64]uint64)
			}
			l.sealedGood[s.index] = good
			l.sealedMu.Unlock()
		}
		l.sealedMu.Lock()
		l.lastSealed.from, l.lastSealed.to, l.lastSealed.good = s.index, next.index, good
		l.sealedMu.Unlock()
		if index >= s.index+good {
			return true, fmt.Errorf("%w: sealed segment %s verifies only up to index %d", ErrCorruptRecord, s.name, s.index+good-1)
		}
		return s.index+good < next.index, nil
	}
	return false, nil
}

// TruncateProjected removes sealed segments whose entries are all <=
// checkpoint and whose file was last written more than retention ago. The
// newest sealed segment and the tail are always kept (the tail is the
// writer's; the newest sealed one is where a lagging projector reads). It
// returns how many segments it removed.
func (l *Log) TruncateProjected(checkpoint uint64, retention time.Duration) (int, error) {
	segs, err := listSegments(l.dir)
	if err != nil {
		return 0, err
	}
	// Segment i (not the tail) covers [segs[i].index, segs[i+1].index-1].
	keepFrom := uint64(0)
	removed := 0
	for i := 0; i+1 < len(segs)-1; i++ { // keep at least the last sealed segment's successor
		next := segs[i+1]
		if next.index-1 > checkpoint {
			break
		}
		st, err := os.Stat(filepath.Join(l.dir, segs[i].name))
		if err != nil || time.Since(st.ModTime()) < retention {
			break
		}
		keepFrom = next.index
		removed++
	}
	if removed == 0 {
		return 0, nil
	}
	gone, err := segmentFileBytes(l.dir, segs[:removed])
	if err != nil {
		return 0, err
	}
	l.readMu.Lock()
	defer l.readMu.Unlock()
	l.lgMu.RLock()
	defer l.lgMu.RUnlock()
	if l.st == nil {
		return 0, ErrClosed
	}
	if keepFrom >= l.tail.Load() {
		return 0, nil // never remove the tail
	}
	// Whole segment files are removed; the first kept one is not touched
	// (its mtime stays the age retention is judged by).
	if err := l.st.truncateFront(keepFrom); err != nil {
		return 0, err
	}
	l.first.Store(keepFrom)
	l.sealedMu.Lock()
	for k := range l.sealedGood {
		if k <= keepFrom {
			delete(l.sealedGood, k) // rewritten or gone
		}
	}
	l.lastSealed.from, l.lastSealed.to, l.lastSealed.good = 0, 0, 0
	l.sealedMu.Unlock()
	l.size.Add(-gone) // the kept first segment is rewritten with the same records
	return removed, syncDir(l.dir)
}

// Close stops the writer after in-flight appends, fsyncs and closes the
// log. It is idempotent.
func (l *Log) Close() error {
	var err error
	l.stopOnce.Do(func() {
		close(l.stop)
		<-l.done
		// No append hands a request over after this; what the writer
		// left queued is refused.
		l.sendMu.Lock()
		l.closed = true
		l.sendMu.Unlock()
	drain:
		for {
			select {
			case r := <-l.reqs:
				r.finish(ErrClosed)
			default:
				break drain
			}
		}
		l.lgMu.Lock()
		defer l.lgMu.Unlock()
		if l.st != nil {
			err = l.st.close(true)
			l.st = nil
		}
		if l.prep != nil {
			l.prep.Stop()
		}
	})
	return err
}
