package pg

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// QueueSummary is one queue in GET /api/v1/resources/queues. Counts are
// messages: Total stored, Pending past the queue-mode cursor, Processing
// under a live queue-mode lease.
type QueueSummary struct {
	ID         uuid.UUID
	Name       string
	Namespace  string
	Task       string
	CreatedAt  time.Time
	Partitions int
	Total      int64
	Pending    int64
	Processing int64
}

// ListQueues summarises every queue, by name.
func (s *Store) ListQueues(ctx context.Context) ([]QueueSummary, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.id, q.name, q.namespace, q.task, q.created_at,
		count(p.id),
		coalesce(sum((SELECT coalesce(sum(sg.last_offset - sg.base_offset + 1), 0) FROM queen.segments sg WHERE sg.partition_id = p.id)), 0)::bigint,
		coalesce(sum(p.next_offset - coalesce(c.cursor_offset, 0)), 0)::bigint,
		coalesce(sum(CASE WHEN c.lease_expires_at > now() THEN c.lease_end - c.cursor_offset + 1 ELSE 0 END), 0)::bigint
		FROM queen.queues q
		LEFT JOIN queen.partitions p ON p.queue_id = q.id
		LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $1
		GROUP BY q.id ORDER BY q.name`, QueueModeGroup)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []QueueSummary
	for rows.Next() {
		var q QueueSummary
		var id pgtype.UUID
		if err := rows.Scan(&id, &q.Name, &q.Namespace, &q.Task, &q.CreatedAt, &q.Partitions, &q.Total, &q.Pending, &q.Processing); err != nil {
			return nil, err
		}
		q.ID = id.Bytes
		out = append(out, q)
	}
	return out, rows.Err()
}

// PartitionDetail is one partition of GET /api/v1/resources/queues/:q.
// Depth is how many messages are stored; NextOffset the offset the next
// message gets; Lag the messages past each consumer group's cursor.
type PartitionDetail struct {
	ID         uuid.UUID
	Name       string
	CreatedAt  time.Time
	NextOffset int64
	Depth      int64
	Pending    int64 // queue mode
	Processing int64 // queue mode, under a live lease
	DeadLetter int64
	Oldest     *time.Time
	Newest     *time.Time
	Lag        map[string]int64
}

// QueueDetail is GET /api/v1/resources/queues/:q.
type QueueDetail struct {
	QueueSummary
	Options    QueueOptions
	Partitions []PartitionDetail
}

// ErrQueueNotFound is returned for a queue that does not exist.
var ErrQueueNotFound = errors.New("pg: queue not found")

// GetQueue describes one queue with its partitions (ErrQueueNotFound).
func (s *Store) GetQueue(ctx context.Context, name string) (*QueueDetail, error) {
	var d QueueDetail
	var id pgtype.UUID
	o := &d.Options
	err := s.pool.QueryRow(ctx, `SELECT id, name, namespace, task, created_at, lease_time, retry_limit,
		delayed_processing, window_buffer, retention_enabled, retention_seconds, completed_retention_seconds,
		max_wait_time_seconds, encryption_enabled, priority, max_size, retry_delay, ttl, dead_letter_queue,
		dlq_after_max_retries, dedup_window_seconds FROM queen.queues WHERE name = $1`, name).Scan(
		&id, &d.Name, &d.Namespace, &d.Task, &d.CreatedAt, &o.LeaseTime, &o.RetryLimit, &o.DelayedProcessing,
		&o.WindowBuffer, &o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
		&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.Priority, &o.MaxSize, &o.RetryDelay, &o.TTL,
		&o.DeadLetterQueue, &o.DLQAfterMaxRetries, &o.DedupWindowSeconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrQueueNotFound
	}
	if err != nil {
		return nil, err
	}
	d.ID = id.Bytes
	rows, err := s.pool.Query(ctx, `SELECT p.id, p.name, p.created_at, p.next_offset,
		coalesce((SELECT sum(sg.last_offset - sg.base_offset + 1) FROM queen.segments sg WHERE sg.partition_id = p.id), 0)::bigint,
		(SELECT min(created_at) FROM queen.segments sg WHERE sg.partition_id = p.id),
		(SELECT max(created_at) FROM queen.segments sg WHERE sg.partition_id = p.id),
		(SELECT count(*) FROM queen.dead_letters dl WHERE dl.partition_id = p.id)
		FROM queen.partitions p WHERE p.queue_id = $1 ORDER BY p.name`, d.ID)
	if err != nil {
		return nil, err
	}
	index := map[uuid.UUID]int{}
	for rows.Next() {
		var p PartitionDetail
		var pid pgtype.UUID
		if err := rows.Scan(&pid, &p.Name, &p.CreatedAt, &p.NextOffset, &p.Depth, &p.Oldest, &p.Newest, &p.DeadLetter); err != nil {
			rows.Close()
			return nil, err
		}
		p.ID = pid.Bytes
		p.Lag = map[string]int64{}
		p.Pending = p.NextOffset // queue mode without a cursor yet
		index[p.ID] = len(d.Partitions)
		d.Partitions = append(d.Partitions, p)
		d.Total += p.Depth
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	d.Partitions2Lag(ctx, s, index)
	d.QueueSummary.Partitions = len(d.Partitions)
	for _, p := range d.Partitions {
		d.Pending += p.Pending
		d.Processing += p.Processing
	}
	return &d, nil
}

// Partitions2Lag fills per-group lag and queue-mode counts from the cursors.
func (d *QueueDetail) Partitions2Lag(ctx context.Context, s *Store, index map[uuid.UUID]int) {
	rows, err := s.pool.Query(ctx, `SELECT c.partition_id, c.consumer_group, p.next_offset - c.cursor_offset,
		CASE WHEN c.lease_expires_at > now() THEN c.lease_end - c.cursor_offset + 1 ELSE 0 END
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id WHERE p.queue_id = $1`, d.ID)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var pid pgtype.UUID
		var group string
		var lag, processing int64
		if rows.Scan(&pid, &group, &lag, &processing) != nil {
			return
		}
		i, ok := index[pid.Bytes]
		if !ok {
			continue
		}
		p := &d.Partitions[i]
		p.Lag[group] = lag
		if group == QueueModeGroup {
			p.Pending, p.Processing = lag, processing
		}
	}
}

// DeleteQueue deletes a queue with its partitions, messages, cursors, dead
// letters and dedup entries; it reports whether the queue existed.
func (s *Store) DeleteQueue(ctx context.Context, name string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM queen.queues WHERE name = $1`, name)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	for k := range s.partIDs {
		if k.queue == name {
			delete(s.partIDs, k)
		}
	}
	s.mu.Unlock()
	return tag.RowsAffected() > 0, nil
}

