// Package projector is the single loop per broker that moves WAL records
// into PostgreSQL: it reads from its cursor, commits one transaction per
// batch (data and checkpoint together, see pg.Store.Project), delivers the
// verdicts to waiting pushes, backs off exponentially while PostgreSQL is
// away, pauses for maintenance mode, and truncates projected WAL segments
// after a retention.
//
// A batch is bounded in records, items and bytes (Config). A record too
// large for one batch (a push of a million items) is projected in pieces,
// each its own transaction whose checkpoint also counts the record's items
// committed so far (pg.Checkpoint.PartialItems), so no record can make a
// transaction that never finishes, and a crash between pieces resumes
// inside the record without repeating or losing an item.
//
// Replay is resuming the cursor: after any failure the cursor is re-read
// from the checkpoint in PostgreSQL, so a COMMIT whose answer never came is
// neither lost nor applied twice (DESIGN.md §1).
package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/startstop"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/wal"
)

// Defaults applied where a Config field is zero.
const (
	DefaultMaxBatchEntries = 1000
	DefaultMaxBatchItems   = 10000
	// DefaultMaxBatchBytes caps the WAL payload bytes of one transaction:
	// 4 MiB. A batch is held about three times over while it is sent (the
	// decoded items, the segment bodies, pgx's encoded parameters), so
	// this cap, not the push rate, bounds the projector's memory.
	DefaultMaxBatchBytes    = 4 << 20
	DefaultTxTimeout        = 10 * time.Second
	DefaultBackoffMin       = 50 * time.Millisecond
	DefaultBackoffMax       = 2 * time.Second
	DefaultWALRetention     = 15 * time.Minute
	DefaultMaintainInterval = 30 * time.Second
	DefaultDedupGrace       = 15 * time.Minute
	// DefaultMaxWaitPieceItems: while a record is projected in pieces
	// (MaxBatchItems) and more than this many of its items are still to
	// go, every push behind it would wait its whole verdict timeout, so
	// pushes are answered "buffered" at once instead.
	DefaultMaxWaitPieceItems = 4 * DefaultMaxBatchItems
	// DefaultMinBatchItems and DefaultMaxBatchWait: a batch of fewer
	// items waits for the WAL group commits in flight, at most this long
	// in all (see Config.MinBatchItems).
	DefaultMinBatchItems = 8
	DefaultMaxBatchWait  = 2 * time.Millisecond
)

// Config of a Projector. BrokerID is required; zero durations and sizes
// take the defaults above.
type Config struct {
	// BrokerID names this broker's checkpoint row.
	BrokerID uuid.UUID
	// MaxBatchEntries caps WAL records per transaction.
	MaxBatchEntries int
	// MaxBatchItems caps push items per transaction (default
	// DefaultMaxBatchItems). A record with more items is projected in
	// pieces of at most this many, one transaction each, the checkpoint
	// recording how many of its items are committed (pg.Checkpoint), so
	// that no push, however many items it holds, makes a transaction that
	// cannot finish in TxTimeout.
	MaxBatchItems int
	// MaxBatchBytes caps WAL payload bytes per transaction: records are
	// taken while they fit, and a record larger than this on its own is
	// cut into pieces of about this many payload bytes (one item is never
	// cut: a single item as large as the body limit is projected alone).
	MaxBatchBytes int
	// TxTimeout bounds one projection transaction.
	TxTimeout time.Duration
	// BackoffMin and BackoffMax bound the exponential retry delay while
	// PostgreSQL fails.
	BackoffMin, BackoffMax time.Duration
	// WALRetention keeps projected WAL segments this long (disaster
	// recovery, DESIGN.md §5). Negative means truncate as soon as projected.
	WALRetention time.Duration
	// MaintainInterval is how often WAL truncation and the dedup sweep run.
	MaintainInterval time.Duration
	// DedupGrace keeps dedup entries this long past their window.
	DedupGrace time.Duration
	// MaxWaitPieceItems: see DefaultMaxWaitPieceItems.
	MaxWaitPieceItems int
	// MinBatchItems: a batch that took every durable record and holds
	// fewer items than this, while the WAL is fsyncing a group commit
	// (wal.Log.InFlight), waits for that fsync and takes those records
	// too, and again while it is still smaller and a group commit is in
	// flight, MaxBatchWait in all. A transaction costs PostgreSQL about
	// as much as 80 small items (measured with 64 producers of one item
	// each: 0.99 ms of PostgreSQL CPU per batch of 21 items), so a batch
	// of a few items pays it many times over: with 8 producers of one
	// item each, batches grew from 3 to about 8 items and PostgreSQL's
	// CPU per message fell by about 40%. When no group commit is in
	// flight (an idle broker, a lone push) nothing waits. The default is
	// small on purpose: with 64 producers of one item each (batches of
	// about 21) a threshold of 64 cut PostgreSQL's CPU per message by
	// 10-25% on a loaded machine but, on a quiet one, lowered msg/s by
	// about a third and doubled p99 (docs/decisions.md). Default
	// DefaultMinBatchItems; negative: never wait.
	MinBatchItems int
	// MaxBatchWait bounds MinBatchItems' wait (default
	// DefaultMaxBatchWait): a slow fsync does not hold up the records
	// already durable.
	MaxBatchWait time.Duration
	// OnCommit, when set, is called after each committed batch with the
	// names of the queues it stored messages in (long-poll wake-ups).
	OnCommit func(queues []string)
	// ObserveBatch, when set, is called after each projection attempt with
	// its item count, duration and error (nil when committed).
	ObserveBatch func(items int, d time.Duration, err error)
	// Maintenance, when set, is the owner of push maintenance mode: while
	// it reports on, projection holds (see MaintenanceChanged). Nil: never.
	Maintenance interface{ PushEnabled() bool }
	Logger      *slog.Logger
}

