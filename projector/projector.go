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
// neither lost nor applied twice (docs/architecture.md, "Exactly-once
// projection").
package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
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
	// DefaultMaxWaitBatchBytes: while a batch of more WAL payload than
	// this is sent (only a record larger than MaxBatchBytes makes one: a
	// push with an item of megabytes), every push behind it is answered
	// "buffered" as soon as its record is durable, and those already
	// waiting at once: PostgreSQL stores such a batch at tens of MB/s (a
	// 63 MiB incompressible payload took it 2.5-3.9 s on a durable
	// cluster), and the pushes behind it would wait that long for their
	// verdicts (docs/decisions.md, "Verdict wait and backpressure").
	DefaultMaxWaitBatchBytes = 2 * DefaultMaxBatchBytes
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
	// recovery: docs/operations.md, "Backup and restore of PostgreSQL").
	// Negative means truncate as soon as projected.
	WALRetention time.Duration
	// MaintainInterval is how often WAL truncation and the dedup sweep run.
	MaintainInterval time.Duration
	// DedupGrace keeps dedup entries this long past their window.
	DedupGrace time.Duration
	// MaxWaitPieceItems: see DefaultMaxWaitPieceItems.
	MaxWaitPieceItems int
	// MaxWaitBatchBytes: see DefaultMaxWaitBatchBytes (bytes of WAL
	// payload; the estimate of a piece's items for a record in pieces).
	MaxWaitBatchBytes int
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
	// CheckpointHint, when set, is a file where the projector keeps the
	// last checkpoint PostgreSQL confirmed (written at each maintenance
	// tick and at Stop; decimal WAL index, no fsync): read at New, it is
	// what Checkpoint and Backlog report until PostgreSQL is reached, so
	// that a broker started while PostgreSQL is away does not count every
	// WAL record as unprojected. It is never used to project or to
	// truncate. Empty: no hint, the checkpoint reads 0 until then.
	CheckpointHint string
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
	checkpoint atomic.Uint64 // last committed WAL index (the hint's until confirmed)
	// confirmed is set once the checkpoint was read from PostgreSQL
	// (loadCursor); until then checkpoint holds CheckpointHint's value.
	confirmed  atomic.Bool
	hinted     uint64       // the checkpoint last written to CheckpointHint (owned by the maintenance loop and Stop)
	piecesLeft atomic.Int64 // items still to project of the record in pieces (0: none)
	heavy      atomic.Bool  // a batch of more than MaxWaitBatchBytes is being sent
	wake       chan struct{}
	// room asks the maintenance loop to truncate now: a commit left the
	// WAL above 3/4 of its byte cap (truncateWAL).
	room chan struct{}
	cur  *wal.Cursor // owned by the loop
	// cp is the checkpoint as last read or committed, and open the record
	// after it while it is projected in pieces (nil otherwise); both are
	// owned by the loop.
	cp    pg.Checkpoint
	open  *openRecord
	items []pg.ProjectItem // the batch being built, reused
	rec   ingest.Record    // decode buffer for whole records, reused

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
	if cfg.MaxWaitBatchBytes <= 0 {
		cfg.MaxWaitBatchBytes = DefaultMaxWaitBatchBytes
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
	p := &Projector{cfg: cfg, wal: w, store: store, reg: reg, log: cfg.Logger, wake: make(chan struct{}, 1), room: make(chan struct{}, 1),
		cur: w.NewCursor(1), outage: outageLog{log: cfg.Logger, now: time.Now}}
	if v, ok := readCheckpointHint(cfg.CheckpointHint); ok && v <= w.DurableIndex() {
		p.checkpoint.Store(v)
		p.hinted = v
	}
	return p
}

