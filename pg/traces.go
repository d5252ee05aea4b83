package pg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Message traces: processing events a consumer records against a stored
// message (Queen's POST /api/v1/traces, called by the SDKs' msg.trace()).
// Table queen.message_traces in schema.sql. A trace is keyed, as in Queen,
// by (partition id, transactionId); it outlives the message's consumption
// and goes with the message: when retention deletes the message's segment
// (RetentionPass) or when the queue is deleted (cascade from partitions).

// ErrTraceMessageNotFound is returned by RecordTrace when no stored message
// of the partition has the transactionId (unknown partition, unknown
// transactionId, or a message whose segment retention already removed).
var ErrTraceMessageNotFound = errors.New("pg: trace: message not found")

// TraceInput is one trace to record. Callers validate it (fastapi): Data
// is a JSON value, kept byte for byte; Names are distinct and sorted.
type TraceInput struct {
	PartitionID   uuid.UUID
	TransactionID string
	ConsumerGroup string
	EventType     string
	Data          []byte
	Names         []string
}

// Trace is one recorded trace. Queue and Partition (names) are filled by
// TracesByName only.
type Trace struct {
	ID            uuid.UUID
	PartitionID   uuid.UUID
	TransactionID string
	MessageID     uuid.UUID
	Offset        int64
	Queue         string
	Partition     string
	ConsumerGroup string
	EventType     string
	Data          []byte
	Names         []string
	CreatedAt     time.Time
}

// TraceNameSummary is one row of GET /api/v1/traces/names: how many traces
// carry the name, on how many distinct messages ((partition, transactionId)
// keys), and when the newest of them was recorded.
type TraceNameSummary struct {
	Name         string
	TraceCount   int64
	MessageCount int64
	LastSeen     time.Time
}