// Projector is the WAL → PostgreSQL loop. Start it once; Stop is
// idempotent.
type Projector struct {
	cfg   Config
	wal   *wal.Log
	store *pg.Store
	reg   *ingest.Registry
	log   *slog.Logger

	// unhealthy is set by a failed PostgreSQL step and cleared by a
	// successful one; a projector that has not tried yet is not unhealthy.
	unhealthy  atomic.Bool
	checkpoint atomic.Uint64 // last committed WAL index
	piecesLeft atomic.Int64  // items still to project of the record in pieces (0: none)
	wake       chan struct{}
	cur        *wal.Cursor // owned by the loop
	// cp is the checkpoint as last read or committed, and open the record
	// after it while it is projected in pieces (nil otherwise); both are
	// owned by the loop.
	cp   pg.Checkpoint
	open *openRecord
	bufs [2]batch // the batch committing and the one prepared beside it
	// prepared is the item count of the batch prepared while another
	// commits (0: none), for tests.
	prepared atomic.Int64

	// loop runs the projection loop (run), maint the maintenance loop
	// (maintainLoop) beside it.
	loop, maint startstop.Loop

	mu      sync.Mutex // guards lastErr
	lastErr error

	outage outageLog // owned by the loop
}

// New returns a stopped projector.
func New(cfg Config, w *wal.Log, store *pg.Store, reg *ingest.Registry) *Projector {
	if cfg.MaxBatchEntries <= 0 {
		cfg.MaxBatchEntries = DefaultMaxBatchEntries
	}
	if cfg.MaxBatchItems <= 0 {
		cfg.MaxBatchItems = DefaultMaxBatchItems
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.TxTimeout <= 0 {
		cfg.TxTimeout = DefaultTxTimeout
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.WALRetention == 0 {
		cfg.WALRetention = DefaultWALRetention
	}
	if cfg.MaintainInterval <= 0 {
		cfg.MaintainInterval = DefaultMaintainInterval
	}
	if cfg.DedupGrace <= 0 {
		cfg.DedupGrace = DefaultDedupGrace
	}
	if cfg.MaxWaitPieceItems <= 0 {
		cfg.MaxWaitPieceItems = DefaultMaxWaitPieceItems
	}
	if cfg.MinBatchItems == 0 {
		cfg.MinBatchItems = DefaultMinBatchItems
	}
	if cfg.MaxBatchWait <= 0 {
		cfg.MaxBatchWait = DefaultMaxBatchWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Projector{cfg: cfg, wal: w, store: store, reg: reg, log: cfg.Logger, wake: make(chan struct{}, 1),
		cur: w.NewCursor(1), outage: outageLog{log: cfg.Logger, now: time.Now}}
}

// Start launches the projection and maintenance loops. It returns
// startstop.ErrStarted if started before.
func (p *Projector) Start(ctx context.Context) error {
	if err := p.loop.Start(ctx, p.run); err != nil {
		return err
	}
	return p.maint.Start(ctx, p.maintainLoop)
}

// Stop ends the loop after the transaction in flight and waits for it,
// then the maintenance loop. Idempotent.
func (p *Projector) Stop() {
	p.loop.Stop()
	p.maint.Stop()
}

// MaintenanceChanged is called after Config.Maintenance changed: when on,
// projection stops after the transaction in flight and waiting pushes are
// answered buffered; when off, it continues from the cursor.
func (p *Projector) MaintenanceChanged() {
	if p.Paused() {
		p.reg.FailAll()
	}
	p.poke()
}

// Paused reports whether maintenance mode holds projection.
func (p *Projector) Paused() bool { return p.cfg.Maintenance != nil && p.cfg.Maintenance.PushEnabled() }

// Healthy reports whether the last PostgreSQL round-trip of the loop
// succeeded (true before the first one).
func (p *Projector) Healthy() bool { return !p.unhealthy.Load() }

// Accepting implements ingest.Gate: pushes wait for their verdict while
// the projector runs and PostgreSQL answers, however long the backlog (the
// wait is the producers' backpressure: docs/decisions.md, "Verdict wait
// and backpressure"), except while a large record projected in pieces
// stands in front of them with more than MaxWaitPieceItems items to go:
// their verdicts would come only after their verdict timeout, so they are
// answered buffered.
func (p *Projector) Accepting() bool {
	return !p.Paused() && !p.unhealthy.Load() && p.piecesLeft.Load() <= int64(p.cfg.MaxWaitPieceItems)
}

// Backlog is the number of durable WAL records not yet committed to
// PostgreSQL.
func (p *Projector) Backlog() uint64 {
	d, c := p.wal.DurableIndex(), p.checkpoint.Load()
	if d <= c {
		return 0
	}
	return d - c
}

// Checkpoint is the last WAL index known committed.
func (p *Projector) Checkpoint() uint64 { return p.checkpoint.Load() }

// LastError is the last projection error (nil after a success).
func (p *Projector) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Stopped returns the error that keeps projection from advancing until an
// operator acts, or nil: ErrWALDiverged (docs/operations.md, "WAL and database
// disagree") or a WAL record that does not verify (wal.ErrCorruptRecord,
// wal.ErrUnknownVersion: docs/operations.md, "A corrupt WAL record"). A PostgreSQL
// failure is not one of them: the projector rides it out by itself.
func (p *Projector) Stopped() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if stopping(p.lastErr) {
		return p.lastErr
	}
	return nil
}

// stopping reports whether err is one that Stopped returns.
func stopping(err error) bool {
	return errors.Is(err, ErrWALDiverged) || errors.Is(err, wal.ErrCorruptRecord) || errors.Is(err, wal.ErrUnknownVersion)
}

func (p *Projector) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Projector) run(ctx context.Context) {
	backoff := p.cfg.BackoffMin
	known := false // cursor is valid only after reading the checkpoint
	idle := time.NewTimer(time.Second)
	defer idle.Stop()
	fail := func(err error) {
		p.unhealthy.Store(true)
		p.reg.FailAll()
		known = false
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		if errors.Is(err, ErrWALDiverged) {
			p.outage.stopped("projector: stopped; resolve it as docs/operations.md says under \"WAL and database disagree\"", err)
		} else if stopping(err) {
			p.outage.stopped("projector: stopped at a WAL record that does not verify; it is never skipped by itself: see docs/operations.md, \"A corrupt WAL record\", and `queen wal status`", err)
		} else {
			p.outage.failed(err, backoff, p.Backlog())
		}
		sleep(ctx, backoff, p.wake)
		backoff = min(backoff*2, p.cfg.BackoffMax)
	}
	for ctx.Err() == nil {
		if p.Paused() {
			p.reg.FailAll()
			select {
			case <-p.wake:
			case <-ctx.Done():
			}
			continue
		}
		if !known {
			if err := p.loadCursor(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				fail(err)
				continue
			}
			known = true
			p.outage.succeeded(p.checkpoint.Load(), p.Backlog())
		}
		cursor := p.checkpoint.Load() + 1 // the next WAL index to project
		if cursor > p.wal.DurableIndex() {
			idle.Reset(time.Second)
			select {
			case <-p.wal.Notify():
			case <-p.wake:
			case <-idle.C:
				// Idle: a round-trip keeps Healthy true to the facts.
				if err := p.ping(ctx); err != nil {
					fail(err)
				} else {
					p.unhealthy.Store(false)
					p.outage.succeeded(p.checkpoint.Load(), p.Backlog())
				}
			case <-ctx.Done():
			}
			continue
		}
		if err := p.projectOnce(ctx, cursor); err != nil {
			if ctx.Err() != nil {
				return
			}
			fail(err)
			continue
		}
		p.outage.succeeded(p.checkpoint.Load(), p.Backlog())
		backoff = p.cfg.BackoffMin
	}
}

func (p *Projector) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	return p.store.Ping(ctx)
}