// GroupSummary is one (consumer group, queue) of GET /api/v1/consumer-groups.
type GroupSummary struct {
	Name              string
	Queue             string
	Members           int // live leases
	PartitionsWithLag int
	TotalLag          int64
	MaxTimeLagSeconds float64
	SubscriptionMode  string
	SubscriptionFrom  *time.Time
	CreatedAt         *time.Time
}

// ListGroups lists every consumer group per queue (queue mode included).
func (s *Store) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.consumer_group, q.name,
		count(*) FILTER (WHERE c.lease_expires_at > now()),
		count(*) FILTER (WHERE p.next_offset > c.cursor_offset),
		coalesce(sum(greatest(p.next_offset - c.cursor_offset, 0)), 0)::bigint,
		coalesce(max(CASE WHEN p.next_offset > c.cursor_offset
			THEN extract(epoch FROM now() - coalesce(c.last_consumed_at, c.created_at)) END), 0)::float8,
		g.subscription_mode, g.subscription_from, g.created_at
		FROM queen.consumer_cursors c
		JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.consumer_groups g ON g.queue_id = q.id AND g.consumer_group = c.consumer_group
		GROUP BY c.consumer_group, q.name, g.subscription_mode, g.subscription_from, g.created_at
		ORDER BY c.consumer_group, q.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []GroupSummary
	for rows.Next() {
		var g GroupSummary
		var mode *string
		if err := rows.Scan(&g.Name, &g.Queue, &g.Members, &g.PartitionsWithLag, &g.TotalLag, &g.MaxTimeLagSeconds,
			&mode, &g.SubscriptionFrom, &g.CreatedAt); err != nil {
			return nil, err
		}
		if mode != nil {
			g.SubscriptionMode = *mode
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// GroupPartition is one cursor of GET /api/v1/consumer-groups/:group.
type GroupPartition struct {
	Queue          string
	Partition      string
	LeaseID        *uuid.UUID
	LeaseActive    bool
	LastConsumedAt *time.Time
	TotalConsumed  int64
	Cursor         int64
	OffsetLag      int64
	TimeLagSeconds float64
}

// GetGroup lists a consumer group's cursors across queues.
func (s *Store) GetGroup(ctx context.Context, group string) ([]GroupPartition, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.name, p.name, c.lease_id, coalesce(c.lease_expires_at > now(), false),
		c.last_consumed_at, c.total_consumed, c.cursor_offset, greatest(p.next_offset - c.cursor_offset, 0),
		CASE WHEN p.next_offset > c.cursor_offset THEN extract(epoch FROM now() - coalesce(c.last_consumed_at, c.created_at)) ELSE 0 END::float8
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE c.consumer_group = $1 ORDER BY q.name, p.name`, group)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []GroupPartition
	for rows.Next() {
		var g GroupPartition
		var lease pgtype.UUID
		if err := rows.Scan(&g.Queue, &g.Partition, &lease, &g.LeaseActive, &g.LastConsumedAt, &g.TotalConsumed,
			&g.Cursor, &g.OffsetLag, &g.TimeLagSeconds); err != nil {
			return nil, err
		}
		if lease.Valid {
			id := uuid.UUID(lease.Bytes)
			g.LeaseID = &id
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// DeleteGroup deletes a consumer group's cursors and subscription, on one
// queue or (queue "") on all; the group then starts over by its
// subscription mode on its next pop. It returns how many cursors went,
// whether subscription metadata was deleted, and the names of the queues
// it touched (so that the caller can wake pops waiting on them).
func (s *Store) DeleteGroup(ctx context.Context, group, queue string) (int64, bool, []string, error) {
	var cursors, meta int64
	touched := map[string]bool{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		clear(touched)
		rows, err := tx.Query(ctx, `DELETE FROM queen.consumer_cursors c USING queen.partitions p, queen.queues q
			WHERE c.partition_id = p.id AND p.queue_id = q.id AND c.consumer_group = $1 AND ($2 = '' OR q.name = $2)
			RETURNING q.name`, group, queue)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		cursors = int64(len(names))
		for _, n := range names {
			touched[n] = true
		}
		rows, err = tx.Query(ctx, `DELETE FROM queen.consumer_groups g USING queen.queues q
			WHERE g.queue_id = q.id AND g.consumer_group = $1 AND ($2 = '' OR q.name = $2)
			RETURNING q.name`, group, queue)
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		meta = int64(len(names))
		for _, n := range names {
			touched[n] = true
		}
		return err
	})
	if err != nil {
		return 0, false, nil, fmt.Errorf("pg: delete group: %w", err)
	}
	queues := make([]string, 0, len(touched))
	for n := range touched {
		queues = append(queues, n)
	}
	sort.Strings(queues)
	return cursors, meta > 0, queues, nil
}

// Seek moves a group's existing cursors on a queue (partition "" = all):
// toEnd to the end; otherwise to the first message committed after at
// (messages committed at or before at count as consumed), or the start when
// there are none. Leases are released. It returns how many cursors moved.
func (s *Store) Seek(ctx context.Context, group, queue, partition string, toEnd bool, at time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE queen.consumer_cursors c SET
		cursor_offset = CASE WHEN $4 THEN p.next_offset ELSE coalesce(
			(SELECT min(sg.base_offset) FROM queen.segments sg WHERE sg.partition_id = p.id AND sg.created_at > $5),
			p.next_offset) END,
		lease_id = NULL, lease_expires_at = NULL, lease_end = NULL, acked = '{}', retry_count = 0
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE c.partition_id = p.id AND c.consumer_group = $1 AND q.name = $2 AND ($3 = '' OR p.name = $3)`,
		group, queue, partition, toEnd, at)
	if err != nil {
		return 0, fmt.Errorf("pg: seek: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeadLetter is one row of GET /api/v1/dlq; Payload is nil when the
// message's segment is gone.
type DeadLetter struct {
	Message      StoredMessage
	Group        string
	Error        string
	RetryCount   int
	FailedAt     time.Time
	PayloadFound bool
}

// ListDeadLetters returns dead letters, newest first, filtered by queue
// and group when not "", with limit/offset paging.
func (s *Store) ListDeadLetters(ctx context.Context, queue, group string, limit, offset int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT d.partition_id, q.name, p.name, d.consumer_group, d.msg_offset, d.message_id,
			d.transaction_id, coalesce(d.error, ''), d.retry_count, d.failed_at
			FROM queen.dead_letters d JOIN queen.partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR d.consumer_group = $2)
			ORDER BY d.id DESC LIMIT $3 OFFSET $4`, queue, group, limit, offset)
		if err != nil {
			return err
		}
		for rows.Next() {
			var d DeadLetter
			var pid, mid pgtype.UUID
			var txid []byte
			if err := rows.Scan(&pid, &d.Message.Queue, &d.Message.Partition, &d.Group, &d.Message.Offset, &mid, &txid,
				&d.Error, &d.RetryCount, &d.FailedAt); err != nil {
				rows.Close()
				return err
			}
			d.Message.PartitionID, d.Message.ID, d.Message.TransactionID = pid.Bytes, mid.Bytes, string(txid)
			out = append(out, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range out {
			m := &out[i].Message
			msgs, err := fetch(ctx, tx, m.PartitionID, m.Offset, m.Offset)
			if err != nil {
				return err
			}
			if len(msgs) == 1 {
				one := []Message{msgs[0].Message}
				if err := s.decrypt(one); err != nil {
					return err
				}
				msgs[0].Message = one[0]
				q, p := m.Queue, m.Partition
				*m = msgs[0]
				m.Queue, m.Partition = q, p
				out[i].PayloadFound = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pg: dlq: %w", err)
	}
	return out, nil
}

// retentionLockKey makes one broker at a time run a retention pass.
const retentionLockKey = 737001

// RetentionPass deletes expired segments (whole segments: a segment goes
// when its newest message qualifies), at most limit per rule, and returns
// how many it deleted. Rules per queue: retentionEnabled with
// retentionSeconds > 0 deletes segments older than that; retentionEnabled
// with completedRetentionSeconds > 0 deletes segments older than that which
// every consumer group of the partition has consumed; maxWaitTimeSeconds > 0
// deletes segments older than that whether consumed or not. The dedup
// sidecar is not touched (its window is separate, spec/producing.md).
func (s *Store) RetentionPass(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(retentionLockKey)).Scan(&got); err != nil || !got {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM queen.segments s WHERE (s.partition_id, s.base_offset) IN (
			SELECT sg.partition_id, sg.base_offset FROM queen.segments sg
			JOIN queen.partitions p ON p.id = sg.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE (q.retention_enabled AND q.retention_seconds > 0
			       AND sg.created_at < now() - make_interval(secs => q.retention_seconds))
			   OR (q.max_wait_time_seconds > 0
			       AND sg.created_at < now() - make_interval(secs => q.max_wait_time_seconds))
			   OR (q.retention_enabled AND q.completed_retention_seconds > 0
			       AND sg.created_at < now() - make_interval(secs => q.completed_retention_seconds)
			       AND EXISTS (SELECT 1 FROM queen.consumer_cursors c WHERE c.partition_id = p.id)
			       AND sg.last_offset < (SELECT min(c.cursor_offset) FROM queen.consumer_cursors c WHERE c.partition_id = p.id))
			LIMIT $1)`, limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pg: retention: %w", err)
	}
	return n, nil
}
