package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SetKeyHash replaces the sidecar's key hash (to force collisions) and
// returns the function that restores it.
func SetKeyHash(f func(pid uuid.UUID, txid string) int64) (restore func()) {
	old := keyHash
	keyHash = f
	return func() { keyHash = old }
}

// SetMintedKey replaces the sidecar's minted key (to force collisions) and
// returns the function that restores it.
func SetMintedKey(f func(tick int64) int64) (restore func()) {
	old := mintedKey
	mintedKey = f
	return func() { mintedKey = old }
}

// KeyHash, MintedKey and MintedPartKey are the sidecar's hashes, for tests.
func KeyHash(pid uuid.UUID, txid string) int64 { return keyHash(pid, txid) }
func MintedKey(tick int64) int64               { return mintedKey(tick) }

func MintedPartKey(pid uuid.UUID, tick int64) int64 { return mintedPartKey(pid, tick) }
func MintedMillis(u uuid.UUID) int64                { return mintedMillis(u) }

// HashedTickKey is the mark of a tick whose minted-form keys a row keeps
// under their own key hash.
func HashedTickKey(tick int64) int64 { return hashedTickKey(tick) }

// UnmarkedRows reports whether s takes the sidecar for one that may hold
// rows of an earlier layout (and so probes minted-form keys by key hash).
func UnmarkedRows(s *Store) bool { return s.unmarkedRows.Load() }

// MaxTickRows is how many of a Store's rows may hold a tick's key for
// client keys.
const MaxTickRows = maxTickRows

// MintedTickMillis is mintedTickMillis, for tests.
const MintedTickMillis = mintedTickMillis

// MintedSpan is mintedSpan, for tests.
const MintedSpan = mintedSpan

// BatchPart is one partition's messages of a projection batch.
type BatchPart struct {
	PID  uuid.UUID
	Base int64
	Msgs []Message
}

// BatchRowOf returns the queen.dedup_batches row a batch of parts makes
// and its newest acceptance time (the insert adds the longest window).
func BatchRowOf(parts ...BatchPart) (pids []uuid.UUID, bases, hashes []int64, newest time.Time) {
	var r dedupRuns
	for _, p := range parts {
		r.add(p.PID, p.Base, p.Msgs, nil)
	}
	return r.pid, r.base, r.hashes, time.UnixMicro(r.newest)
}

// FastAcks is how many acks s completed with its lease memo (fastAck).
func FastAcks(s *Store) int64 { return s.leases.applied.Load() }

// PredictedBatches returns how many batches s projected in one round trip
// (predicted offsets) and how many such attempts rolled back to the long way.
func PredictedBatches(s *Store) (committed, missed int64) {
	return s.predicted.Load(), s.predictedMiss.Load()
}

// CombinedPops is how many pops combined transactions served.
func CombinedPops(s *Store) int64 { return s.combine.served.Load() }

// CombinedGroupPops is how many autoAck pops combined transactions of
// several consumer groups served.
func CombinedGroupPops(s *Store) int64 { return s.combine.servedGroups.Load() }

// ServeAutoAckBatch runs reqs (normalized autoAck wildcard pops of one
// partition each, of one queue and batch) as one combined transaction of
// the line would serve them (serveBatch), and returns each pop's result:
// nil for a pop left to run by itself.
func ServeAutoAckBatch(s *Store, reqs []PopRequest) []*PopResult {
	ws := make([]*popWaiter, len(reqs))
	for i, r := range reqs {
		r.Partitions = 1
		ws[i] = &popWaiter{req: r, done: make(chan struct{})}
	}
	s.serveBatch(ws)
	out := make([]*PopResult, len(ws))
	for i, w := range ws {
		<-w.done
		if !w.alone {
			out[i] = w.res
		}
	}
	return out
}

// CombinedAcks is how many ack calls combined transactions applied.
func CombinedAcks(s *Store) int64 { return s.ackCombine.served.Load() }

// KeptWriteBuffers returns the write buffers that s's idle pool
// connections keep between projection batches (pg/wbuf.go).
func KeptWriteBuffers(ctx context.Context, s *Store) [][]byte {
	var out [][]byte
	for _, c := range s.pool.AcquireAllIdle(ctx) {
		if kept, ok := c.Conn().PgConn().CustomData()[wbufKey].(*keptBuffer); ok {
			out = append(out, kept.b)
		}
		c.Release()
	}
	return out
}

// LookUpPartitions resolves the partitions of items as a projector batch
// does before it is sent (creating missing ones, learning the looked-up
// offsets as guesses), without projecting anything.
func LookUpPartitions(ctx context.Context, s *Store, items []ProjectItem) ([]uuid.UUID, error) {
	return s.partitionIDs(ctx, nil, items, true)
}

// ServeCombinedAcks serves the whole-lease ack calls in one combined
// transaction, as serveQueuedAcks does with calls queued behind one in
// flight, and returns for each call whether that transaction applied it
// (false also for a call that is no whole-lease ack of this broker).
func ServeCombinedAcks(s *Store, calls [][]AckRequest) []bool {
	var ws []*ackWaiter
	byCall := make([]*ackWaiter, len(calls))
	for i, reqs := range calls {
		if e := s.fastAckEntry(reqs); e != nil {
			byCall[i] = &ackWaiter{reqs: reqs, e: e, done: make(chan struct{})}
			ws = append(ws, byCall[i])
		}
	}
	if len(ws) > 0 {
		s.serveAcks(ws)
	}
	out := make([]bool, len(calls))
	for i, w := range byCall {
		out[i] = w != nil && w.applied
	}
	return out
}

// WholeLease is one whole-lease ack as the lease memo knows it: offsets
// First..Last of partition Partition under Lease, for Group, of Queue.
type WholeLease struct {
	Partition, Lease uuid.UUID
	Group, Queue     string
	First, Last      int64
}