// ErrWALDiverged means the checkpoint PostgreSQL holds for this broker was
// not written from this WAL directory: the WAL ends before the checkpoint,
// or the record at the checkpoint's index is another record. Projecting
// from there would skip or repeat records, and truncating by that
// checkpoint would delete unprojected ones, so the projector does neither:
// it stays stopped (the broker unhealthy, pushes kept in the WAL and
// answered buffered) until an operator resolves it (docs/operations.md, "WAL and
// database disagree").
var ErrWALDiverged = errors.New("projector: the WAL directory does not match this broker's checkpoint in PostgreSQL")

// checkWAL verifies that the WAL holds the record the checkpoint names.
func (p *Projector) checkWAL(cp pg.Checkpoint) error {
	if last := p.wal.DurableIndex(); cp.Index > last {
		return fmt.Errorf("%w: checkpoint at WAL index %d, but this WAL ends at %d", ErrWALDiverged, cp.Index, last)
	}
	if !cp.HasCRC || cp.Index < p.wal.FirstIndex() {
		return nil // nothing to compare: an old checkpoint row, or the record is truncated
	}
	payload, err := p.wal.Read(cp.Index)
	if err != nil {
		return fmt.Errorf("projector: read WAL record %d at the checkpoint: %w", cp.Index, err)
	}
	if got := wal.PayloadCRC(payload); got != cp.RecordCRC {
		return fmt.Errorf("%w: WAL record %d has CRC-32C %08x, the checkpoint names %08x", ErrWALDiverged, cp.Index, got, cp.RecordCRC)
	}
	return nil
}