// RecordTrace stores one trace against the message (in.PartitionID,
// in.TransactionID) and returns the trace's id, or ErrTraceMessageNotFound.
//
// The message is found through the dedup sidecar (the latest stored message
// per key; its segment must still exist) and, because the sidecar is swept
// once the queue's dedup window has passed, also among the messages under a
// consumer's lease in that partition, which is where msg.trace() is called
// from. A message older than its dedup window that no consumer holds is
// therefore not found.
func (s *Store) RecordTrace(ctx context.Context, in TraceInput) (uuid.UUID, error) {
	var id pgtype.UUID
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		m, err := s.findTracedMessage(ctx, tx, in.PartitionID, in.TransactionID)
		if err != nil {
			return err
		}
		names := in.Names
		if names == nil {
			names = []string{}
		}
		return tx.QueryRow(ctx, `INSERT INTO queen.message_traces
			(partition_id, transaction_id, message_id, msg_offset, consumer_group, event_type, data, trace_names)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			in.PartitionID, []byte(in.TransactionID), m.ID, m.Offset, in.ConsumerGroup, in.EventType, in.Data, names).Scan(&id)
	})
	if Classify(err) == ClassVanished { // the partition went (queue deleted) meanwhile
		return uuid.Nil, ErrTraceMessageNotFound
	}
	if errors.Is(err, ErrTraceMessageNotFound) {
		return uuid.Nil, err
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("pg: record trace: %w", err)
	}
	return id.Bytes, nil
}

// findTracedMessage finds the stored message of partition pid with
// transactionId txid (see RecordTrace for where it looks).
//
// The leased messages are looked at only when the sidecar has no match,
// which is every request naming a transactionId the partition never
// stored: such a look must not read and decode what the partition's
// leases cover (up to a pop's QUEEN_MAX_POP_BYTES per group; 8 groups
// holding 16 MiB leases made each such trace 0.2 s of broker CPU, and one
// client posting them in a loop cut another client's pushes and pops from
// 1,578 to 249 in 15 s). So a lease this broker handed out is looked at in
// its lease memo, which holds the transactionIds of the lease's offsets
// (segments do not change, and a lease id is minted for one run of
// offsets): only an offset whose transactionId matches is read, and
// fetch drops it if it was deleted. The leases the memo does not hold
// (another broker's, or ones it dropped) are read from their segments,
// each offset once however many groups lease it.
func (s *Store) findTracedMessage(ctx context.Context, tx pgx.Tx, pid uuid.UUID, txid string) (*StoredMessage, error) {
	offs, err := sidecarOffsets(ctx, tx, pid, txid)
	if err != nil {
		return nil, err
	}
	for _, off := range offs { // newest first; a hash hit may be another key's
		msgs, err := fetch(ctx, tx, pid, off, off)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 1 && msgs[0].TransactionID == txid {
			return &msgs[0], nil
		}
	}
	rows, err := tx.Query(ctx, `SELECT consumer_group, lease_id, cursor_offset, lease_end FROM queen.consumer_cursors
		WHERE partition_id = $1 AND lease_end IS NOT NULL AND lease_end >= cursor_offset`, pid)
	if err != nil {
		return nil, err
	}
	type lease struct {
		group    string
		id       pgtype.UUID
		from, to int64
	}
	leases, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
		var l lease
		err := r.Scan(&l.group, &l.id, &l.from, &l.to)
		return l, err
	})
	if err != nil {
		return nil, err
	}
	type span struct{ from, to int64 }
	var spans, hits []span // to read: leases the memo does not hold; offsets it names
	for _, l := range leases {
		var e *leaseMemoEntry
		if l.id.Valid {
			id := uuid.UUID(l.id.Bytes)
			e = s.leases.get(pid, l.group, &id)
		}
		if e == nil || l.from < e.first || l.to > e.last {
			spans = append(spans, span{l.from, l.to})
			continue
		}
		for off := l.from; off <= l.to; off++ {
			if e.id(int(off-e.first)) == txid {
				hits = append(hits, span{off, off})
			}
		}
	}
	// Overlapping leases (groups reading the same offsets) are read once.
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	merged := spans[:0]
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp.from <= merged[n-1].to+1 {
			merged[n-1].to = max(merged[n-1].to, sp.to)
			continue
		}
		merged = append(merged, sp)
	}
	var found *StoredMessage
	for _, sp := range append(merged, hits...) {
		msgs, err := fetch(ctx, tx, pid, sp.from, sp.to)
		if err != nil {
			return nil, err
		}
		for i := range msgs {
			if msgs[i].TransactionID == txid && (found == nil || msgs[i].Offset > found.Offset) {
				found = &msgs[i]
			}
		}
	}
	if found == nil {
		return nil, ErrTraceMessageNotFound
	}
	return found, nil
}

// traceColumns are the columns scanTrace reads, in order.
const traceColumns = `t.id, t.partition_id, t.transaction_id, t.message_id, t.msg_offset, t.consumer_group,
	t.event_type, t.data, t.trace_names, t.created_at`

func scanTrace(row pgx.Row, tr *Trace, extra ...any) error {
	var id, pid, mid pgtype.UUID
	var txid []byte
	dest := append([]any{&id, &pid, &txid, &mid, &tr.Offset, &tr.ConsumerGroup, &tr.EventType, &tr.Data,
		&tr.Names, &tr.CreatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	tr.ID, tr.PartitionID, tr.MessageID, tr.TransactionID = id.Bytes, pid.Bytes, mid.Bytes, string(txid)
	if tr.Names == nil {
		tr.Names = []string{}
	}
	return nil
}

// TraceListing bounds one trace listing: at most Limit traces (Limit must
// be at least 1), and no more than Budget bytes of them as traceRowBytes
// weighs them, always taking at least the first trace whatever its size,
// so that a listing always moves on. The listing ends at
// the first trace that would pass Budget: with T(i) the weight of the
// listing's first i traces in its order, trace i is taken when i <= Limit
// and (i == 1 or T(i) <= Budget); every weight is positive, so the taken
// traces are a prefix.
type TraceListing struct {
	Limit  int
	Budget int64
}

// traceRowBytes weighs one trace row t of a listing in bytes: what its JSON
// carries that a client chose (data, transactionId twice, group, event type,
// names) plus 1 KiB for the ids, times, keys and the queue and partition
// names (at most 255 bytes each), so at least 1024. The sizes are read from
// the row headers: octet_length does not detoast data.
const traceRowBytes = `(octet_length(t.data) + 2 * octet_length(t.transaction_id) + octet_length(t.consumer_group)
	+ octet_length(t.event_type) + coalesce(octet_length(array_to_string(t.trace_names, '')), 0)
	+ 4 * cardinality(t.trace_names) + 1024)`

// fitTraceRows wraps the query candidates, which selects whole
// queen.message_traces rows (aliased t), and numbers and weighs them in the
// listing's order (order: an ORDER BY list on t, such as "t.seq DESC").
// It returns a parenthesized subquery for the caller to alias, holding each
// candidate's columns and n (its 1-based place), bytes (traceRowBytes
// summed over candidates 1..n, a bigint) and candidates (how many there
// are, a bigint). TraceListing's rule is then
// a filter on n and bytes. Only the row headers are weighed: a candidate
// left out by that filter has its data carried as a TOAST pointer, never
// read.
func fitTraceRows(candidates, order string) string {
	return `(SELECT t.*, row_number() OVER w AS n, sum(` + traceRowBytes + `) OVER w AS bytes,
		count(*) OVER () AS candidates FROM (` + candidates + `) t
		WINDOW w AS (ORDER BY ` + order + ` ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))`
}

// MessageTraces returns the newest traces of the message (pid, txid) that
// fit l, oldest first, and whether older ones were left out (by l.Limit or
// l.Budget). An unknown message has none: nil, false, and no error. The
// error wraps PostgreSQL's or the context's ("pg: message traces: ...").
//
// One statement, so one round trip and one snapshot: it takes the newest
// l.Limit+1 traces, weighs them newest first with a running sum, and
// answers only the ones that fit (see TraceListing); the rest are read
// from their row headers only.
func (s *Store) MessageTraces(ctx context.Context, pid uuid.UUID, txid string, l TraceListing) ([]Trace, bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+traceColumns+`, t.candidates
		FROM `+fitTraceRows(`SELECT t.* FROM queen.message_traces t
			WHERE t.partition_id = $1 AND t.transaction_id = $2 ORDER BY t.seq DESC LIMIT $3`, `t.seq DESC`)+` t
		WHERE t.n <= $4 AND (t.n = 1 OR t.bytes <= $5) ORDER BY t.seq`,
		pid, []byte(txid), l.Limit+1, l.Limit, l.Budget)
	var out []Trace
	var candidates int64
	if err == nil {
		for rows.Next() {
			var tr Trace
			if err = scanTrace(rows, &tr, &candidates); err != nil {
				break
			}
			out = append(out, tr)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("pg: message traces: %w", err)
	}
	return out, int64(len(out)) < candidates, nil
}

// readSnapshot runs fn in a read-only repeatable-read transaction, so that
// a page and its total come from one snapshot.
func (s *Store) readSnapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// TracesByName returns one page of the traces carrying name, oldest first
// (by recording order), with their queue and partition names, and the
// total number of traces carrying name. The page starts offset traces in
// and holds what fits l (fewer than l.Limit when l.Budget ends it first);
// it is nil when offset is at or past the total (the total is still
// returned) or l.Limit is 0. The error wraps PostgreSQL's or the context's ("pg: traces by
// name: ..."; a negative l.Limit or offset is PostgreSQL's LIMIT/OFFSET
// error).
//
// One statement, so one round trip and one snapshot for the page and the
// total: the page's rows are weighed in order with a running sum and only
// the ones that fit are answered (see TraceListing).
func (s *Store) TracesByName(ctx context.Context, name string, offset int, l TraceListing) ([]Trace, int64, error) {
	// The count is the left side so that a row comes back, with the total,
	// when the page is empty; its trace columns are then NULL.
	rows, err := s.pool.Query(ctx, `SELECT `+traceColumns+`, q.name, p.name, c.total
		FROM (SELECT count(*) AS total FROM queen.message_traces WHERE trace_names @> ARRAY[$1::text]) c
		LEFT JOIN (`+fitTraceRows(`SELECT t.* FROM queen.message_traces t
				WHERE t.trace_names @> ARRAY[$1::text] ORDER BY t.seq LIMIT $2 OFFSET $3`, `t.seq`)+` t
			JOIN queen.partitions p ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id)
		ON t.n = 1 OR t.bytes <= $4
		ORDER BY t.seq`, name, l.Limit, offset, l.Budget)
	var out []Trace
	var total int64
	if err == nil {
		for rows.Next() {
			if rows.RawValues()[0] == nil { // no page: the total alone
				dest := make([]any, len(rows.FieldDescriptions()))
				dest[len(dest)-1] = &total
				if err = rows.Scan(dest...); err != nil {
					break
				}
				continue
			}
			var tr Trace
			if err = scanTrace(rows, &tr, &tr.Queue, &tr.Partition, &total); err != nil {
				break
			}
			out = append(out, tr)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pg: traces by name: %w", err)
	}
	return out, total, nil
}

// TraceNames returns one page of the trace names in use, limit of them
// after the first offset, most recently seen first (ties by name), and how
// many distinct names there are. The page is empty (not nil) when offset
// is at or past that number (which is still returned) or limit is 0. The error wraps PostgreSQL's or
// the context's ("pg: trace names: ..."; a negative limit or offset is
// PostgreSQL's LIMIT/OFFSET error).
//
// One statement, so one round trip and one snapshot for the page and the
// count: the names are grouped once (a CTE read twice is materialized),
// then counted and paged.
func (s *Store) TraceNames(ctx context.Context, limit, offset int) ([]TraceNameSummary, int64, error) {
	// The count is the left side so that a row comes back, with the count,
	// when the page is empty; its name columns are then NULL.
	rows, err := s.pool.Query(ctx, `WITH g AS (SELECT n.name, count(*) AS traces,
			count(DISTINCT (t.partition_id, t.transaction_id)) AS messages, max(t.created_at) AS last_seen
			FROM queen.message_traces t, unnest(t.trace_names) AS n(name) GROUP BY n.name)
		SELECT p.name, p.traces, p.messages, p.last_seen, c.total
		FROM (SELECT count(DISTINCT name) AS total FROM g) c
		LEFT JOIN (SELECT * FROM g ORDER BY g.last_seen DESC, g.name LIMIT $1 OFFSET $2) p ON true
		ORDER BY p.last_seen DESC, p.name`, limit, offset)
	out := []TraceNameSummary{}
	var total int64
	if err == nil {
		for rows.Next() {
			if rows.RawValues()[0] == nil { // no page: the count alone
				if err = rows.Scan(nil, nil, nil, nil, &total); err != nil {
					break
				}
				continue
			}
			var n TraceNameSummary
			if err = rows.Scan(&n.Name, &n.TraceCount, &n.MessageCount, &n.LastSeen, &total); err != nil {
				break
			}
			out = append(out, n)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pg: trace names: %w", err)
	}
	return out, total, nil
}
