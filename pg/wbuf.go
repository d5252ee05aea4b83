package pg

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The projection batch and pgx's connection write buffer.
//
// pgx builds a pipelined batch's messages in its connection's write buffer
// (pgproto3.Frontend), which restarts at 1 KiB after every batch larger
// than that: a batch whose segment bodies are hundreds of KiB long grows it
// by appending, once to fit write_segments' bind message and again for the
// statements after it, about twice the batch's size in garbage per batch.
// sendBatch hands the connection, before the batch, a buffer of the
// batch's expected size (wbufReserve, a message that appends no bytes but
// returns the buffer pgx is to write into), kept per connection
// (pgconn.PgConn.CustomData) and reused batch after batch, so a batch is
// encoded into it without growing it. The buffer belongs to its
// connection only: pgx may keep it as the connection's write buffer
// (a batch of at most 1 KiB), and only that connection, one operation at
// a time, writes into it.

// wbufKey is the CustomData key of a connection's kept write buffer
// (a *keptBuffer).
const wbufKey = "queen.pg.wbuf"

// wbufKeepMax bounds the write buffer a connection keeps between batches:
// a projector batch of the default MaxBatchBytes (4 MiB of WAL payload)
// with its framing fits. A larger batch gets a buffer of its size for
// itself only.
const wbufKeepMax = 5 << 20

// keptBudget bounds the bytes all kept buffers of the process hold
// together (the write buffers here and the segment-body parameter buffers
// of pg/pgarray.go, two per pool connection that has carried a
// projection batch): the projector takes whichever pool connection is
// free, so without a bound every connection of the pool (DB_POOL_SIZE)
// could come to keep two buffers of up to wbufKeepMax. Past the budget a
// batch gets a buffer for itself only, as a batch over wbufKeepMax does;
// that costs speed, never correctness. 16 MiB holds the buffers of a few
// connections at the largest batches, and of every connection at 100-item
// pushes (a few hundred KiB each).
const keptBudget = 16 << 20

// keptTotal is the bytes kept buffers hold now (the sum of their
// capacities), at most keptBudget.
var keptTotal atomic.Int64

// keptBuffer is a buffer one connection keeps from batch to batch. Its
// capacity is counted in keptTotal until the keptBuffer is collected (its
// connection closed and gone), when a cleanup gives it back.
type keptBuffer struct {
	b     []byte
	held  *atomic.Int64 // cap(b), as counted in total
	total *atomic.Int64 // &keptTotal (a test's own counter in tests)
}

// newKeptBuffer returns an empty keptBuffer whose bytes return to the
// budget when it is collected.
func newKeptBuffer() *keptBuffer {
	k := &keptBuffer{held: new(atomic.Int64), total: &keptTotal}
	runtime.AddCleanup(k, func(held *atomic.Int64) { keptTotal.Add(-held.Load()) }, k.held)
	return k
}

// keep makes buf k's buffer when it is at most wbufKeepMax bytes and the
// budget has room for the growth; it reports whether it did.
func (k *keptBuffer) keep(buf []byte) bool {
	if cap(buf) > wbufKeepMax {
		return false
	}
	grow := int64(cap(buf) - cap(k.b))
	if k.total.Add(grow) > keptBudget {
		k.total.Add(-grow)
		return false
	}
	k.held.Add(grow)
	k.b = buf
	return true
}

// wbufSlack is added to a batch's estimated size for what the estimate
// leaves out: the statements' bind framing, the checkpoint, the pg_notify
// queue names, COMMIT and Sync.
const wbufSlack = 4 << 10

// sendBatch is conn.SendBatch(ctx, b) with the connection's write buffer
// holding at least size more bytes first (see above); size is the batch's
// expected encoded length in bytes (0 or a conn that is neither a
// *pgx.Conn nor a pgx.Tx: plain SendBatch). The statements, their order and
// their results are SendBatch's.
func sendBatch(ctx context.Context, conn batcher, b *pgx.Batch, size int) pgx.BatchResults {
	var pc *pgconn.PgConn
	switch c := conn.(type) {
	case *pgx.Conn:
		pc = c.PgConn()
	case pgx.Tx:
		pc = c.Conn().PgConn()
	}
	if pc != nil && size > 0 && !pc.IsClosed() {
		kept, _ := pc.CustomData()[wbufKey].(*keptBuffer)
		if kept == nil {
			kept = newKeptBuffer()
			pc.CustomData()[wbufKey] = kept
		}
		pc.Frontend().Send(&wbufReserve{need: size + wbufSlack, kept: kept})
	}
	return conn.SendBatch(ctx, b)
}

// wbufReserve is a frontend message of no bytes: its Encode returns the
// pending messages dst in a buffer with room for need more bytes, the
// connection's kept buffer when that is large enough (kept becomes the
// larger buffer when it is not, up to wbufKeepMax).
type wbufReserve struct {
	need int
	kept *keptBuffer
}

// Frontend marks wbufReserve as a pgproto3.FrontendMessage.
func (*wbufReserve) Frontend() {}

// Decode implements pgproto3.Message; a wbufReserve is never received.
func (*wbufReserve) Decode([]byte) error { return errors.New("pg: wbufReserve is not decoded") }

// Encode implements pgproto3.Message: dst, its bytes unchanged, in a
// buffer with need bytes free.
func (r *wbufReserve) Encode(dst []byte) ([]byte, error) {
	return reserve(dst, r.need, r.kept), nil
}

// reserve returns dst's bytes in a buffer with need bytes free after
// them: dst itself when it has the room, else kept's when that is large
// enough, else a new buffer, which becomes kept's when keptBuffer.keep
// allows (at most wbufKeepMax bytes, within keptBudget). kept must belong
// to the one user of dst (a connection) and be written only through
// reserve's results.
func reserve(dst []byte, need int, kept *keptBuffer) []byte {
	if cap(dst)-len(dst) >= need {
		return dst
	}
	n := len(dst) + need
	buf := kept.b
	if cap(buf) < n {
		buf = make([]byte, 0, n)
		kept.keep(buf)
	}
	// buf is not dst's array: dst would have had the room.
	return append(buf[:0], dst...)
}

// wireLen estimates the encoded length in bytes of w's statements once
// queue has queued them: the segment bodies and the array parameters,
// without the framing that wbufSlack covers.
func (w *batchWrites) wireLen() int {
	n := 0
	if w.pack != nil { // nil: no segment (queue packs whenever there is one)
		n += len(w.pack.out) // segmentPack: the stored bodies one after another
	}
	// uuid[] 20 bytes an element; bigint[], integer[], boolean[] at most 12
	// (bases, counts, and the bodies' offsets and lengths).
	n += 20*len(w.segPID) + 12*5*len(w.segBase)
	n += 12 * (len(w.newKeys) + len(w.runs.hashes) + len(w.runs.base) + len(w.knownTicks) + len(w.knownRows))
	n += 20 * (len(w.knownRows) + len(w.knownParts))
	n += 20 * len(w.runs.pid)
	for _, q := range w.encQueues {
		n += 4 + len(q) + 8 // text[] element, boolean[] element
	}
	return n
}