// loadCursor applies the schema if needed, checks that the checkpoint
// stored in PostgreSQL was written from this WAL (checkWAL) and sets the
// cursor from it.
func (p *Projector) loadCursor(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	if err := p.store.EnsureSchema(ctx); err != nil {
		return err
	}
	cp, ok, err := p.store.Checkpoint(ctx, p.cfg.BrokerID)
	if err != nil {
		return err
	}
	if ok {
		if err := p.checkWAL(cp); err != nil {
			return err
		}
	}
	next := cp.Index + 1
	if !ok {
		next = 1
	}
	if first := p.wal.FirstIndex(); next < first {
		if ok || first > 1 {
			p.log.Error("projector: WAL no longer holds entries after the checkpoint; they are lost to this database",
				"checkpoint", cp.Index, "wal_first", first)
		}
		next = first
	}
	p.warnBehind(cp.Index, next)
	if next != cp.Index+1 {
		cp = pg.Checkpoint{Index: next - 1} // nothing to compare, no partial record to resume
	}
	p.cp, p.open = cp, nil
	p.cur.Seek(next)
	p.checkpoint.Store(next - 1) // next >= 1
	p.unhealthy.Store(false)
	p.log.Debug("projector: cursor loaded", "cursor", next)
	return nil
}

// warnBehind logs, at warn level, that the database's checkpoint dbIndex
// (0 when the row is missing) is below the last WAL index this projector
// saw committed, so the records from next up to that index are projected
// again: the database lost commits it had confirmed (a promoted standby
// that had not received them, or a restored backup). Nothing is lost as
// long as the WAL still holds them (docs/failover.md).
func (p *Projector) warnBehind(dbIndex, next uint64) {
	committed := p.checkpoint.Load()
	if dbIndex >= committed || next > committed {
		return
	}
	k := committed - (next - 1)
	p.log.Warn(fmt.Sprintf("database checkpoint %d is behind the WAL's %d: re-projecting %d records", dbIndex, committed, k),
		"database_checkpoint", dbIndex, "wal_checkpoint", committed, "records", k)
}

// openRecord is a WAL record being projected in pieces: it has more items
// (or payload bytes) than one batch takes.
type openRecord struct {
	index uint64
	crc   uint32
	rr    *ingest.RecordReader // positioned after the committed items
	// verdicts of the committed items, or nil when nobody will read them:
	// some were committed before this projector read the record (after a
	// restart or a failed attempt, its push has been answered buffered
	// already), or its push stopped waiting (its verdict timeout passed).
	verdicts []ingest.Verdict
}

