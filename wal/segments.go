package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/queenmq/queen-go/internal/binenc"
)

// segStore is the segment files of one open log: the on-disk layout
// tidwall/wal's binary format defined and earlier builds wrote through it
// (doc.go, "Files"), written and read by this package itself, so that a
// group commit is one copy of each record into the tail segment's memory
// and one write call, with no batch copy and no buffer that grows by
// reallocation.
//
// The tail segment's bytes are kept in memory, in a buffer allocated once
// with room for SegmentSize (plus slack), and so is the sealed segment read
// (or rolled from) last: read returns slices of that memory, which is
// only appended to while it is a segment's, and reused for another segment
// only once no reader holds a slice of it ("Segment buffers", below).
//
// Concurrency: one writer (the Log's writer goroutine) calls writeBatch;
// read, bounds and truncateFront may be called from any goroutine. mu
// guards segs, the segments' buf and pos headers, first and last; the
// writer writes the file, and seals each new record's envelope in the
// tail's memory, outside it (readers never read bytes that are not yet
// durable: Log.read and Cursor stop at DurableIndex).
type segStore struct {
	dir     string
	segSize int
	noSync  bool
	// prep prepares the next segment file (nil: segments are created
	// empty and written by appending, Options.NoPreallocate); the tail is
	// padded with zeros at open too ("Preallocated segments", prealloc.go).
	prep *preparer
	// warn logs a padding failure (rate-limited by the Log).
	warn func(msg string, args ...any)

	mu   sync.Mutex
	segs []*segment // index order; the last is the tail
	// first is the index of the first kept record; last that of the last
	// written one (first-1 when the log is empty).
	first, last uint64
	// cached is the sealed segment whose bytes are in memory (nil: none).
	cached *segment
	// spares are the buffers of segments dropped from memory (oldest
	// first, at most maxSpares), each kept for reuse as the next tail or
	// loaded segment once reusable says no reader can still hold a slice
	// of it (see segment buffers, below).
	spares []spare
	// reusable reports whether the bytes of a dropped buffer whose records
	// end at index last may be overwritten (Log.reusable); nil: never, so
	// every buffer is fresh.
	reusable func(last uint64) bool
	// reused counts the buffers taken from spares (tests, benchmarks).
	reused int

	// f is the tail segment's file (writer goroutine and close only), and
	// fileSize its size in bytes: len of the tail's buf, or more when the
	// file is padded with zeros beyond its records.
	f        *os.File
	fileSize int64
	// fsync syncs f (nil: dataSync or f.Sync); tests set it to inject
	// fsync errors.
	fsync func(*os.File) error
}

// syncFile makes f durable through the store's fsync: with meta, data and
// all metadata (f.Sync, fsync(2): a directory, a file whose size was
// cut); without, data and what reading it needs (dataSync, fdatasync(2):
// the group commit of the tail).
func (s *segStore) syncFile(f *os.File, meta bool) error {
	if s.fsync != nil {
		return s.fsync(f)
	}
	if meta {
		return f.Sync()
	}
	return dataSync(f)
}

// segment is one segment file; buf and pos are nil unless it is the tail
// or cached.
type segment struct {
	index uint64 // index of its first record
	name  string
	buf   []byte
	// pos[i] is where record index+i sits in buf (without its length
	// prefix).
	pos []span
	// resident is true for the buffers this process built: the tail (from
	// the repaired, fully verified tail file at open, then by the writer)
	// and the segments rolled from it. Their pos map indexes to records
	// exactly as written, so reads from them need no check of the file.
	resident bool
}

type span struct{ start, end int }

// Segment buffers. A segment's buffer is handed to readers as slices
// (read, readResident), and a slice outlives the segment's stay in memory:
// the projector holds the payloads of a batch until it has committed it.
// So a buffer dropped from memory (the cached segment replaced by the one
// rolled from or loaded next) is not overwritten at once: it becomes a
// spare that records the last index it holds, and is reused only when
// reusable(last) says that no slice of any record up to that index is
// still in use (Log.reusable: every open Cursor has released it, and no
// Log.View is running). A dropped buffer is never reachable again, so no
// new slice of it can be handed out after it is dropped. Until then, and
// for buffers that never become reusable (a projector that stopped), the
// spares are bounded (maxSpares): the oldest is left to the garbage
// collector, which frees it once the last slice of it is gone. Reuse
// saves allocating and zeroing a segment-sized buffer per roll (and per
// sealed segment a lagging projector loads).
const maxSpares = 1

