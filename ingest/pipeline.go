package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/wal"
)

// Status is a per-item push verdict (spec/producing.md, "The status values").
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
// (spec/producing.md, "The status values").
var ErrMaintenanceWrite = errors.New("ingest: WAL write failed in maintenance mode")

// Verdict is the projector's outcome for one stored or deduplicated item.
type Verdict struct {
	Duplicate bool
	// MessageID is the stored message's id, or for a duplicate the
	// original's id (uuid.Nil when the original's segment is gone).
	MessageID uuid.UUID
}

// Result is one element of the push response array (spec/producing.md,
// "The response").
type Result struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        Status `json:"status"`
}

// Registry connects pushes waiting for a verdict with the projector that
// delivers it, keyed by WAL index. It is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	waiters map[uint64]chan []Verdict
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{waiters: make(map[uint64]chan []Verdict)} }

func (r *Registry) register(index uint64) chan []Verdict {
	ch := make(chan []Verdict, 1)
	r.mu.Lock()
	r.waiters[index] = ch
	r.mu.Unlock()
	return ch
}

// release drops the waiter for index if it is still ch: after a failed
// write the index is reused by the next record, whose waiter must stay.
func (r *Registry) release(index uint64, ch chan []Verdict) {
	r.mu.Lock()
	if r.waiters[index] == ch {
		delete(r.waiters, index)
	}
	r.mu.Unlock()
}

// Deliver hands the verdicts of the WAL record at index (one per item, in
// item order) to its waiting push, if any. A nil slice means "not stored
// yet" and the push answers buffered.
func (r *Registry) Deliver(index uint64, v []Verdict) {
	r.mu.Lock()
	ch, ok := r.waiters[index]
	delete(r.waiters, index)
	r.mu.Unlock()
	if ok {
		ch <- v
	}
}

// Waiting reports whether a push still waits for the verdicts of the WAL
// record at index (the projector keeps a large record's verdicts piece by
// piece only while someone will read them).
func (r *Registry) Waiting(index uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiters[index]
	return ok
}

// FailAll answers every waiting push "buffered" (the projector calls it
// when PostgreSQL fails or it pauses).
func (r *Registry) FailAll() {
	r.mu.Lock()
	w := r.waiters
	r.waiters = make(map[uint64]chan []Verdict)
	r.mu.Unlock()
	for _, ch := range w {
		ch <- nil
	}
}

// Gate tells the pipeline whether waiting for a verdict is worthwhile.
type Gate interface {
	// Accepting is false while the projector is paused (maintenance mode)
	// or PostgreSQL is away: no verdict would come, so the push answers
	// buffered at once. A long backlog is not a reason: the push waits for
	// its own verdict (at most VerdictTimeout), which slows producers to the
	// projector's pace instead of letting the WAL grow without bound.
	Accepting() bool
}

// Pipeline is the push path. All fields are required except VerdictTimeout
// (default DefaultVerdictTimeout), Now (default time.Now) and MaxItems.
type Pipeline struct {
	WAL      *wal.Log
	Registry *Registry
	Gate     Gate
	// Maintenance reports whether push maintenance mode is on.
	Maintenance    func() bool
	VerdictTimeout time.Duration
	Now            func() time.Time
	// MaxItems is the most items one push may carry (0 = no limit); a
	// longer push is a *ValidationError.
	MaxItems int
}

// Push validates body and runs it through the WAL and the projector.
// producerSub is the validated JWT sub, or nil without auth.
//
// Returns one Result per item in body order; a *ValidationError for a
// client mistake (nothing written); ErrMaintenanceWrite when the WAL append
// failed in maintenance mode (nothing written). A WAL failure outside
// maintenance mode is not an error: every item is answered "failed".
func (p *Pipeline) Push(ctx context.Context, body []byte, producerSub *string) ([]Result, error) {
	parsed, err := ParseBodyLimit(body, p.MaxItems)
	if err != nil {
		return nil, err
	}
	if len(parsed) == 0 {
		return []Result{}, nil
	}
	items, err := NewItems(parsed, producerSub)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	rec := Record{AcceptedAt: now().UnixMicro(), Items: items}
	res := make([]Result, len(items))
	for i := range items {
		it := &items[i]
		mid := it.TransactionID // the minted id's text when the body gave no transactionId
		if parsed[i].TransactionID != "" {
			mid = it.MessageID.String()
		}
		res[i] = Result{Index: i, MessageID: mid, TransactionID: it.TransactionID, QueueName: it.Queue}
	}
	// The record is encoded once, from the body's payload slices, behind
	// room for the WAL envelope: body → this buffer is the payload's only
	// copy on the way to the WAL.
	buf := EncodeRecord(make([]byte, wal.HeaderSize, wal.HeaderSize+rec.EncodedLen()), &rec)

	if p.Maintenance() {
		if _, err := p.WAL.AppendEnveloped(buf, nil); err != nil {
			return nil, errors.Join(ErrMaintenanceWrite, err)
		}
		return setAll(res, StatusBuffered), nil
	}
	var ch chan []Verdict
	var assigned uint64
	index, err := p.WAL.AppendEnveloped(buf, func(i uint64) { assigned, ch = i, p.Registry.register(i) })
	if err != nil {
		if ch != nil {
			p.Registry.release(assigned, ch)
		}
		return setAll(res, StatusFailed), nil
	}
	if !p.Gate.Accepting() || p.Maintenance() {
		p.Registry.release(index, ch)
		return setAll(res, StatusBuffered), nil
	}
	timeout := p.VerdictTimeout
	if timeout <= 0 {
		timeout = DefaultVerdictTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var verdicts []Verdict
	select {
	case verdicts = <-ch:
	case <-t.C:
		p.Registry.release(index, ch)
	case <-ctx.Done():
		p.Registry.release(index, ch)
	}
	if len(verdicts) != len(res) {
		return setAll(res, StatusBuffered), nil
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

func setAll(res []Result, s Status) []Result {
	for i := range res {
		res[i].Status = s
	}
	return res
}
