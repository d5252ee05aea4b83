package ingest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/wal"
)

// Status is a per-item push verdict (docs/push.md, "Verdicts").
type Status string

const (
	// StatusQueued: stored and committed in PostgreSQL.
	StatusQueued Status = "queued"
	// StatusDuplicate: the partition already holds this transactionId inside
	// the dedup window; nothing was written.
	StatusDuplicate Status = "duplicate"
	// StatusBuffered: fsynced in the WAL, not yet in PostgreSQL.
	StatusBuffered Status = "buffered"
	// StatusFailed: the WAL append failed; nothing was stored.
	StatusFailed Status = "failed"
)

// DefaultVerdictTimeout bounds how long a push waits for the projector's
// verdict before answering "buffered": 5 seconds.
const DefaultVerdictTimeout = 5 * time.Second

// ErrMaintenanceWrite is returned by Push when the WAL append failed while
// maintenance mode is on: the one case where the whole push answers 500
// (docs/push.md, "Answers").
var ErrMaintenanceWrite = errors.New("ingest: WAL write failed in maintenance mode")

// Verdict is the projector's outcome for one stored or deduplicated item.
type Verdict struct {
	Duplicate bool
	// MessageID is the stored message's id, or for a duplicate the
	// original's id (uuid.Nil when the original's segment is gone).
	MessageID uuid.UUID
}

// Result is one element of the push response array (docs/push.md,
// "Verdicts": every verdict has the same keys).
type Result struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        Status `json:"status"`
	// Error says why a failed item was not stored (FailedReason); empty,
	// and left out of the JSON, for every other status.
	Error string `json:"error,omitempty"`
}

// FailedReason is the error text of a failed verdict for the WAL append's
// err: the byte cap (wal.ErrFull) named by its setting, a full disk, an
// I/O error or a read-only file system by what it is, anything else as
// "WAL write failed". The error itself, with the broker's paths, is not
// sent to clients: the WAL logs it ("wal: write failed").
func FailedReason(err error) string {
	switch {
	case errors.Is(err, wal.ErrFull):
		return "WAL full: QUEEN_WAL_MAX_BYTES reached while records wait for PostgreSQL"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "WAL write failed: no space left on device"
	case errors.Is(err, syscall.EIO):
		return "WAL write failed: I/O error"
	case errors.Is(err, syscall.EROFS):
		return "WAL write failed: read-only file system"
	default:
		return "WAL write failed"
	}
}

// setFailed marks every result failed, with err's FailedReason.
func setFailed(res []Result, err error) []Result {
	reason := FailedReason(err)
	for i := range res {
		res[i].Status, res[i].Error = StatusFailed, reason
	}
	return res
}

// Gate tells the pipeline whether waiting for a verdict is worthwhile.
type Gate interface {
	// Accepting is false while the projector is paused (maintenance mode)
	// or PostgreSQL is away, or while a record it takes seconds to store
	// stands in front (projector.Projector.Accepting): no verdict would
	// come soon, so the push answers buffered at once. A long backlog of
	// ordinary pushes is not a reason: the push waits for
	// its own verdict (at most VerdictTimeout), which slows producers to the
	// projector's pace instead of letting the WAL grow without bound.
	// It is called from the WAL writer goroutine once per durable record
	// (waiter.written), so it must be cheap and must not block.
	Accepting() bool
}

// Pipeline is the push path. All fields are required except VerdictTimeout
// (default DefaultVerdictTimeout), Now (default time.Now) and MaxItems.
type Pipeline struct {
	WAL      *wal.Log
	Registry *Registry
	Gate     Gate
	// Maintenance reports whether push maintenance mode is on. Like
	// Gate.Accepting it is also called from the WAL writer goroutine and
	// must not block.
	Maintenance    func() bool
	VerdictTimeout time.Duration
	Now            func() time.Time
	// MaxItems is the most items one push may carry (0 = no limit); a
	// longer push is a *ValidationError.
	MaxItems int
	// MaxPartitions is the most distinct partitions one push may name (0 =
	// no limit; CheckPartitions); more is a *ValidationError.
	MaxPartitions int
	// ObserveStages, when set, is called once per push answered with its
	// verdicts (queued or duplicate items; not for a push answered
	// buffered or failed), from the push's goroutine, with the time its
	// two stages took: wal, from Push's start (the body handed in) until
	// the WAL writer reported the record fsynced (parse, encode, the wait
	// for a group commit and its fsync); projection, from then until the
	// verdicts reached the push (the wait for the projector, the
	// transaction that stored the record, and the hand-over). The end of
	// the wal stage is when the WAL writer reported the fsync to this push
	// (it reports a group commit's records one after another, after the
	// durable index moved), so it can trail the fsync by that loop. A push
	// whose verdicts reached it before that report (the projector was
	// faster than the writer's loop) is not observed: its split is not
	// known. Must not block.
	ObserveStages func(wal, projection time.Duration)
	// Prepare, when set, is called once per valid push that will wait for
	// its verdict (the gate open, push maintenance off), on the push's
	// goroutine, after validation and before the WAL append, with the
	// push's items (read only; their strings may alias the body, so it
	// must copy what it keeps). The broker creates there the queues and
	// partitions the projector's cache does not know
	// (pg.Store.PreparePartitions), so that a push naming many new ones
	// creates them on its own time instead of in the projector's
	// serialized path. It is best effort: it must return within a short
	// bounded time, and the push goes on whatever it did.
	Prepare func(items []Item)
}

