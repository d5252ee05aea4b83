package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Status serves the reads behind Queen's dashboard routes (GET
// /api/v1/status*, /api/v1/analytics/*). Every figure is computed live from
// the tables the broker writes anyway (queues, partitions, segments,
// consumer_cursors, dead_letters) or from PostgreSQL's own statistics
// views: this broker keeps no stats rollup and no metrics history table,
// so nothing here is ever stale and nothing is estimated.
//
// Message counts are queue mode's view, as in the resource routes
// (partitionCountsSQL): Total stored, Pending past the queue-mode cursor
// (Processing included), Processing under a live queue-mode lease,
// Completed = Total - Pending (stored messages below the cursor). Deleted
// messages (tombstones) are in none of them, nor in StoredPerBucket or the
// leases' BatchSize.
type Status struct{ st *Store }

// NewStatus returns the status reads of st.
func NewStatus(st *Store) *Status { return &Status{st: st} }

// StatusFilter narrows a status read to queues by name, namespace and
// task; an empty field matches every queue.
type StatusFilter struct {
	Queue, Namespace, Task string
}

// queueFilterSQL is the condition on alias q (queen.queues) for a
// StatusFilter passed as $2 (queue), $3 (namespace), $4 (task).
const queueFilterSQL = `($2::text = '' OR q.name = $2) AND ($3::text = '' OR q.namespace = $3) AND ($4::text = '' OR q.task = $4)`

// StatusQueue is one queue of GET /api/v1/status/queues with its
// queue-mode counts (see Status).
type StatusQueue struct {
	ID                     uuid.UUID
	Name, Namespace, Task  string
	CreatedAt              time.Time
	Partitions             int
	Total, Pending, Active int64 // Active: processing
}

// Completed is the number of stored messages below the queue-mode cursor.
func (q StatusQueue) Completed() int64 { return q.Total - q.Pending }

// Queues returns the queues matching f, newest first (Queen's order), from
// offset, at most limit of them, with their counts.
func (s *Status) Queues(ctx context.Context, f StatusFilter, limit, offset int) ([]StatusQueue, error) {
	out, err := queueCounts(ctx, s.st.pool, `SELECT q.id, q.name, q.namespace, q.task, q.created_at FROM queen.queues q
			WHERE `+queueFilterSQL+` ORDER BY q.created_at DESC, q.name LIMIT $5 OFFSET $6`, "qs.created_at DESC, qs.name",
		QueueModeGroup, f.Queue, f.Namespace, f.Task, limit, offset)
	if err != nil {
		return nil, fmt.Errorf("pg: status queues: %w", err)
	}
	return out, nil
}

