package wal

import "errors"

// Entry is one record read through a Cursor.
type Entry struct {
	Index uint64
	// Payload must not be modified (see Log.Read).
	Payload []byte
}

// Cursor reads durable records in index order from a position. It is not
// safe for concurrent use; the projector owns one.
type Cursor struct {
	log  *Log
	next uint64
}

// NewCursor returns a cursor whose next record is at index next (clamped
// up to FirstIndex).
func (l *Log) NewCursor(next uint64) *Cursor {
	c := &Cursor{log: l}
	c.Seek(next)
	return c
}

// Seek moves the cursor so that the next record read is at index next
// (clamped up to FirstIndex: truncated records cannot be read).
func (c *Cursor) Seek(next uint64) {
	if first := c.log.FirstIndex(); next < first {
		next = first
	}
	c.next = next
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
		p, err := c.log.Read(idx)
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