// batchRecord is the part of one WAL record in a batch: items[from:from+n].
type batchRecord struct {
	index    uint64
	crc      uint32
	from, n  int
	complete bool        // the batch holds the record's last item
	open     *openRecord // the record is projected in pieces (nil: whole in this batch)
}

// batch is one transaction's worth of WAL records, being built or being
// committed: its items in WAL order and the records they come from. The
// projector keeps two (Projector.bufs), so that while one commits the
// next one is prepared beside it (projectOnce).
type batch struct {
	items []pg.ProjectItem
	recs  []batchRecord
	rec   ingest.Record // one decode buffer for the batch's whole records
	size  int           // bytes of items: WAL payload of whole records, or an estimate per item of a piece
	// base is the checkpoint the batch starts after: the committed one,
	// or, for a batch prepared while the one before commits, the
	// checkpoint that one commits (the prepared batch is committed only
	// after it, and discarded when it fails).
	base pg.Checkpoint
	// done: no more records may join (the batch ends inside a record, or
	// the next record is left to the next batch); readErr: the WAL read
	// that stopped it (a corrupt record: the next read returns it again).
	done    bool
	readErr error
}

// reset empties b for a batch after base, dropping its references to WAL
// payloads.
func (b *batch) reset(base pg.Checkpoint) {
	clear(b.items[:cap(b.items)])
	clear(b.recs[:cap(b.recs)])
	b.items, b.recs, b.size, b.base, b.done, b.readErr = b.items[:0], b.recs[:0], 0, base, false, nil
}

// checkpoint is the checkpoint b commits: its last complete record, and
// the items of the record after it when b ends inside it.
func (b *batch) checkpoint() pg.Checkpoint {
	cp := b.base
	for _, r := range b.recs {
		if r.complete {
			cp = pg.Checkpoint{Index: r.index, RecordCRC: r.crc, HasCRC: true}
		} else {
			cp.PartialItems, cp.PartialCRC = r.open.rr.Done(), r.crc
		}
	}
	return cp
}

// full reports whether b reached MaxBatchItems or MaxBatchBytes.
func (p *Projector) full(b *batch) bool {
	return len(b.items) >= p.cfg.MaxBatchItems || b.size >= p.cfg.MaxBatchBytes
}

// closed reports whether no record may join b any more.
func (p *Projector) closed(b *batch) bool {
	return b.done || b.readErr != nil || len(b.recs) >= p.cfg.MaxBatchEntries || p.full(b)
}

// take appends rr's remaining items to b, or with cut only up to the
// batch's budget (at least one).
func (p *Projector) take(b *batch, rr *ingest.RecordReader, cut bool) error {
	var it ingest.Item
	for rr.Done() < rr.Len() && (!cut || len(b.items) == 0 || !p.full(b)) {
		if err := rr.Next(&it); err != nil {
			return err
		}
		b.items = append(b.items, it.ProjectItem(rr.AcceptedAt))
		if cut {
			b.size += len(it.Payload) + len(it.TransactionID) + len(it.Queue) + len(it.Partition) + 32
		}
	}
	return nil
}