// spare is the buffer (and record table) of a segment dropped from memory.
type spare struct {
	buf  []byte
	pos  []span
	last uint64 // the highest index whose record may be sliced from buf
}

// retire makes sg's buffer a spare (caller holds mu): a buffer larger than
// a new tail's is left to the garbage collector (a record larger than a
// segment), so spares never pin more than maxSpares × tailCap bytes.
func (s *segStore) retire(sg *segment) {
	if sg.buf == nil || s.reusable == nil || cap(sg.buf) > s.tailCap() {
		return
	}
	if len(s.spares) == maxSpares {
		s.spares[0] = spare{}
		s.spares = append(s.spares[:0], s.spares[1:]...)
	}
	s.spares = append(s.spares, spare{buf: sg.buf[:0], pos: sg.pos[:0], last: sg.index + uint64(len(sg.pos)) - 1})
}

// take returns an empty buffer with capacity for at least n bytes and an
// empty record table: a reusable spare, else fresh memory (caller holds
// mu).
func (s *segStore) take(n int) ([]byte, []span) {
	for i, sp := range s.spares {
		if cap(sp.buf) >= n && s.reusable(sp.last) {
			s.spares[i] = spare{}
			s.spares = append(s.spares[:i], s.spares[i+1:]...)
			s.reused++
			return sp.buf, sp.pos
		}
	}
	return make([]byte, 0, n), nil
}

// segmentSlack is the room a tail buffer has beyond SegmentSize: the
// record that fills a segment is still appended to it (the roll comes
// after), and only a record larger than the slack reallocates the buffer.
// maxPrealloc bounds the capacity allocated up front: a segment size
// configured larger than it grows its buffer by append past that point,
// so a huge QUEEN_WAL_SEGMENT_BYTES does not reserve its whole size in
// the heap at every roll.
const (
	segmentSlack = 64 << 10
	maxPrealloc  = 16 << 20
)

// tailCap is the capacity a new tail buffer is made with.
func (s *segStore) tailCap() int {
	return min(s.segSize, maxPrealloc) + min(s.segSize, segmentSlack)
}

