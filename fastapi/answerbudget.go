package fastapi

import (
	"io"
	"math/bits"
	"net"
	"sync/atomic"
	"time"
)

// Pop answers a client does not read.
//
// A pop answer is built whole in memory (popanswer.go) and can be as large
// as QUEEN_MAX_POP_BYTES (16 MiB) plus the rest of one segment. fasthttp
// holds it until it is written, and a client that sends a pop and never
// reads kept it for QUEEN_WRITE_TIMEOUT_MS (60 s): 60 such connections held
// 450-670 MB of the broker (a hostile-input probe), and another client's
// pop waited seconds behind them. Time alone bounds nothing (connections
// that pop again as soon as they are cut keep as many answers in memory),
// so two bounds act together:
//
//   - Time (QUEEN_WRITE_STALL_TIMEOUT_MS, 10 s). An answer over
//     streamAnswerBytes is written as a body stream (answerStream) in
//     chunks of answerChunkBytes, each under a write deadline of the stall
//     timeout (never past QUEEN_WRITE_TIMEOUT_MS from the first byte): a
//     client that takes nothing for that long is disconnected and the
//     answer dropped, however long the write timeout. A client that reads
//     256 KiB every 10 s (26 kB/s) is never cut by it.
//   - Memory (QUEEN_MAX_PENDING_ANSWER_BYTES, DefaultPendingAnswerPops ×
//     QUEEN_MAX_POP_BYTES). answerBudget counts the bytes of streamed
//     answers from when they are built until fasthttp is done with them
//     (written, failed, or dropped with their connection): the answers
//     held, the memory that lasted as long as their clients did not read.
//
// How a pop meets the budget (answerBudget.grant, Server.fitAnswer):
//
//   - Its bound (PopRequest.MaxBytes) is QUEEN_MAX_POP_BYTES while the
//     answers pending leave that much, else the largest power of two they
//     leave (few distinct bounds: pg combines only concurrent pops of one
//     bound, pg/popcombine.go), not below popFloorBytes.
//   - With less than popFloorBytes left beside the answers pending, it
//     delivers one message (PopRequest.Batch 1).
//   - Its answer, once built, is counted if it fits beside the answers
//     pending, or if none is pending. One that does not fit, of a leased
//     pop, is refitted: the lease is given back (ReleaseLease: no delivery
//     attempt counted, as for a client that left) and the pop runs again
//     for the messages that fit, at least one. An autoAck pop's answer
//     cannot be refitted (its messages are consumed) and is counted
//     whole.
//
// The bounds of pops in progress are not counted. In normal operation
// nothing is pending (answers up to streamAnswerBytes are never counted,
// larger ones only until written), so every pop gets QUEEN_MAX_POP_BYTES
// and pg's pop combining is untouched; counting each pop's bound while it
// ran (a reservation, tried first) gave ten consumers of 100 small
// messages 16 MiB each of a 64 MiB budget, the later ones a smaller bound,
// and broke combining: twice the PostgreSQL CPU per message. So pops that
// start together all see the budget free, and each may decode up to its
// bound; what the budget bounds is the answers held once built (leased
// ones by refitting), not the transient peak of such a burst, which lasts
// until its pops are answered (60 pops of 100 kB messages that are never
// read: 200-212 MiB peak, 118-123 with reservations, 584-645 without a
// budget; docs/decisions.md). A burst of autoAck pops is held whole. (The
// claim statement's bound is whole segments, docs/decisions.md, so a
// smaller bound does not bound a burst either: 56 pops granted 64 KiB
// over 4 MB segments answered 4 MB each.)
//
// Neither changes what is delivered beyond the size of a batch: a pop
// still delivers at least one message, and a shorter batch is what any
// pop may return. An answer cut short by the stall timeout (or the write
// timeout, or the client leaving) is a delivery that failed, as it was
// before: a leased pop's messages return when the lease lapses, counted as
// a failed attempt (retries, DLQ: docs/consume.md); an autoAck pop's are
// consumed (at most once).
//
// fasthttp says when it is done with an answer by closing its body stream:
// Response.writeBodyStream calls Close after writing it, whether the write
// succeeded or not, and Response.Reset (a response dropped unwritten: the
// connection failed before, the server shut down) calls it through
// ResetBody (fasthttp v1.78, http.go closeBodyStream;
// TestFasthttpClosesAnswerStream). answerStream.Close gives the answer's
// bytes back once however often it is called.
//
// Answers up to streamAnswerBytes (a pop of 100 messages of 256 bytes is
// about 60 kB) are written as before, from the response's own buffer in
// the same writes, and are not counted: they leave for the socket's buffer
// at once even when the client reads nothing, and each connection holds
// at most one (QUEEN_MAX_CONNS bounds the connections, as it bounds their
// head and write buffers).
const (
	// DefaultWriteStallTimeout is QUEEN_WRITE_STALL_TIMEOUT_MS' default.
	DefaultWriteStallTimeout = 10 * time.Second
	// DefaultPendingAnswerPops is QUEEN_MAX_PENDING_ANSWER_BYTES' default
	// in pops of QUEEN_MAX_POP_BYTES: four full answers (64 MiB).
	DefaultPendingAnswerPops = 4
	// streamAnswerBytes is the largest pop answer written from the
	// response's buffer; a longer one is streamed and counted.
	streamAnswerBytes = 64 << 10
	// popFloorBytes is the least byte bound a pop gets while the budget
	// lets it take more than one message (PopRequest.MaxBytes, stored
	// bytes).
	popFloorBytes = 64 << 10
	// answerChunkBytes is what a streamed answer writes under one
	// stall deadline.
	answerChunkBytes = 256 << 10
)