// add appends the records of entries (read from the cursor) to b while
// they fit; it sets b.done when it stopped before the end of entries or
// inside a record (the batch is full).
func (p *Projector) add(b *batch, entries []wal.Entry) error {
	for _, e := range entries {
		rr, err := ingest.NewRecordReader(e.Payload)
		if err != nil {
			return fmt.Errorf("WAL record %d: %w", e.Index, err)
		}
		skip := 0
		if len(b.items) == 0 && e.Index == b.base.Index+1 && b.base.PartialItems > 0 {
			// Resuming inside a record that was being projected in pieces.
			if crc := wal.PayloadCRC(e.Payload); crc != b.base.PartialCRC {
				return fmt.Errorf("%w: WAL record %d has CRC-32C %08x, the checkpoint's partly projected record %08x",
					ErrWALDiverged, e.Index, crc, b.base.PartialCRC)
			}
			if err := rr.Skip(b.base.PartialItems); err != nil {
				return fmt.Errorf("WAL record %d: resume after %d items: %w", e.Index, b.base.PartialItems, err)
			}
			skip = b.base.PartialItems
		}
		first := len(b.items) == 0
		whole := len(b.items)+rr.Len()-skip <= p.cfg.MaxBatchItems && b.size+len(e.Payload) <= p.cfg.MaxBatchBytes
		if !first && !whole {
			b.done = true // the next batch takes it (in pieces if it needs to)
			return nil
		}
		from := len(b.items)
		if whole && skip == 0 {
			// The common case: the record is decoded at once, with
			// per-record allocations (DecodeRecordInto).
			if err := ingest.DecodeRecordInto(&b.rec, e.Payload); err != nil {
				return fmt.Errorf("WAL record %d: %w", e.Index, err)
			}
			b.items = b.rec.AppendProjectItems(b.items)
			b.size += len(e.Payload)
		} else if err := p.take(b, rr, first); err != nil {
			return fmt.Errorf("WAL record %d: %w", e.Index, err)
		} else if !first {
			b.size += len(e.Payload)
		}
		br := batchRecord{index: e.Index, crc: wal.PayloadCRC(e.Payload), from: from, n: len(b.items) - from,
			complete: (whole && skip == 0) || rr.Done() == rr.Len()}
		if !br.complete || skip > 0 {
			br.open = &openRecord{index: e.Index, crc: br.crc, rr: rr}
			if skip == 0 && p.reg.Waiting(e.Index) {
				br.open.verdicts = make([]ingest.Verdict, 0, rr.Len())
			}
		}
		b.recs = append(b.recs, br)
		if !br.complete {
			b.done = true
			return nil
		}
	}
	return nil
}

// fill reads the durable records at the cursor into b while they fit,
// without waiting for more. Records read before a failing one stay in b;
// the read error is kept in b.readErr (the next read returns it again,
// with the cursor at the failing record).
func (p *Projector) fill(b *batch) error {
	if p.closed(b) {
		return nil
	}
	entries, err := p.cur.Next(p.cfg.MaxBatchEntries-len(b.recs), p.cfg.MaxBatchBytes-b.size)
	b.readErr = err
	return p.add(b, entries)
}

// small reports whether b is a batch that MinBatchItems makes wait for
// the group commits in flight.
func (p *Projector) small(b *batch) bool {
	return !p.closed(b) && len(b.recs) > 0 && b.recs[0].open == nil && len(b.items) < p.cfg.MinBatchItems
}

// waitSmall is MinBatchItems' wait: while b is small, it waits for the
// group commits in flight and takes their records, MaxBatchWait in all.
func (p *Projector) waitSmall(ctx context.Context, b *batch) error {
	var deadline time.Time
	for p.small(b) {
		if deadline.IsZero() {
			deadline = time.Now().Add(p.cfg.MaxBatchWait)
		}
		if !p.waitGroupCommit(ctx, time.Until(deadline)) {
			return nil
		}
		if err := p.fill(b); err != nil {
			return err
		}
	}
	return nil
}

// build starts a batch at cursor in b: the next piece of the record
// projected in pieces, if any, then whole records while they fit
// MaxBatchEntries, MaxBatchItems and MaxBatchBytes, or, when the first
// record does not fit alone, the first piece of it.
func (p *Projector) build(ctx context.Context, b *batch, cursor uint64) error {
	b.reset(p.cp)
	if p.open != nil && p.open.index != cursor {
		p.open = nil
	}
	if o := p.open; o != nil {
		if err := p.take(b, o.rr, true); err != nil {
			return fmt.Errorf("WAL record %d: %w", o.index, err)
		}
		b.recs = append(b.recs, batchRecord{index: o.index, crc: o.crc, n: len(b.items), complete: o.rr.Done() == o.rr.Len(), open: o})
		if !b.recs[0].complete {
			b.done = true
			return nil
		}
		cursor++
	}
	if p.cur.Position() != cursor {
		p.cur.Seek(cursor)
	}
	if err := p.fill(b); err != nil {
		return err
	}
	return p.waitSmall(ctx, b)
}

// commitResult is what one pg.Store.Project call returned, and how long
// it took.
type commitResult struct {
	out  []pg.Outcome
	err  error
	took time.Duration
}

// commit runs one projection transaction (pg.Store.Project) and sends its
// result; it touches nothing of the projector's state.
func (p *Projector) commit(ctx context.Context, items []pg.ProjectItem, cp pg.Checkpoint, result chan<- commitResult) {
	tctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	started := time.Now()
	out, err := p.store.Project(tctx, p.cfg.BrokerID, cp, items)
	result <- commitResult{out: out, err: err, took: time.Since(started)}
}