// readCheckpointHint reads the checkpoint hint at path ("" or a missing or
// malformed file: not ok).
func readCheckpointHint(path string) (uint64, bool) {
	if path == "" {
		return 0, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// writeCheckpointHint writes the confirmed checkpoint to CheckpointHint
// when it moved since the last write (a temporary file renamed over it;
// no fsync: a hint lost in a crash only makes the next start report more
// backlog until PostgreSQL answers). A failure is logged at debug: it
// costs only that report.
func (p *Projector) writeCheckpointHint() {
	cp := p.checkpoint.Load()
	if p.cfg.CheckpointHint == "" || !p.confirmed.Load() || cp == p.hinted {
		return
	}
	tmp := p.cfg.CheckpointHint + ".tmp"
	err := os.WriteFile(tmp, strconv.AppendUint(nil, cp, 10), 0o640)
	if err == nil {
		err = os.Rename(tmp, p.cfg.CheckpointHint)
	}
	if err != nil {
		p.log.Debug("projector: checkpoint hint not written", "path", p.cfg.CheckpointHint, "err", err)
		return
	}
	p.hinted = cp
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
// then the maintenance loop, and writes the checkpoint hint. Idempotent.
func (p *Projector) Stop() {
	p.loop.Stop()
	p.maint.Stop()
	p.writeCheckpointHint()
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
// stands in front of them with more than MaxWaitPieceItems items to go, or
// while a batch of more than MaxWaitBatchBytes is sent: their verdicts
// would come only after seconds, so they are answered buffered.
func (p *Projector) Accepting() bool {
	return !p.Paused() && !p.unhealthy.Load() && !p.heavy.Load() &&
		p.piecesLeft.Load() <= int64(p.cfg.MaxWaitPieceItems)
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

// Checkpoint is the last WAL index known committed: until PostgreSQL
// has been reached, the one CheckpointHint kept from the last run (0
// without one), which CheckpointConfirmed tells apart.
func (p *Projector) Checkpoint() uint64 { return p.checkpoint.Load() }

// CheckpointConfirmed reports whether Checkpoint (and so Backlog) was
// read from PostgreSQL or committed since, rather than taken from the
// hint of the last run.
func (p *Projector) CheckpointConfirmed() bool { return p.confirmed.Load() }

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
	known := false          // cursor is valid only after reading the checkpoint
	var roomAsked time.Time // when a commit last asked for truncation (room)
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
			p.recovered()
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
					p.recovered()
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
		if p.nearCap() && (time.Since(roomAsked) >= roomInterval || p.Backlog() == 0) {
			// Catching up after an outage that filled the WAL: room for
			// pushes now, not at the next maintenance tick (nor after a
			// push refused at the cap); at most every roomInterval while
			// records remain, as a truncation reads the WAL's directory,
			// and once more when the last one is in.
			roomAsked = time.Now()
			select {
			case p.room <- struct{}{}:
			default:
			}
		}
	}
}

// recovered records a PostgreSQL step that succeeded outside a batch (the
// cursor loaded, an idle ping): the projector is healthy and its last
// error is cleared, as after a committed batch.
func (p *Projector) recovered() {
	p.unhealthy.Store(false)
	p.mu.Lock()
	p.lastErr = nil
	p.mu.Unlock()
	p.outage.succeeded(p.checkpoint.Load(), p.Backlog())
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
	p.confirmed.Store(true)
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
	if !p.confirmed.Load() || dbIndex >= committed || next > committed {
		return // before the first load checkpoint holds the hint, no commit seen (docs/failover.md)
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

// projectOnce projects one batch starting at cursor: whole records while
// they fit MaxBatchEntries, MaxBatchItems and MaxBatchBytes, or, when the
// first record does not fit alone, the next piece of it.
func (p *Projector) projectOnce(ctx context.Context, cursor uint64) error {
	items := p.items[:0]
	var recs []batchRecord
	rec := &p.rec // one decode buffer for the batch's whole records
	size := 0     // bytes of items: WAL payload of whole records, or an estimate per item of a piece
	full := func() bool { return len(items) >= p.cfg.MaxBatchItems || size >= p.cfg.MaxBatchBytes }
	// take appends rr's remaining items, or with cut only up to the
	// batch's budget (at least one).
	take := func(rr *ingest.RecordReader, cut bool) error {
		var it ingest.Item
		for rr.Done() < rr.Len() && (!cut || len(items) == 0 || !full()) {
			if err := rr.Next(&it); err != nil {
				return err
			}
			items = append(items, it.ProjectItem(rr.AcceptedAt))
			if cut {
				size += len(it.Payload) + len(it.TransactionID) + len(it.Queue) + len(it.Partition) + 32
			}
		}
		return nil
	}
	defer func() { // drop references to WAL payloads
		clear(p.items[:cap(p.items)])
		clear(p.rec.Items[:cap(p.rec.Items)])
	}()

	if p.open != nil && p.open.index != cursor {
		p.open = nil
	}
	if o := p.open; o != nil {
		from := len(items)
		if err := take(o.rr, true); err != nil {
			return fmt.Errorf("WAL record %d: %w", o.index, err)
		}
		recs = append(recs, batchRecord{index: o.index, crc: o.crc, from: from, n: len(items) - from, complete: o.rr.Done() == o.rr.Len(), open: o})
		cursor++
	}
	var readErr error
	if len(recs) == 0 || (recs[0].complete && !full()) {
		if p.cur.Position() != cursor {
			p.cur.Seek(cursor)
		}
		// add appends the records of batch (read from the cursor) while
		// they fit; done: it stopped before the end of batch, or inside a
		// record (the batch is full).
		add := func(batch []wal.Entry) (done bool, err error) {
			for _, e := range batch {
				rr, err := ingest.NewRecordReader(e.Payload)
				if err != nil {
					return false, fmt.Errorf("WAL record %d: %w", e.Index, err)
				}
				skip := 0
				if len(items) == 0 && e.Index == p.cp.Index+1 && p.cp.PartialItems > 0 {
					// Resuming inside a record that was being projected in pieces.
					if crc := wal.PayloadCRC(e.Payload); crc != p.cp.PartialCRC {
						return false, fmt.Errorf("%w: WAL record %d has CRC-32C %08x, the checkpoint's partly projected record %08x",
							ErrWALDiverged, e.Index, crc, p.cp.PartialCRC)
					}
					if err := rr.Skip(p.cp.PartialItems); err != nil {
						return false, fmt.Errorf("WAL record %d: resume after %d items: %w", e.Index, p.cp.PartialItems, err)
					}
					skip = p.cp.PartialItems
				}
				first := len(items) == 0
				whole := len(items)+rr.Len()-skip <= p.cfg.MaxBatchItems && size+len(e.Payload) <= p.cfg.MaxBatchBytes
				if !first && !whole {
					return true, nil // the next batch takes it (in pieces if it needs to)
				}
				from := len(items)
				if whole && skip == 0 {
					// The common case: the record is decoded at once, with
					// per-record allocations (DecodeRecordInto).
					if err := ingest.DecodeRecordInto(rec, e.Payload); err != nil {
						return false, fmt.Errorf("WAL record %d: %w", e.Index, err)
					}
					items = rec.AppendProjectItems(items)
					size += len(e.Payload)
				} else if err := take(rr, first); err != nil {
					return false, fmt.Errorf("WAL record %d: %w", e.Index, err)
				} else if !first {
					size += len(e.Payload)
				}
				br := batchRecord{index: e.Index, crc: wal.PayloadCRC(e.Payload), from: from, n: len(items) - from,
					complete: (whole && skip == 0) || rr.Done() == rr.Len()}
				if !br.complete || skip > 0 {
					br.open = &openRecord{index: e.Index, crc: br.crc, rr: rr}
					if skip == 0 && p.reg.Waiting(e.Index) {
						br.open.verdicts = make([]ingest.Verdict, 0, rr.Len())
					}
				}
				recs = append(recs, br)
				if !br.complete {
					return true, nil
				}
			}
			return false, nil
		}
		batch, err := p.cur.Next(p.cfg.MaxBatchEntries-len(recs), p.cfg.MaxBatchBytes-size)
		// Records read before a failing one are projected; the failure
		// comes back on the next call, with the cursor at the failing record.
		readErr = err
		done, err := add(batch)
		if err != nil {
			return err
		}
		// MinBatchItems: a small batch waits for the group commits in
		// flight, MaxBatchWait in all.
		var deadline time.Time
		for !done && readErr == nil && len(recs) > 0 && recs[0].open == nil && len(recs) < p.cfg.MaxBatchEntries && !full() &&
			len(items) < p.cfg.MinBatchItems {
			if deadline.IsZero() {
				deadline = time.Now().Add(p.cfg.MaxBatchWait)
			}
			if !p.waitGroupCommit(ctx, time.Until(deadline)) {
				break
			}
			batch, err := p.cur.Next(p.cfg.MaxBatchEntries-len(recs), p.cfg.MaxBatchBytes-size)
			readErr = err
			if done, err = add(batch); err != nil {
				return err
			}
		}
	}
	if len(recs) == 0 {
		return readErr // a corrupt record stalls projection loudly; it is never skipped
	}
	p.items = items
	// The checkpoint this batch commits: its last complete record, and the
	// items of the record after it when the batch ends inside it.
	cp := p.cp
	for _, r := range recs {
		if r.complete {
			cp = pg.Checkpoint{Index: r.index, RecordCRC: r.crc, HasCRC: true}
		} else {
			cp.PartialItems, cp.PartialCRC = r.open.rr.Done(), r.crc
		}
	}
	if size > p.cfg.MaxWaitBatchBytes {
		// The gate closes first, so that no record made durable after
		// the waiters are answered starts waiting.
		p.heavy.Store(true)
		defer p.heavy.Store(false)
		p.reg.FailAfter(recs[len(recs)-1].index)
	}
	tctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	started := time.Now()
	out, err := p.store.Project(tctx, p.cfg.BrokerID, cp, items)
	if p.cfg.ObserveBatch != nil {
		p.cfg.ObserveBatch(len(items), time.Since(started), err)
	}
	if err != nil {
		p.open = nil // the reader moved past uncommitted items: start over from the checkpoint
		p.piecesLeft.Store(0)
		return err
	}
	p.cp = cp
	p.checkpoint.Store(cp.Index)
	p.cur.Seek(cp.Index + 1)
	// The committed records' payloads (items) are not used past here: the
	// WAL may reuse their segment memory (wal.Cursor, ownership rule). The
	// record being projected in pieces (p.open) is above cp.Index.
	p.cur.Release(cp.Index)
	p.unhealthy.Store(false)
	p.mu.Lock()
	p.lastErr = nil
	p.mu.Unlock()
	if p.cfg.OnCommit != nil {
		seen := make(map[string]bool)
		var qs []string
		for i := range items {
			if !out[i].Duplicate && !seen[items[i].Queue] {
				seen[items[i].Queue] = true
				qs = append(qs, items[i].Queue)
			}
		}
		if len(qs) > 0 {
			p.cfg.OnCommit(qs)
		}
	}
	p.open = nil
	p.piecesLeft.Store(0)
	for _, r := range recs {
		var v []ingest.Verdict
		if r.open == nil || r.open.verdicts != nil {
			if r.open != nil {
				v = r.open.verdicts
			}
			v = slices.Grow(v, r.n) // one allocation per record, not append's doublings
			for k := r.from; k < r.from+r.n; k++ {
				v = append(v, ingest.Verdict{Duplicate: out[k].Duplicate, MessageID: out[k].MessageID})
			}
		}
		if !r.complete {
			if v != nil && !p.reg.Waiting(r.index) {
				v = nil // its push answered buffered meanwhile
			}
			r.open.verdicts = v
			p.open = r.open
			p.piecesLeft.Store(int64(r.open.rr.Len() - r.open.rr.Done()))
			continue
		}
		if r.open != nil && v == nil {
			continue // its push was answered buffered when the piece before failed
		}
		p.reg.Deliver(r.index, v)
	}
	return nil
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
		case <-p.room: // a commit left the WAL near its byte cap
			p.truncateWAL()
		}
	}
}

// maintain truncates projected WAL segments past retention and sweeps
// expired dedup entries. Errors are logged; they never stop projection.
func (p *Projector) maintain(ctx context.Context) {
	p.writeCheckpointHint()
	p.truncateWAL()
	sctx, cancel := context.WithTimeout(ctx, p.cfg.TxTimeout)
	defer cancel()
	if _, err := p.store.SweepDedup(sctx, p.cfg.DedupGrace, 10000); err != nil {
		p.log.Log(ctx, pg.OutageLevel(err), "projector: dedup sweep failed", "err", err)
	}
}

// truncateWAL removes projected WAL segments past their retention, or past
// none when the WAL is above 3/4 of its byte cap.
func (p *Projector) truncateWAL() {
	if !p.confirmed.Load() {
		return // a checkpoint from the hint is never a reason to delete
	}
	retention := p.cfg.WALRetention
	if retention < 0 {
		retention = 0
	}
	// Near the WAL's byte cap, room for new pushes wins over keeping
	// projected segments for disaster recovery.
	if retention > 0 && p.nearCap() {
		p.log.Debug("projector: WAL above 3/4 of its byte cap; truncating projected segments before their retention",
			"bytes", p.wal.Size(), "cap", p.wal.MaxBytes())
		retention = 0
	}
	if n, err := p.wal.TruncateProjected(p.checkpoint.Load(), retention); err != nil {
		p.log.Warn("projector: WAL truncation failed", "err", err)
	} else if n > 0 {
		p.log.Info("projector: truncated projected WAL segments", "segments", n, "checkpoint", p.checkpoint.Load())
	}
}

// nearCap reports whether the WAL has a byte cap (QUEEN_WAL_MAX_BYTES)
// and holds more than 3/4 of it: projected segments are then truncated
// before their retention.
func (p *Projector) nearCap() bool {
	limit := p.wal.MaxBytes()
	return limit > 0 && p.wal.Size() > limit/4*3
}

// roomInterval is the shortest time between two truncations a commit asks
// for (Projector.room).
const roomInterval = 100 * time.Millisecond

func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
	}
}