// openSegStore opens the segment files of dir (already repaired: repair
// has also finished a truncation that a crash interrupted inside an
// earlier build's tidwall, a "<segment>.START" or "<segment>.END" file, as
// tidwall did on open) for writing after the tail's last record, creating
// the first segment of an empty log. With prep set, the tail is padded
// with zeros to padSize first (a padding failure, a full disk, is logged
// through warn and leaves the tail unpadded: it is then appended to).
func openSegStore(dir string, segSize int, noSync bool, prep *preparer, warn func(string, ...any)) (*segStore, error) {
	files, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	s := &segStore{dir: dir, segSize: segSize, noSync: noSync, prep: prep, warn: warn}
	if len(files) == 0 {
		f, err := os.OpenFile(filepath.Join(dir, segName(1)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
		if err != nil {
			return nil, err
		}
		s.f = f
		s.segs = []*segment{{index: 1, name: segName(1), buf: make([]byte, 0, s.tailCap()), resident: true}}
		s.first, s.last = 1, 0
		s.pad()
		return s, nil
	}
	for _, fl := range files {
		s.segs = append(s.segs, &segment{index: fl.index, name: fl.name})
	}
	tail := s.segs[len(s.segs)-1]
	path := filepath.Join(dir, tail.name)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pos, n := indexFrames(nil, data)
	if !allZero(data[n:]) {
		return nil, fmt.Errorf("%w: tail segment %s does not parse at byte %d after repair", ErrCorruptRecord, tail.name, n)
	}
	buf := make([]byte, n, max(n+segmentSlack, s.tailCap()))
	copy(buf, data)
	tail.buf, tail.pos, tail.resident = buf, pos, true
	f, err := os.OpenFile(path, os.O_RDWR, 0o640)
	if err != nil {
		return nil, err
	}
	s.f, s.fileSize = f, int64(len(data))
	s.first = s.segs[0].index
	s.last = tail.index + uint64(len(pos)) - 1
	s.pad()
	return s, nil
}

// pad extends the tail file with zeros to padSize when the store
// preallocates; a failure is logged and leaves the file as it was.
func (s *segStore) pad() {
	if s.prep == nil {
		return
	}
	want := padSize(s.segSize)
	if err := padFile(s.f, s.fileSize, want, s.noSync); err != nil {
		s.warn("wal: padding the tail segment failed; it is appended to instead", "err", err)
		return
	}
	s.fileSize = max(s.fileSize, want)
}

// indexFrames appends to pos where each length-prefixed frame of data sits
// and returns it with the offset after the last whole frame: the end of
// data, or where a zero length prefix starts the zero padding of a
// preallocated segment (a record is never empty), or a torn frame.
func indexFrames(pos []span, data []byte) ([]span, int) {
	end := 0
	for end < len(data) {
		size, k := binary.Uvarint(data[end:])
		if k <= 0 || size == 0 || size > uint64(len(data)-end-k) {
			break
		}
		start := end + k
		end = start + int(size)
		pos = append(pos, span{start, end})
	}
	return pos, end
}

// finishTruncation completes a TruncateFront or TruncateBack of an earlier
// build (tidwall) that a crash interrupted: a "<first>.START" file is the
// new first segment, written in full before any older segment was
// removed, so the segments before it are removed and it takes its name; a
// "<index>.END" file is the new last segment, so the segments after it go.
func finishTruncation(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var start, end string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || len(n) < 20 {
			continue
		}
		if _, err := strconv.ParseUint(n[:20], 10, 64); err != nil {
			continue
		}
		switch {
		case len(n) == 26 && strings.HasSuffix(n, ".START"):
			start = n
		case len(n) == 24 && strings.HasSuffix(n, ".END") && end == "":
			end = n
		}
	}
	if start == "" && end == "" {
		return nil
	}
	if start != "" && end != "" {
		return fmt.Errorf("%w: both %s and %s exist", ErrCorruptRecord, start, end)
	}
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	if start != "" {
		idx, _ := strconv.ParseUint(start[:20], 10, 64)
		for _, sg := range segs {
			if sg.index <= idx {
				if err := os.Remove(filepath.Join(dir, sg.name)); err != nil {
					return err
				}
			}
		}
		if err := os.Rename(filepath.Join(dir, start), filepath.Join(dir, start[:20])); err != nil {
			return err
		}
	} else {
		idx, _ := strconv.ParseUint(end[:20], 10, 64)
		for _, sg := range segs {
			if sg.index >= idx {
				if err := os.Remove(filepath.Join(dir, sg.name)); err != nil {
					return err
				}
			}
		}
		if err := os.Rename(filepath.Join(dir, end), filepath.Join(dir, end[:20])); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// bounds returns the first kept index and the last written one.
func (s *segStore) bounds() (first, last uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

// tailIndex is the index of the tail segment's first record.
func (s *segStore) tailIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.segs[len(s.segs)-1].index
}

// writeBatch appends the records of batch (indexes last+1...) to the
// tail segment, sealing each one's envelope in its copy, and writes them
// with one write call per segment touched (at the tail's data end: over
// its zero padding, or extending the file), rolling to a new segment as
// tidwall did: before the batch when the tail is already past
// SegmentSize, and after the record that takes it to SegmentSize or more.
// rolled reports a roll (the caller fsyncs the directory). Nothing is
// fsynced here except a segment rolled from (its last bytes; the caller
// fsyncs the tail). On error the store must not be written again (the
// Log reopens the directory).
func (s *segStore) writeBatch(batch []*appendReq) (rolled bool, err error) {
	s.mu.Lock() // truncateFront replaces segs (never removing the tail)
	t := s.segs[len(s.segs)-1]
	s.mu.Unlock()
	if len(t.buf) > s.segSize {
		if t, err = s.roll(t); err != nil {
			return false, err
		}
		rolled = true
	}
	mark := len(t.buf)
	for _, r := range batch {
		s.mu.Lock()
		// One growth for a record larger than the room left (a record
		// over the slack), not one per piece.
		t.buf = slices.Grow(t.buf, binenc.UvarintLen(uint64(r.n))+r.n)
		t.buf = binary.AppendUvarint(t.buf, uint64(r.n))
		start := len(t.buf)
		t.buf = t.buf[:start+r.n]
		at := start
		for _, p := range r.vec {
			at += copy(t.buf[at:], p)
		}
		rec := t.buf[start:at]
		t.pos = append(t.pos, span{start, len(t.buf)})
		s.last++
		s.mu.Unlock()
		// The envelope is sealed in this copy, outside mu, its checksum
		// computed over contiguous memory (over the pieces, in the
		// appending goroutine, it cost more: a CRC-32C call per piece of
		// some 40 or 260 bytes). The record's index is already in pos and
		// last, but no reader is served it before it is durable
		// (Log.read and Cursor stop at DurableIndex, stored after the
		// write and fsync).
		sealEnvelope(rec)
		if len(t.buf) >= s.segSize {
			if err := s.write(t.buf, mark); err != nil {
				return rolled, err
			}
			if t, err = s.roll(t); err != nil {
				return rolled, err
			}
			rolled, mark = true, 0
		}
	}
	if len(t.buf) > mark {
		if err := s.write(t.buf, mark); err != nil {
			return rolled, err
		}
	}
	return rolled, nil
}

// write writes buf[from:] to the tail file at offset from (buf is the
// tail's bytes from the start of the file).
func (s *segStore) write(buf []byte, from int) error {
	if _, err := s.f.WriteAt(buf[from:], int64(from)); err != nil {
		return err
	}
	s.fileSize = max(s.fileSize, int64(len(buf)))
	return nil
}

// seal cuts the tail file's zero padding (a sealed segment's file ends at
// its last record, as in the unpadded layout) and makes it durable: an
// fsync after a cut (the size changed), else an fdatasync; nothing under
// noSync but the cut.
func (s *segStore) seal(t *segment) error {
	cut := s.fileSize > int64(len(t.buf))
	if cut {
		if err := s.f.Truncate(int64(len(t.buf))); err != nil {
			return err
		}
		s.fileSize = int64(len(t.buf))
	}
	if s.noSync {
		return nil
	}
	return s.syncFile(s.f, cut)
}

// roll seals the tail t (padding cut, fsynced unless noSync, and closed;
// its bytes stay in memory as the cached segment) and starts a new, empty
// tail: the prepared file renamed to its name when one is ready, else a
// new empty file. The caller fsyncs the directory before the new
// segment's records are acknowledged.
func (s *segStore) roll(t *segment) (*segment, error) {
	if err := s.seal(t); err != nil {
		return nil, err
	}
	if err := s.f.Close(); err != nil {
		return nil, err
	}
	s.f = nil
	next := &segment{index: s.last + 1, name: segName(s.last + 1), resident: true}
	f, size, err := s.newTailFile(next.name)
	if err != nil {
		return nil, err
	}
	s.f, s.fileSize = f, size
	s.mu.Lock()
	s.setCached(t) // retires the segment cached before t, whose buffer next may reuse
	next.buf, next.pos = s.take(s.tailCap())
	s.segs = append(s.segs, next)
	s.mu.Unlock()
	return next, nil
}

// newTailFile returns the file of a new tail segment named name and its
// size: the prepared file (zero padded) renamed to name when the preparer
// has one ready, else a new empty file.
func (s *segStore) newTailFile(name string) (*os.File, int64, error) {
	path := filepath.Join(s.dir, name)
	if f, size := s.prep.take(path); f != nil {
		return f, size, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, 0, err
	}
	return f, 0, nil
}

// setCached makes sg the cached sealed segment, dropping the memory of the
// one before (caller holds mu).
func (s *segStore) setCached(sg *segment) {
	if s.cached != nil && s.cached != sg {
		s.retire(s.cached)
		s.cached.buf, s.cached.pos, s.cached.resident = nil, nil, false
	}
	s.cached = sg
}

// read returns the record (envelope and payload) at index, aliasing the
// segment's memory; a sealed segment not in memory is loaded from its
// file and becomes the cached one. Errors: ErrNotFound outside
// [first, last]; ErrCorruptRecord when the segment holding index ends (or
// stops parsing) before it; an I/O error.
func (s *segStore) read(index uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < s.first || index > s.last {
		return nil, ErrNotFound
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].index > index }) - 1
	if i < 0 {
		return nil, ErrNotFound
	}
	sg := s.segs[i]
	if sg.buf == nil {
		s.setCached(nil) // retires the cached segment, whose buffer the load may reuse
		data, pos, err := s.load(sg.name)
		if err != nil {
			return nil, err
		}
		sg.buf, sg.pos = data, pos
		s.setCached(sg)
	}
	k := index - sg.index
	if k >= uint64(len(sg.pos)) {
		return nil, fmt.Errorf("%w: segment %s holds %d records, not record %d", ErrCorruptRecord, sg.name, len(sg.pos), index)
	}
	p := sg.pos[k]
	return sg.buf[p.start:p.end:p.end], nil
}

// load reads the segment file name whole into a buffer from take (caller
// holds mu) and indexes its frames.
func (s *segStore) load(name string) ([]byte, []span, error) {
	f, err := os.Open(filepath.Join(s.dir, name))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	buf, pos := s.take(int(st.Size()))
	buf = buf[:st.Size()]
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, nil, err
	}
	pos, n := indexFrames(pos, buf)
	return buf[:n], pos, nil
}