// queueCounts runs qs, a SELECT of queues (id, name, namespace, task,
// created_at of queen.queues; $1 is QueueModeGroup, its other parameters
// are args after it), and returns them in order (an ORDER BY of qs's
// columns) with queue mode's counts over their partitions
// (partitionCountsSQL): the one statement of /status/queues and of the
// resource routes' queue list.
func queueCounts(ctx context.Context, db dbtx, qs, order string, args ...any) ([]StatusQueue, error) {
	rows, err := db.Query(ctx, `WITH qs AS (`+qs+`),
		pc AS (`+partitionCountsSQL("p.queue_id IN (SELECT id FROM qs)")+`)
		SELECT qs.id, qs.name, qs.namespace, qs.task, qs.created_at, count(pc.id),
			coalesce(sum(pc.total), 0)::bigint, coalesce(sum(pc.pending), 0)::bigint, coalesce(sum(pc.processing), 0)::bigint
		FROM qs LEFT JOIN pc ON pc.queue_id = qs.id
		GROUP BY qs.id, qs.name, qs.namespace, qs.task, qs.created_at
		ORDER BY `+order, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StatusQueue
	for rows.Next() {
		var q StatusQueue
		var id pgtype.UUID
		if err := rows.Scan(&id, &q.Name, &q.Namespace, &q.Task, &q.CreatedAt, &q.Partitions, &q.Total, &q.Pending, &q.Active); err != nil {
			return nil, err
		}
		q.ID = id.Bytes
		out = append(out, q)
	}
	return out, rows.Err()
}

// StatusPartition is one partition of GET /api/v1/status/queues/:queue,
// queue mode's view. Oldest is the commit time of the segment holding the
// first pending (undeleted) message (nil when nothing is pending); Newest is
// partitions.last_message_at, the commit time (now()) of the latest
// projection transaction that stored messages into the partition, not the
// acceptance time of its last message (a push buffered during an outage is
// stored, and stamped, when the projector reaches it); TotalConsumed and
// LastConsumedAt come from the queue-mode cursor (0 and nil without one).
type StatusPartition struct {
	ID                              uuid.UUID
	Name                            string
	CreatedAt                       time.Time
	Total, Pending, Active, DeadLtr int64
	TotalConsumed                   int64
	LastConsumedAt, Oldest, Newest  *time.Time
}

// StatusQueueDetail is GET /api/v1/status/queues/:queue.
type StatusQueueDetail struct {
	ID                    uuid.UUID
	Name, Namespace, Task string
	CreatedAt             time.Time
	Options               QueueOptions
	Partitions            []StatusPartition
}

// QueueDetail returns one queue with its options and partitions (by name),
// or ErrQueueNotFound.
func (s *Status) QueueDetail(ctx context.Context, name string) (*StatusQueueDetail, error) {
	h, err := s.st.queueHead(ctx, name)
	if errors.Is(err, ErrQueueNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("pg: status queue: %w", err)
	}
	d := &StatusQueueDetail{ID: h.id, Name: h.name, Namespace: h.namespace, Task: h.task, CreatedAt: h.createdAt,
		Options: h.options}
	rows, err := s.st.pool.Query(ctx, `WITH pc AS (`+partitionCountsSQL("p.queue_id = $2")+`)
		SELECT pc.id, pc.name, pc.created_at, pc.total, pc.pending, pc.processing,
			(SELECT count(*) FROM queen.dead_letters dl WHERE dl.partition_id = pc.id AND dl.consumer_group = $1),
			coalesce(c.total_consumed, 0), c.last_consumed_at, pc.last_message_at,
			CASE WHEN pc.pending > 0 THEN `+firstLiveAtSQL("pc.id", "coalesce(c.cursor_offset, 0)", "false")+` END
		FROM pc LEFT JOIN queen.consumer_cursors c ON c.partition_id = pc.id AND c.consumer_group = $1
		ORDER BY pc.name`, QueueModeGroup, d.ID)
	if err != nil {
		return nil, fmt.Errorf("pg: status queue partitions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p StatusPartition
		var pid pgtype.UUID
		if err := rows.Scan(&pid, &p.Name, &p.CreatedAt, &p.Total, &p.Pending, &p.Active, &p.DeadLtr,
			&p.TotalConsumed, &p.LastConsumedAt, &p.Newest, &p.Oldest); err != nil {
			return nil, fmt.Errorf("pg: status queue partitions: %w", err)
		}
		p.ID = pid.Bytes
		d.Partitions = append(d.Partitions, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: status queue partitions: %w", err)
	}
	return d, nil
}

// QueueMessages returns a page of a queue's messages, newest first, with
// their queue-mode status (ListMessages over the whole stored history, no
// time window), or ErrQueueNotFound.
func (s *Status) QueueMessages(ctx context.Context, queue string, limit, offset int) (*MessageList, error) {
	var exists bool
	if err := s.st.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.queues WHERE name = $1)`, queue).Scan(&exists); err != nil {
		return nil, fmt.Errorf("pg: status queue messages: %w", err)
	}
	if !exists {
		return nil, ErrQueueNotFound
	}
	return s.st.ListMessages(ctx, MessageFilter{Queue: queue, Group: QueueModeGroup,
		From: time.Unix(0, 0), To: time.Now().Add(time.Hour), Limit: limit, Offset: offset})
}

// Bucket is one time bucket of stored messages: Messages is how many
// messages the segments committed in [Start, Start+width) hold.
type Bucket struct {
	Start    time.Time
	Messages int64
}

// StoredPerBucket counts the messages committed to PostgreSQL between from
// and to (inclusive) per bucket of width (aligned to the Unix epoch, so
// minutes, hours and days start on UTC boundaries), for the queues
// matching f, deleted messages (tombstones) not counted. Only buckets
// holding messages are returned, in time order.
// Counts are by segment commit time (the projector's or the transaction
// route's commit, seconds at most after acceptance) and cover messages
// retention has not deleted yet.
func (s *Status) StoredPerBucket(ctx context.Context, f StatusFilter, from, to time.Time, width time.Duration) ([]Bucket, error) {
	secs := width.Seconds()
	if secs < 1 {
		secs = 1
	}
	// The deleted messages are counted apart, from the tombstones (rare),
	// each placed in its segment by one primary-key probe; a tombstone is
	// written after its message's commit, so those deleted before from
	// cannot belong to the range.
	rows, err := s.st.pool.Query(ctx, `WITH stored AS (
			SELECT to_timestamp(floor(extract(epoch FROM sg.created_at) / $1) * $1) AS bucket,
				sum(sg.last_offset - sg.base_offset + 1)::bigint AS n
			FROM queen.segments sg
			JOIN queen.partitions p ON p.id = sg.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE sg.created_at >= $5 AND sg.created_at <= $6 AND `+queueFilterSQL+`
			GROUP BY 1),
		deleted AS (
			SELECT to_timestamp(floor(extract(epoch FROM sg.created_at) / $1) * $1) AS bucket, count(*) AS n
			FROM queen.tombstones t
			JOIN queen.partitions p ON p.id = t.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			CROSS JOIN LATERAL (SELECT sg.created_at, sg.last_offset FROM queen.segments sg
				WHERE sg.partition_id = t.partition_id AND sg.base_offset <= t.msg_offset
				ORDER BY sg.base_offset DESC LIMIT 1) sg
			WHERE t.deleted_at >= $5 AND sg.last_offset >= t.msg_offset
				AND sg.created_at >= $5 AND sg.created_at <= $6 AND `+queueFilterSQL+`
			GROUP BY 1)
		SELECT s.bucket, s.n - coalesce(d.n, 0) FROM stored s LEFT JOIN deleted d ON d.bucket = s.bucket
		WHERE s.n > coalesce(d.n, 0) ORDER BY 1`, secs, f.Queue, f.Namespace, f.Task, from, to)
	if err != nil {
		return nil, fmt.Errorf("pg: stored per bucket: %w", err)
	}
	defer rows.Close()
	var out []Bucket
	for rows.Next() {
		var b Bucket
		if err := rows.Scan(&b.Start, &b.Messages); err != nil {
			return nil, fmt.Errorf("pg: stored per bucket: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: stored per bucket: %w", err)
	}
	return out, nil
}

// LeaseSummary counts the live leases of every consumer group: Active
// (partition, group) pairs under a live lease, the distinct Partitions
// they are on, BatchSize (stored messages they cover, cursor to lease end,
// less the deleted ones: leasedSQL) and
// Acked (of those, acknowledged out of order and waiting for the cursor).
type LeaseSummary struct {
	Active, Partitions, BatchSize, Acked int64
}

// Leases returns the LeaseSummary now.
func (s *Status) Leases(ctx context.Context) (LeaseSummary, error) {
	var l LeaseSummary
	err := s.st.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT c.partition_id),
			coalesce(sum(`+leasedSQL("f.first")+`
				- `+deletedInSQL("c.partition_id", "greatest(c.cursor_offset, f.first)", "c.lease_end")+`), 0)::bigint,
			coalesce(sum(cardinality(c.acked)), 0)::bigint
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
		CROSS JOIN `+firstOffsetLateralSQL+` f
		WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()`).
		Scan(&l.Active, &l.Partitions, &l.BatchSize, &l.Acked)
	if err != nil {
		return l, fmt.Errorf("pg: lease summary: %w", err)
	}
	return l, nil
}

// ErrorCount is one dead-letter reason and how many dead letters carry it.
type ErrorCount struct {
	Error string
	Count int64
}

// DeadLetterSummary counts every group's dead letters: Total records, the
// distinct Partitions they are in, and the five most frequent reasons.
type DeadLetterSummary struct {
	Total, Partitions int64
	TopErrors         []ErrorCount
}

// DeadLetters returns the DeadLetterSummary of the queues matching f.
func (s *Status) DeadLetters(ctx context.Context, f StatusFilter) (*DeadLetterSummary, error) {
	// $1 is unused here but keeps queueFilterSQL's numbering.
	const from = ` FROM queen.dead_letters dl JOIN queen.partitions p ON p.id = dl.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE $1::text IS NOT NULL AND ` + queueFilterSQL
	d := &DeadLetterSummary{TopErrors: []ErrorCount{}}
	if err := s.st.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT dl.partition_id)`+from,
		"", f.Queue, f.Namespace, f.Task).Scan(&d.Total, &d.Partitions); err != nil {
		return nil, fmt.Errorf("pg: dead-letter summary: %w", err)
	}
	rows, err := s.st.pool.Query(ctx, `SELECT `+deadLetterErrorSQL("dl.error")+`, count(*)`+from+`
		GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5`, "", f.Queue, f.Namespace, f.Task)
	if err != nil {
		return nil, fmt.Errorf("pg: dead-letter summary: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e ErrorCount
		if err := rows.Scan(&e.Error, &e.Count); err != nil {
			return nil, fmt.Errorf("pg: dead-letter summary: %w", err)
		}
		d.TopErrors = append(d.TopErrors, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: dead-letter summary: %w", err)
	}
	return d, nil
}

// PoolStats are the connection pool's figures now: Max connections
// (QUEEN_PG_POOL_SIZE), Total open, Idle and Acquired (in use).
type PoolStats struct {
	Max, Total, Idle, Acquired int32
}

// Pool returns the pool's PoolStats; it does not touch PostgreSQL.
func (s *Status) Pool() PoolStats {
	st := s.st.pool.Stat()
	return PoolStats{Max: st.MaxConns(), Total: st.TotalConns(), Idle: st.IdleConns(), Acquired: st.AcquiredConns()}
}

// postgresStatsSQL builds GET /api/v1/analytics/postgres-stats from
// PostgreSQL's statistics views, for the broker's schema (queen). Ratios
// are percentages with two decimals, null when there was no access yet.
const postgresStatsSQL = `SELECT jsonb_build_object(
	'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
	'database', current_database(),
	'databaseCache', coalesce((SELECT jsonb_build_object('database', datname, 'diskReads', blks_read, 'cacheHits', blks_hit,
			'cacheHitRatio', round(blks_hit::numeric / nullif(blks_hit + blks_read, 0) * 100, 2))
		FROM pg_stat_database WHERE datname = current_database()), '{}'::jsonb),
	'tableCache', coalesce((SELECT jsonb_agg(jsonb_build_object('schema', schemaname, 'table', relname,
			'diskReads', heap_blks_read, 'cacheHits', heap_blks_hit,
			'cacheHitRatio', round(heap_blks_hit::numeric / nullif(heap_blks_hit + heap_blks_read, 0) * 100, 2))
			ORDER BY heap_blks_read DESC, relname)
		FROM pg_statio_user_tables WHERE schemaname = 'queen'), '[]'::jsonb),
	'indexCache', coalesce((SELECT jsonb_agg(x ORDER BY (x->>'diskReads')::bigint DESC, x->>'index') FROM (
			SELECT jsonb_build_object('schema', schemaname, 'table', relname, 'index', indexrelname,
				'diskReads', idx_blks_read, 'cacheHits', idx_blks_hit,
				'cacheHitRatio', round(idx_blks_hit::numeric / nullif(idx_blks_hit + idx_blks_read, 0) * 100, 2)) AS x
			FROM pg_statio_user_indexes WHERE schemaname = 'queen' ORDER BY idx_blks_read DESC LIMIT 20) i), '[]'::jsonb),
	'cacheSummary', jsonb_build_object(
		'tables', (SELECT jsonb_build_object('diskReads', coalesce(sum(heap_blks_read), 0), 'cacheHits', coalesce(sum(heap_blks_hit), 0),
				'hitRatio', round(sum(heap_blks_hit)::numeric / nullif(sum(heap_blks_hit) + sum(heap_blks_read), 0) * 100, 2))
			FROM pg_statio_user_tables WHERE schemaname = 'queen'),
		'indexes', (SELECT jsonb_build_object('diskReads', coalesce(sum(idx_blks_read), 0), 'cacheHits', coalesce(sum(idx_blks_hit), 0),
				'hitRatio', round(sum(idx_blks_hit)::numeric / nullif(sum(idx_blks_hit) + sum(idx_blks_read), 0) * 100, 2))
			FROM pg_statio_user_indexes WHERE schemaname = 'queen')),
	'deadTuples', coalesce((SELECT jsonb_agg(x) FROM (
			SELECT jsonb_build_object('schema', schemaname, 'table', relname, 'deadTuples', n_dead_tup, 'liveTuples', n_live_tup,
				'deadPercentage', round(n_dead_tup::numeric / nullif(n_live_tup, 0) * 100, 2),
				'lastVacuum', to_char(last_vacuum AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
				'lastAutovacuum', to_char(last_autovacuum AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) AS x
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_dead_tup > 0 ORDER BY n_dead_tup DESC LIMIT 15) d), '[]'::jsonb),
	'hotUpdates', coalesce((SELECT jsonb_agg(x) FROM (
			SELECT jsonb_build_object('schema', schemaname, 'table', relname, 'totalUpdates', n_tup_upd, 'hotUpdates', n_tup_hot_upd,
				'hotUpdatePercentage', round(n_tup_hot_upd::numeric / nullif(n_tup_upd, 0) * 100, 2)) AS x
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_tup_upd > 0 ORDER BY n_tup_upd DESC LIMIT 15) h), '[]'::jsonb),
	'activeQueries', coalesce((SELECT jsonb_agg(x) FROM (
			SELECT jsonb_build_object('pid', pid, 'duration', extract(epoch FROM now() - query_start), 'state', state,
				'query', left(query, 200), 'waitEventType', wait_event_type, 'waitEvent', wait_event) AS x
			FROM pg_stat_activity WHERE state <> 'idle' AND query_start < now() - interval '1 second'
				AND pid <> pg_backend_pid() AND datname = current_database() ORDER BY query_start LIMIT 10) a), '[]'::jsonb),
	'autovacuumStatus', coalesce((SELECT jsonb_agg(x) FROM (
			SELECT jsonb_build_object('table', relname,
				'lastAutovacuum', to_char(last_autovacuum AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
				'deadTuples', n_dead_tup, 'autovacuumCount', autovacuum_count, 'autoanalyzeCount', autoanalyze_count) AS x
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_dead_tup > 1000 ORDER BY n_dead_tup DESC LIMIT 10) v), '[]'::jsonb),
	'bufferConfig', coalesce((SELECT jsonb_build_object('sharedBuffers', setting,
			'sharedBuffersSize', pg_size_pretty(setting::bigint * current_setting('block_size')::bigint))
		FROM pg_settings WHERE name = 'shared_buffers'), '{}'::jsonb),
	'bufferUsage', '[]'::jsonb,
	'tableSizes', coalesce((SELECT jsonb_agg(x) FROM (
			SELECT jsonb_build_object('table', c.relname,
				'totalSize', pg_size_pretty(pg_total_relation_size(c.oid)), 'totalSizeBytes', pg_total_relation_size(c.oid),
				'tableSize', pg_size_pretty(pg_relation_size(c.oid)), 'tableSizeBytes', pg_relation_size(c.oid),
				'indexSize', pg_size_pretty(pg_indexes_size(c.oid)), 'indexSizeBytes', pg_indexes_size(c.oid)) AS x
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'queen' AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 20) t), '[]'::jsonb)
)`

// PostgresStats returns PostgreSQL's own figures for the broker's schema as
// one JSON object (the shape of GET /api/v1/analytics/postgres-stats):
// cache hit ratios of the database, tables and indexes, dead tuples, HOT
// updates, statements running for over a second, autovacuum state,
// shared_buffers and table sizes. bufferUsage is always empty: it would
// need the pg_buffercache extension, which the broker does not install.
func (s *Status) PostgresStats(ctx context.Context) (json.RawMessage, error) {
	var b []byte
	if err := s.st.pool.QueryRow(ctx, postgresStatsSQL).Scan(&b); err != nil {
		return nil, fmt.Errorf("pg: postgres stats: %w", err)
	}
	return b, nil
}
