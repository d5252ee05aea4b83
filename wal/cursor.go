package wal

import "errors"

// Entry is one record read through a Cursor.
type Entry struct {
	Index uint64
	// Payload aliases the log's memory: it must not be modified, and it
	// stays as read until the cursor releases Index (Cursor.Release).
	Payload []byte
}

// Cursor reads durable records in index order from a position. It is not
// safe for concurrent use; the projector owns one.
//
// The payloads Next returns are slices of the log's segment memory, not
// copies. Ownership rule: a payload stays valid until the cursor has
// released its index (Release with an index at or above it) or is
// closed; the log reuses a segment's memory only once every open cursor
// has released all of that segment's records. A cursor that never calls
// Release keeps every payload it read valid for good (the log then never
// reuses a buffer those payloads sit in: memory is left to the garbage
// collector, as without reuse).
type Cursor struct {
	log  *Log
	next uint64
	// released is the highest index whose payload this cursor no longer
	// uses (Release); always below next.
	released uint64
}

// NewCursor returns a cursor whose next record is at index next (clamped
// up to FirstIndex). Close it when done (it holds segment memory).
func (l *Log) NewCursor(next uint64) *Cursor {
	c := &Cursor{log: l, released: ^uint64(0)}
	l.curMu.Lock()
	if l.cursors == nil {
		l.cursors = make(map[*Cursor]struct{})
	}
	l.cursors[c] = struct{}{}
	l.curMu.Unlock()
	c.Seek(next)
	return c
}

// Seek moves the cursor so that the next record read is at index next
// (clamped up to FirstIndex: truncated records cannot be read). Seeking
// back lowers the release mark below next: records read again are held
// again.
func (c *Cursor) Seek(next uint64) {
	if first := c.log.FirstIndex(); next < first {
		next = first
	}
	c.next = next
	if next-1 < c.released {
		c.setReleased(next - 1)
	}
}

// Release tells the log that the caller no longer uses the payloads of
// records at or below index (the projector calls it with its checkpoint
// once a batch is committed), so that the segment memory they sit in may
// be reused. The mark only rises, and never past the last record read.
func (c *Cursor) Release(index uint64) {
	index = min(index, c.next-1)
	if index > c.released {
		c.setReleased(index)
	}
}

// Close releases everything the cursor read and unregisters it; the
// payloads it returned must not be used afterwards. It is idempotent.
func (c *Cursor) Close() {
	l := c.log
	l.curMu.Lock()
	defer l.curMu.Unlock()
	delete(l.cursors, c)
	l.updateReleasedLocked()
}

func (c *Cursor) setReleased(index uint64) {
	l := c.log
	l.curMu.Lock()
	defer l.curMu.Unlock()
	c.released = index
	l.updateReleasedLocked()
}

// updateReleasedLocked stores the lowest release mark of the open cursors
// (caller holds curMu).
func (l *Log) updateReleasedLocked() {
	low := ^uint64(0)
	for c := range l.cursors {
		low = min(low, c.released)
	}
	l.released.Store(low)
}

// Position is the index of the next record the cursor reads.
func (c *Cursor) Position() uint64 { return c.next }

// Next reads up to maxEntries durable records from the cursor, stopping
// before the payload bytes would exceed maxBytes (the first record is
// always returned, however large). It returns nil without error when no
// durable record is pending, and advances past what it returns. A record
// that fails verification returns ErrCorruptRecord (wrapped) and does not
// advance: corruption is never skipped.
func (c *Cursor) Next(maxEntries, maxBytes int) ([]Entry, error) {
	durable := c.log.DurableIndex()
	var out []Entry
	size := 0
	for idx := c.next; idx <= durable && len(out) < maxEntries; idx++ {
		p, err := c.log.read(idx)
		if errors.Is(err, ErrNotFound) && idx < c.log.FirstIndex() {
			// Truncated under us: skip to the first kept record.
			c.next = c.log.FirstIndex()
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if len(out) > 0 && size+len(p) > maxBytes {
			break
		}
		size += len(p)
		out = append(out, Entry{Index: idx, Payload: p})
		c.next = idx + 1
	}
	return out, nil
}