// projectOnce projects the batch at cursor (build) and, while each batch
// commits, prepares the next one beside it: it reads, verifies and
// decodes the records that become durable meanwhile (broker CPU that
// would otherwise wait for the commit's round trip), so the next
// transaction is sent as soon as the one before is confirmed. There is
// still one writer: a batch's transaction starts only after the one
// before it committed, in checkpoint order, and a failed one discards the
// batch prepared after it (the cursor is re-read from the checkpoint).
// The verdicts of a batch are delivered after its confirmed commit, while
// the next one is on the wire. A batch that ends inside a record (pieces)
// has nothing prepared after it. It returns when there is nothing durable
// to prepare at a commit, or with the first error.
func (p *Projector) projectOnce(ctx context.Context, cursor uint64) error {
	defer func() {
		p.prepared.Store(0)
		p.bufs[0].reset(pg.Checkpoint{})
		p.bufs[1].reset(pg.Checkpoint{})
	}()
	b := &p.bufs[0]
	if err := p.build(ctx, b, cursor); err != nil {
		return err
	}
	if len(b.recs) == 0 {
		return b.readErr // a corrupt record stalls projection loudly; it is never skipped
	}
	result := make(chan commitResult, 1)
	var prev *batch // committed, its verdicts not yet delivered
	var prevOut []pg.Outcome
	for {
		cp := b.checkpoint()
		go p.commit(ctx, b.items, cp, result)
		if prev != nil {
			p.answer(prev, prevOut)
			prev, prevOut = nil, nil
		}
		next, r, nextErr := p.prepare(ctx, b, cp, result)
		if p.cfg.ObserveBatch != nil {
			p.cfg.ObserveBatch(len(b.items), r.took, r.err)
		}
		if r.err != nil {
			p.open = nil // the reader moved past uncommitted items: start over from the checkpoint
			p.piecesLeft.Store(0)
			return r.err // the prepared batch is dropped with it
		}
		cont := next != nil && nextErr == nil && ctx.Err() == nil && !p.Paused()
		p.settle(b, cp, r.out, !cont)
		p.outage.succeeded(p.checkpoint.Load(), p.Backlog())
		if !cont {
			p.answer(b, r.out)
			return nextErr
		}
		// Records that became durable since the last read, then
		// MinBatchItems' wait (the verdicts go first when it may wait).
		if err := p.fill(next); err != nil {
			p.answer(b, r.out)
			return err
		}
		if p.small(next) {
			p.answer(b, r.out)
			if err := p.waitSmall(ctx, next); err != nil {
				return err
			}
		} else {
			prev, prevOut = b, r.out
		}
		if len(next.recs) == 0 {
			if prev != nil {
				p.answer(prev, prevOut)
			}
			return next.readErr
		}
		b = next
	}
}

// prepare waits for the result of b's commit (checkpoint cp) and, when
// a batch may follow b's (b ends on a whole record, read without error),
// prepares it meanwhile in the other buffer from the records durable
// after b's: it returns that batch (nil when none was prepared), b's
// commit result, and the error that stopped the preparation, if any (to
// be returned after b's commit).
func (p *Projector) prepare(ctx context.Context, b *batch, cp pg.Checkpoint, result <-chan commitResult) (*batch, commitResult, error) {
	if !b.recs[len(b.recs)-1].complete || b.readErr != nil || p.Paused() {
		return nil, <-result, nil
	}
	next := &p.bufs[0]
	if b == next {
		next = &p.bufs[1]
	}
	next.reset(cp)
	p.cur.Seek(cp.Index + 1)
	for {
		if err := p.fill(next); err != nil {
			return next, <-result, err
		}
		p.prepared.Store(int64(len(next.items)))
		if p.closed(next) || ctx.Err() != nil {
			return next, <-result, nil
		}
		select {
		case r := <-result:
			return next, r, nil
		case <-p.wal.Notify():
		case <-ctx.Done():
		}
	}
}