// Push validates body and runs it through the WAL and the projector.
// producerSub is the validated JWT sub, or nil without auth. When ctx
// ends before the verdict came, the push is answered buffered once its
// record's write has been reported (failed if the write failed); a caller
// whose waits end by other means passes a ctx that cannot end
// (context.WithoutCancel) and calls Registry.Drain instead.
//
// Returns one Result per item in body order; a *ValidationError for a
// client mistake (nothing written); ErrMaintenanceWrite when the WAL append
// failed in maintenance mode (nothing written). A WAL failure outside
// maintenance mode is not an error: every item is answered "failed".
//
// body must not be modified while Push runs (the WAL writer copies the
// payloads from it); nothing Push returns aliases it: the caller may
// reuse body once Push has returned.
func (p *Pipeline) Push(ctx context.Context, body []byte, producerSub *string) ([]Result, error) {
	var start time.Time // only for ObserveStages
	if p.ObserveStages != nil {
		start = time.Now()
	}
	sc := getScratch()
	defer putScratch(sc)
	parsed, err := parseBodyInto(sc.parsed, body, p.MaxItems)
	if err != nil {
		return nil, err
	}
	sc.parsed = parsed
	if len(parsed) == 0 {
		return []Result{}, nil
	}
	if err := CheckPartitions(parsed, p.MaxPartitions); err != nil {
		return nil, err
	}
	items, err := newItemsInto(sc.items, parsed, producerSub)
	if err != nil {
		return nil, err
	}
	sc.items = items
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	rec := Record{AcceptedAt: now().UnixMicro(), Items: items}
	res := make([]Result, len(items))
	// The message id's text is the transactionId's where the broker minted
	// it; for the items with a client transactionId it is written into one
	// builder and sliced (one allocation per push).
	var text strings.Builder
	for i := range items {
		if parsed[i].TransactionID != "" {
			if text.Cap() == 0 {
				text.Grow(36 * (len(items) - i))
			}
			var t [36]byte
			encodeUUID(t[:], items[i].MessageID)
			text.Write(t[:])
		}
	}
	ids := text.String()
	for i := range items {
		it := &items[i]
		mid := it.TransactionID
		if parsed[i].TransactionID != "" {
			mid, ids = ids[:36], ids[36:]
		}
		res[i] = Result{Index: i, MessageID: mid, TransactionID: it.TransactionID, QueueName: it.Queue}
	}
	// The record is laid out without its payloads (encodeRecordGathered):
	// meta holds the envelope's room and every other byte, and vec the
	// pieces in order, each payload a slice of the body. The WAL writer
	// copies the pieces straight into its tail segment, so body → tail
	// segment is the payload's only copy on its way to the WAL file. vec,
	// meta and the body are the WAL's until it has written them: Push
	// returns only after AppendGathered returned, or after the waiter's
	// value (verdicts, which need the record durable, or the writer's
	// report), or after cancel found the record durable. Then meta is
	// reused by a later push (recordBufs), vec with the scratch, and the
	// body by the caller.
	bp := getRecordBuf()
	meta, vec := encodeRecordGathered(append((*bp)[:0], make([]byte, wal.HeaderSize)...), sc.vec, &rec)
	sc.vec = vec
	defer putRecordBuf(bp, meta)

	if p.Maintenance() {
		if _, err := p.WAL.AppendGathered(vec, nil); err != nil {
			return nil, errors.Join(ErrMaintenanceWrite, err)
		}
		return setAll(res, StatusBuffered), nil
	}
	if p.Prepare != nil && p.Gate.Accepting() {
		p.Prepare(items)
	}
	timeout := p.VerdictTimeout
	if timeout <= 0 {
		timeout = DefaultVerdictTimeout
	}
	// One sleep per push: the WAL writer reports the group commit to the
	// waiter (waiter.written: failed, buffered when the gate is closed, or
	// the verdict timeout started from durability), and the push wakes only
	// for its value: the verdicts, nil (buffered) or failed. Every value
	// comes after the record's fsync or its failure (Registry).
	w := p.Registry.newWaiter()
	w.pipe, w.timeout = p, timeout
	w.refs.Add(1) // the WAL writer's, dropped by written
	if err := p.WAL.AppendGatheredAsync(vec, w.assign, w.onWritten); err != nil {
		w.refs.Add(-1) // refused at once: written will not run
		w.release()
		return setFailed(res, err), nil
	}
	// A context that cannot end (the HTTP server's, which drains the
	// Registry at shutdown instead) is waited on with a plain receive: a
	// select would also queue and dequeue the push on ctx's done channel,
	// one channel shared by every push of the server.
	var verdicts []Verdict
	if done := ctx.Done(); done == nil {
		verdicts = <-w.ch
	} else {
		select {
		case verdicts = <-w.ch:
		case <-done:
			if w.cancel() {
				verdicts = <-w.ch
			}
		}
	}
	var received time.Time
	if p.ObserveStages != nil {
		received = time.Now()
	}
	failed, writeErr := w.failed, w.writeErr
	durableAt := w.durableAt.Load()
	w.done()
	if failed {
		return setFailed(res, writeErr), nil
	}
	if len(verdicts) != len(res) {
		return setAll(res, StatusBuffered), nil
	}
	if p.ObserveStages != nil && durableAt != 0 && durableAt <= monoSince(received) {
		p.ObserveStages(time.Duration(durableAt-monoSince(start)), time.Duration(monoSince(received)-durableAt))
	}
	for i, v := range verdicts {
		if v.Duplicate {
			res[i].Status = StatusDuplicate
			res[i].MessageID = v.MessageID.String()
		} else {
			res[i].Status = StatusQueued
		}
	}
	return res, nil
}