// answerBudget is the server's budget of pop answer bytes in memory (see
// above): one per broker. The zero value is not usable: newAnswerBudget.
// It takes no lock: a pop on the common path (nothing pending) costs one
// atomic load.
type answerBudget struct {
	limit  int64 // QUEEN_MAX_PENDING_ANSWER_BYTES
	maxPop int64 // QUEEN_MAX_POP_BYTES

	// pending is the bytes of streamed answers built and not yet given
	// back (answerStream.Close).
	pending atomic.Int64
	// ones counts the grants of one message.
	ones atomic.Uint64
}

func newAnswerBudget(limit, maxPop int64) *answerBudget {
	return &answerBudget{limit: limit, maxPop: maxPop}
}

// popGrant is what the budget lets one pop attempt take.
type popGrant struct {
	// maxBytes is the attempt's byte bound (PopRequest.MaxBytes).
	maxBytes int64
	// one: the attempt delivers one message (PopRequest.Batch 1).
	one bool
}

// grant hands out the byte bound of a pop about to run, from the answers
// pending: QUEEN_MAX_POP_BYTES while they leave that much of the budget,
// else the largest power of two they leave, not below popFloorBytes; with
// less than the floor left beside them, the floor and one message. It
// holds nothing back: what bounds the answers of pops granted together is
// admit (Server.fitAnswer).
func (b *answerBudget) grant() popGrant {
	pending := b.pending.Load()
	left := b.limit - pending
	if left >= b.maxPop {
		return popGrant{maxBytes: b.maxPop}
	}
	floor := min(popFloorBytes, b.maxPop)
	if left < floor {
		if pending > 0 {
			b.ones.Add(1)
			return popGrant{maxBytes: floor, one: true}
		}
		// A budget under the floor, nothing pending.
		return popGrant{maxBytes: floor}
	}
	// left >= floor, and floor is popFloorBytes (a power of two) here, as
	// maxPop > left.
	return popGrant{maxBytes: int64(1) << (bits.Len64(uint64(left)) - 1)}
}

// admit counts an answer of n bytes as pending when the budget can take
// it: when the answers pending and n fit in the limit, or when none is
// pending (an answer alone is always taken). When it cannot, admit counts
// nothing and returns false with the room left for answers (limit minus
// pending, at least 0).
func (b *answerBudget) admit(n int64) (ok bool, room int64) {
	for {
		p := b.pending.Load()
		if p > 0 && p+n > b.limit {
			return false, max(b.limit-p, 0)
		}
		if b.pending.CompareAndSwap(p, p+n) {
			return true, 0
		}
	}
}

// add counts d more bytes as pending, whether the budget can take them or
// not: an answer taken anyway, or what an answer counted at its estimated
// length was built longer (or shorter, d < 0) by.
func (b *answerBudget) add(d int64) { b.pending.Add(d) }

// release gives back n bytes counted by admit or add.
func (b *answerBudget) release(n int64) { b.pending.Add(-n) }

// usage reports the bytes of answers waiting to be written.
func (b *answerBudget) usage() int64 { return b.pending.Load() }

// answerStream is a streamed pop answer: fasthttp writes it through
// WriteTo (BodyWriterTo) and closes it when done (Close gives its bytes
// back to the budget).
type answerStream struct {
	b      []byte
	off    int
	budget *answerBudget
	n      int64 // what add counted
	// conn is the connection the answer is written to (nil outside a
	// server); stall and total are its deadlines (Config.WriteStallTimeout
	// per chunk, Config.WriteTimeout for the whole answer).
	conn         net.Conn
	stall, total time.Duration
	closed       atomic.Bool
}

// SupportsBodyWriteTo tells fasthttp to write the answer with WriteTo.
func (a *answerStream) SupportsBodyWriteTo() bool { return true }

// WriteTo writes what is left of the answer to w in chunks of
// answerChunkBytes, giving the connection's write a deadline of the stall
// timeout for each, never past the total from the first chunk.
func (a *answerStream) WriteTo(w io.Writer) (int64, error) {
	var end time.Time
	if a.conn != nil {
		end = time.Now().Add(a.total)
	}
	var n int64
	for a.off < len(a.b) {
		if a.conn != nil {
			d := time.Now().Add(a.stall)
			if d.After(end) {
				d = end
			}
			if err := a.conn.SetWriteDeadline(d); err != nil {
				return n, err
			}
		}
		m, err := w.Write(a.b[a.off:min(a.off+answerChunkBytes, len(a.b))])
		a.off += m
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read copies what is left of the answer (fasthttp reads a body stream
// this way only where it does not use WriteTo).
func (a *answerStream) Read(p []byte) (int, error) {
	if a.off >= len(a.b) {
		return 0, io.EOF
	}
	m := copy(p, a.b[a.off:])
	a.off += m
	return m, nil
}

// Close gives the answer's bytes back to the budget, the first time it is
// called, and lets go of them.
func (a *answerStream) Close() error {
	if a.closed.CompareAndSwap(false, true) {
		a.budget.release(a.n)
		a.b = nil
	}
	return nil
}