// settle records b's confirmed commit at cp (out: its outcomes): the
// checkpoint, health, and the record it ends inside, if any, with the
// verdicts of its items committed so far. seek: the cursor is moved to
// the record after cp (no batch prepared after b goes on).
func (p *Projector) settle(b *batch, cp pg.Checkpoint, out []pg.Outcome, seek bool) {
	p.cp = cp
	p.checkpoint.Store(cp.Index)
	if seek {
		p.cur.Seek(cp.Index + 1)
	}
	p.unhealthy.Store(false)
	p.mu.Lock()
	p.lastErr = nil
	p.mu.Unlock()
	p.open = nil
	p.piecesLeft.Store(0)
	r := b.recs[len(b.recs)-1]
	if r.complete {
		return
	}
	var v []ingest.Verdict
	if r.open.verdicts != nil && p.reg.Waiting(r.index) {
		v = r.open.verdicts
		for k := r.from; k < r.from+r.n; k++ {
			v = append(v, ingest.Verdict{Duplicate: out[k].Duplicate, MessageID: out[k].MessageID})
		}
	}
	r.open.verdicts = v // nil: its push answered buffered meanwhile
	p.open = r.open
	p.piecesLeft.Store(int64(r.open.rr.Len() - r.open.rr.Done()))
}

// answer delivers the verdicts of b's complete records and the queues
// it stored messages in (Config.OnCommit), after b's confirmed commit
// (out: its outcomes).
func (p *Projector) answer(b *batch, out []pg.Outcome) {
	if p.cfg.OnCommit != nil {
		seen := make(map[string]bool)
		var qs []string
		for i := range b.items {
			if !out[i].Duplicate && !seen[b.items[i].Queue] {
				seen[b.items[i].Queue] = true
				qs = append(qs, b.items[i].Queue)
			}
		}
		if len(qs) > 0 {
			p.cfg.OnCommit(qs)
		}
	}
	for _, r := range b.recs {
		if !r.complete {
			continue // settle kept its verdicts so far
		}
		var v []ingest.Verdict
		if r.open != nil {
			if r.open.verdicts == nil {
				continue // its push was answered buffered when a piece before failed
			}
			v = r.open.verdicts
		}
		for k := r.from; k < r.from+r.n; k++ {
			v = append(v, ingest.Verdict{Duplicate: out[k].Duplicate, MessageID: out[k].MessageID})
		}
		p.reg.Deliver(r.index, v)
	}
}

// waitGroupCommit is MinBatchItems' wait: when the WAL is fsyncing a group
// commit past the cursor (which has read every durable record), it waits
// for that fsync, at most d; it reports whether records past the cursor
// are durable now.
func (p *Projector) waitGroupCommit(ctx context.Context, d time.Duration) bool {
	notify := p.wal.Notify()
	select { // a token from a durable advance already seen
	case <-notify:
	default:
	}
	if p.wal.DurableIndex() >= p.cur.Position() {
		return true
	}
	if d <= 0 || !p.wal.InFlight() {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-notify:
	case <-t.C:
	case <-p.wake:
	case <-ctx.Done():
		return false
	}
	return p.wal.DurableIndex() >= p.cur.Position()
}

// maintainLoop runs maintain every MaintainInterval, beside the projection
// loop (not only when it is idle: under constant load it never is).
func (p *Projector) maintainLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.MaintainInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.maintain(ctx)
		case <-p.wal.Full(): // a push was refused at the byte cap: make room now
			p.truncateWAL()
		}
	}
}

// maintain truncates projected WAL segments past retention and sweeps
// expired dedup entries. Errors are logged; they never stop projection.
func (p *Projector) maintain(ctx context.Context) {
	p.truncateWAL()
	sctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	if _, err := p.store.SweepDedup(sctx, p.cfg.DedupGrace, 10000); err != nil {
		p.log.Warn("projector: dedup sweep failed", "err", err)
	}
}

// truncateWAL removes projected WAL segments past their retention, or past
// none when the WAL is above 3/4 of its byte cap.
func (p *Projector) truncateWAL() {
	retention := p.cfg.WALRetention
	if retention < 0 {
		retention = 0
	}
	// Near the WAL's byte cap, room for new pushes wins over keeping
	// projected segments for disaster recovery.
	if limit := p.wal.MaxBytes(); limit > 0 && p.wal.Size() > limit/4*3 && retention > 0 {
		p.log.Debug("projector: WAL above 3/4 of its byte cap; truncating projected segments before their retention",
			"bytes", p.wal.Size(), "cap", limit)
		retention = 0
	}
	if n, err := p.wal.TruncateProjected(p.checkpoint.Load(), retention); err != nil {
		p.log.Warn("projector: WAL truncation failed", "err", err)
	} else if n > 0 {
		p.log.Info("projector: truncated projected WAL segments", "segments", n, "checkpoint", p.checkpoint.Load())
	}
}

func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
	}
}