// accepting reports whether a durable record's push should wait for its
// verdict: the gate is open and push maintenance mode is off (else it is
// answered buffered at once). Called from the WAL writer (waiter.written).
func (p *Pipeline) accepting() bool { return p.Gate.Accepting() && !p.Maintenance() }

// pushScratch is the parsed items, minted items and record pieces of one
// push, reused by later pushes (scratches): nothing of them outlives Push
// (the results hold strings, and the WAL has copied the record's pieces
// into its tail segment before Push returns).
type pushScratch struct {
	parsed []ParsedItem
	items  []Item
	// vec is the push record's pieces (encodeRecordGathered).
	vec [][]byte
}

var scratches sync.Pool

// keepScratchItems is the most items a kept scratch holds.
const keepScratchItems = 4096

func getScratch() *pushScratch {
	if sc, ok := scratches.Get().(*pushScratch); ok {
		return sc
	}
	return new(pushScratch)
}

// putScratch clears sc (it must not keep bodies or names alive) and keeps
// it unless it grew past keepScratchItems.
func putScratch(sc *pushScratch) {
	if cap(sc.parsed) > keepScratchItems || cap(sc.items) > keepScratchItems || cap(sc.vec) > 3*keepScratchItems {
		return
	}
	clear(sc.parsed[:cap(sc.parsed)])
	clear(sc.items[:cap(sc.items)])
	clear(sc.vec[:cap(sc.vec)])
	sc.parsed, sc.items, sc.vec = sc.parsed[:0], sc.items[:0], sc.vec[:0]
	scratches.Put(sc)
}

// recordBufs holds the buffers of push records without their payloads
// (about 30 to 60 bytes an item, more with long names; the payloads stay
// in the body) for reuse; keepRecordBuf is the largest one kept (a huge
// push's buffer goes to the collector): 1 MiB, some 20,000 items' worth,
// so that every ordinary push's buffer is reused rather than made (and
// zeroed) afresh. What the pool keeps is buffers that concurrent pushes
// had in use anyway, and it is emptied over two garbage collections when
// pushes stop.
var recordBufs sync.Pool

const keepRecordBuf = 1 << 20

// getRecordBuf returns an empty pooled record buffer (encodeRecordGathered
// grows it to the record's size).
func getRecordBuf() *[]byte {
	if bp, ok := recordBufs.Get().(*[]byte); ok {
		return bp
	}
	return new([]byte)
}

func putRecordBuf(bp *[]byte, used []byte) {
	if cap(used) > keepRecordBuf {
		return
	}
	*bp = used[:0]
	recordBufs.Put(bp)
}
func setAll(res []Result, s Status) []Result {
	for i := range res {
		res[i].Status = s
	}
	return res
}