// TryWholeLeaseAcks applies leases (in their order) in a transaction that
// is rolled back afterwards: with combined, fastAcksSQL over all of them
// (as a combined ack transaction sends it, after fastAcksSetup); else one
// fastAckSQL per lease (as an ack alone sends it). It returns which
// leases were applied and, read in the same transaction, every cursor of
// the database as text (partition, group, offset, retries, lease, lease
// end, acked, consumed, in that order), so that the two can be compared.
func TryWholeLeaseAcks(ctx context.Context, s *Store, leases []WholeLease, combined bool) ([]bool, []string, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer pc.Release()
	conn := pc.Conn()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return nil, nil, err
	}
	defer conn.Exec(context.Background(), "ROLLBACK") //nolint:errcheck
	applied := make([]bool, len(leases))
	entries := make([]*leaseMemoEntry, len(leases))
	for i, l := range leases {
		entries[i] = &leaseMemoEntry{key: leaseMemoKey{l.Partition, l.Lease}, group: l.Group, queueName: l.Queue,
			first: l.First, last: l.Last}
	}
	if combined {
		if _, err := conn.Exec(ctx, fastAcksSetup); err != nil {
			return nil, nil, err
		}
		ws := make([]*ackWaiter, len(leases))
		for i, e := range entries {
			ws[i] = &ackWaiter{e: e}
		}
		var b pgx.Batch
		queueFastAcks(&b, ws)
		br := conn.SendBatch(ctx, &b)
		rows, err := br.Query()
		if err == nil {
			var ord int64
			_, err = pgx.ForEachRow(rows, []any{&ord}, func() error {
				if applied[ord-1] {
					return fmt.Errorf("ordinal %d twice", ord)
				}
				applied[ord-1] = true
				return nil
			})
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, err
		}
	} else {
		if _, err := conn.Exec(ctx, "SET LOCAL lock_timeout = '"+ackCombineLockTimeout+"'"); err != nil {
			return nil, nil, err
		}
		for i, e := range entries {
			var b pgx.Batch
			queueFastAck(&b, e)
			var n int
			br := conn.SendBatch(ctx, &b)
			err := br.QueryRow().Scan(&n)
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, nil, err
			}
			applied[i] = n > 0
		}
	}
	rows, err := conn.Query(ctx, `SELECT format('%s %s %s %s %s %s %s %s', partition_id, consumer_group, cursor_offset, retry_count,
		lease_id, lease_end, acked, total_consumed) FROM queen.consumer_cursors ORDER BY partition_id, consumer_group`)
	if err != nil {
		return nil, nil, err
	}
	cursors, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return applied, cursors, err
}

// Lease ids (leasekey.go).
func NewLeaseSeed(multi bool) (uuid.UUID, error)           { return newLeaseSeed(multi) }
func BindLeaseID(seed uuid.UUID, key int64) uuid.UUID      { return bindLeaseID(seed, key) }
func LeaseTarget(id uuid.UUID) (key int64, multi, ok bool) { return leaseTarget(id) }
func LeaseIDSQL(seed, key string) string                   { return leaseIDSQL(seed, key) }
func ReleaseSeed(ctx context.Context, s *Store, queue, group string, seed uuid.UUID) (int64, error) {
	return s.releaseSeed(ctx, queue, group, seed)
}

// SetPartitionIDLimit bounds s's cache of partition ids to limit names per
// generation (empties it), for tests.
func SetPartitionIDLimit(s *Store, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partIDs = newPartIDCache(limit)
}

// PartitionIDsCached is the number of partition names s caches.
func PartitionIDsCached(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partIDs.len()
}

// BacklogLateralSQL is backlogLateralSQL, for tests.
func BacklogLateralSQL(next, first, start, leased, delPending, delLeased string) string {
	return backlogLateralSQL(next, first, start, leased, delPending, delLeased)
}

// Configure is ConfigureQueue naming both namespace and task ("" clears
// one), for tests: it returns what was stored.
func (s *Store) Configure(ctx context.Context, queue, namespace, task, defaultPartition string, o QueueOptions) (*ConfigureResult, error) {
	return s.ConfigureQueue(ctx, queue, &namespace, &task, defaultPartition, o)
}

// PlantLookup makes f take a candidates query of (namespace, task, group),
// begun at wake generation gen, as running; end gives it its answer and
// ends it.
func (f *FilteredPop) PlantLookup(namespace, task, group string, gen uint64) (end func(cands []string, err error)) {
	l := &lookup{gen: gen, done: make(chan struct{})}
	k := lookupKey{namespace, task, group}
	f.mu.Lock()
	f.lookups[k] = l
	f.mu.Unlock()
	return func(cands []string, err error) {
		l.cands, l.err = cands, err
		f.mu.Lock()
		if f.lookups[k] == l {
			delete(f.lookups, k)
		}
		f.mu.Unlock()
		close(l.done)
	}
}

// ForgetLeaseMemo empties s's lease memo, as a broker that did not hand
// out the live leases (another broker, or this one restarted) has it.
func ForgetLeaseMemo(s *Store) { s.leases = newLeaseMemo(0) }

// ProjectorLookups is how many (queue, partition) pairs s's projection
// batches looked up or created because its cache lacked them.
func ProjectorLookups(s *Store) int64 { return s.projectorLookups.Load() }

// TakePrepareTurns takes every PreparePartitions turn of s until release
// is called.
func TakePrepareTurns(s *Store) (release func()) {
	n := cap(s.prepareTurns)
	for range n {
		s.prepareTurns <- struct{}{}
	}
	return func() {
		for range n {
			<-s.prepareTurns
		}
	}
}