// readResident is read for a record of a resident segment (the tail or
// the segment rolled from last, as this process wrote them); ok is false
// for any other index.
func (s *segStore) readResident(index uint64) (rec []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < s.first || index > s.last {
		return nil, false
	}
	sg := s.segs[len(s.segs)-1]
	if index < sg.index {
		sg = s.cached
	}
	if sg == nil || !sg.resident || index < sg.index || index-sg.index >= uint64(len(sg.pos)) {
		return nil, false
	}
	p := sg.pos[index-sg.index]
	return sg.buf[p.start:p.end:p.end], true
}

// truncateFront removes the segment files before the segment that starts
// at keepFrom, oldest first (a crash leaves a contiguous run). keepFrom
// must be the first index of a segment other than the tail.
func (s *segStore) truncateFront(keepFrom uint64) error {
	s.mu.Lock()
	k := -1
	for i, sg := range s.segs {
		if sg.index == keepFrom {
			k = i
			break
		}
	}
	if k < 0 || k == len(s.segs)-1 {
		s.mu.Unlock()
		return fmt.Errorf("wal: truncate front to %d: not the start of a sealed segment", keepFrom)
	}
	gone := append([]*segment(nil), s.segs[:k]...)
	s.segs = append([]*segment(nil), s.segs[k:]...)
	s.first = keepFrom
	for _, sg := range gone {
		if s.cached == sg {
			s.cached = nil
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, sg := range gone {
		if err := os.Remove(filepath.Join(s.dir, sg.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sync makes the tail segment's written records durable (fdatasync: a
// write into the padding changes no metadata but the modification time,
// and one that extended the file had its new size flushed by it too).
func (s *segStore) sync() error {
	if s.f == nil {
		return errors.New("tail segment not open")
	}
	return s.syncFile(s.f, false)
}

// syncDir fsyncs the directory (through the store's fsync), so that a
// segment file created by a roll survives a power cut.
func (s *segStore) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := s.syncFile(d, true); err != nil {
		return fmt.Errorf("sync dir %s: %w", s.dir, err)
	}
	return nil
}

// close closes the tail file. With flush set (a clean Close) the tail is
// sealed first (its zero padding cut, so a stopped log's files are in the
// unpadded layout, and fsynced); without, the handle is only closed (it
// failed; a repair follows).
func (s *segStore) close(flush bool) error {
	if s.f == nil {
		return nil
	}
	var err error
	if flush {
		s.mu.Lock()
		t := s.segs[len(s.segs)-1]
		s.mu.Unlock()
		err = s.seal(t)
	}
	err = errors.Join(err, s.f.Close())
	s.f = nil
	return err
}

// tailBytes is the tail segment's bytes up to its last record.
func (s *segStore) tailBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.segs[len(s.segs)-1].buf)
}
