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
// queue mode's, as partitionCountsSQL makes them: Total stored, Pending
// past the queue-mode cursor (stored messages only: those retention
// deleted are not pending), Processing under a live queue-mode lease
// (part of Pending). Deleted messages (tombstones) are in none of them.
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

// QueueFilter selects one page of GET /api/v1/resources/queues.
type QueueFilter struct {
	// Limit is the most queues answered, at least 1 (the route's default
	// is 100, its maximum 1000); Offset is how many queues of the order
	// (by name) to skip.
	Limit, Offset int
}

// ListQueues summarises one page (f.Limit queues after the first
// f.Offset) of the queues, by name, and returns how many queues there are
// in all: the counts of /api/v1/resources/overview and /status/queues,
// per queue (O(partitions) index probes, see pg/admin.go), for the page's
// queues only. Unpaged, 20,000 queues answered 4.3 MB in 0.8-1 s. Queue
// names do not change, so consecutive pages are disjoint and together
// list every queue, except that a queue made or deleted between two pages
// shifts the ones after it by one.
func (s *Store) ListQueues(ctx context.Context, f QueueFilter) ([]QueueSummary, int64, error) {
	var total int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queen.queues`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("pg: list queues: %w", err)
	}
	qs, err := queueCounts(ctx, s.pool, `SELECT q.id, q.name, q.namespace, q.task, q.created_at FROM queen.queues q
		ORDER BY q.name LIMIT $2 OFFSET $3`, "qs.name", QueueModeGroup, f.Limit, f.Offset)
	if err != nil {
		return nil, 0, fmt.Errorf("pg: list queues: %w", err)
	}
	out := make([]QueueSummary, len(qs))
	for i, q := range qs {
		out[i] = QueueSummary{ID: q.ID, Name: q.Name, Namespace: q.Namespace, Task: q.Task, CreatedAt: q.CreatedAt,
			Partitions: q.Partitions, Total: q.Total, Pending: q.Pending, Processing: q.Active}
	}
	return out, total, nil
}

// PartitionDetail is one partition of GET /api/v1/resources/queues/:q.
// NextOffset is the offset the next message gets; Depth how many messages
// are stored; Pending and Processing queue mode's counts (partitionCountsSQL);
// Lag the stored messages at or past each consumer group's cursor
// (cursorLagSQL), for the first GetQueue's lagGroups groups by name with a
// cursor on the partition, LagTruncated true when more groups have one.
// Messages retention deleted and deleted messages (tombstones) are in none
// of the counts.
type PartitionDetail struct {
	ID         uuid.UUID
	Name       string
	CreatedAt  time.Time
	NextOffset int64
	Depth      int64
	Pending    int64 // queue mode
	Processing int64 // queue mode, under a live lease
	DeadLetter int64
	// Oldest and Newest are the commit times of the partition's first and
	// last stored segments (one probe of the segments' primary key each;
	// a scan for min/max read every segment), nil without any.
	Oldest       *time.Time
	Newest       *time.Time
	Lag          map[string]int64
	LagTruncated bool
}

// Completed is how many stored messages are below the queue-mode cursor.
func (p PartitionDetail) Completed() int64 { return p.Depth - p.Pending }

// QueueDetail is GET /api/v1/resources/queues/:q.
type QueueDetail struct {
	QueueSummary
	Options    QueueOptions
	Partitions []PartitionDetail
}

// ErrQueueNotFound is returned for a queue that does not exist.
var ErrQueueNotFound = errors.New("pg: queue not found")

// queueHeadRow is a queue's row of queen.queues: what GetQueue and
// Status.QueueDetail show of the queue itself.
type queueHeadRow struct {
	id                    uuid.UUID
	name, namespace, task string
	createdAt             time.Time
	options               QueueOptions
}

// queueHead reads queue name's row; ErrQueueNotFound when there is none,
// else the query's error unwrapped.
func (s *Store) queueHead(ctx context.Context, name string) (*queueHeadRow, error) {
	var h queueHeadRow
	var id pgtype.UUID
	o := &h.options
	err := s.pool.QueryRow(ctx, `SELECT id, name, namespace, task, created_at, lease_time, retry_limit,
		delayed_processing, window_buffer, retention_enabled, retention_seconds, completed_retention_seconds,
		max_wait_time_seconds, encryption_enabled, priority, max_size, retry_delay, ttl, dead_letter_queue,
		dlq_after_max_retries, dedup_window_seconds FROM queen.queues WHERE name = $1`, name).Scan(
		&id, &h.name, &h.namespace, &h.task, &h.createdAt, &o.LeaseTime, &o.RetryLimit, &o.DelayedProcessing,
		&o.WindowBuffer, &o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
		&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.Priority, &o.MaxSize, &o.RetryDelay, &o.TTL,
		&o.DeadLetterQueue, &o.DLQAfterMaxRetries, &o.DedupWindowSeconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrQueueNotFound
	}
	if err != nil {
		return nil, err
	}
	h.id = id.Bytes
	return &h, nil
}

// GetQueue describes one queue with its partitions (ErrQueueNotFound),
// each partition's Lag holding at most lagGroups groups (0: none), the
// first by name, so that its cost does not grow with the number of groups
// (fillLag).
func (s *Store) GetQueue(ctx context.Context, name string, lagGroups int) (*QueueDetail, error) {
	var d QueueDetail
	h, err := s.queueHead(ctx, name)
	if err != nil {
		return nil, err
	}
	d.ID, d.Name, d.Namespace, d.Task, d.CreatedAt, d.Options = h.id, h.name, h.namespace, h.task, h.createdAt, h.options
	rows, err := s.pool.Query(ctx, `WITH pc AS (`+partitionCountsSQL("p.queue_id = $2")+`)
		SELECT pc.id, pc.name, pc.created_at, pc.next_offset, pc.total, pc.pending, pc.processing,
		(SELECT sg.created_at FROM queen.segments sg WHERE sg.partition_id = pc.id ORDER BY sg.base_offset LIMIT 1),
		(SELECT sg.created_at FROM queen.segments sg WHERE sg.partition_id = pc.id ORDER BY sg.base_offset DESC LIMIT 1),
		(SELECT count(*) FROM queen.dead_letters dl WHERE dl.partition_id = pc.id)
		FROM pc ORDER BY pc.name`, QueueModeGroup, d.ID)
	if err != nil {
		return nil, err
	}
	index := map[uuid.UUID]int{}
	for rows.Next() {
		var p PartitionDetail
		var pid pgtype.UUID
		if err := rows.Scan(&pid, &p.Name, &p.CreatedAt, &p.NextOffset, &p.Depth, &p.Pending, &p.Processing,
			&p.Oldest, &p.Newest, &p.DeadLetter); err != nil {
			rows.Close()
			return nil, err
		}
		p.ID = pid.Bytes
		p.Lag = map[string]int64{}
		index[p.ID] = len(d.Partitions)
		d.Partitions = append(d.Partitions, p)
		d.Total += p.Depth
		d.Pending += p.Pending
		d.Processing += p.Processing
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := s.fillLag(ctx, d.ID, d.Partitions, index, lagGroups); err != nil {
		return nil, err
	}
	d.QueueSummary.Partitions = len(d.Partitions)
	return &d, nil
}

// fillLag sets the Lag of parts (queue qid's partitions, index mapping a
// partition id to its place in parts) from the first limit cursors by
// group name on each (the stored, undeleted messages at or past the
// cursor, cursorLagSQL), and LagTruncated where a partition has more. Per
// partition it reads at most limit+1 cursors, in the order of the
// cursors' primary key (partition_id, consumer_group): every cursor of
// every group made 3,000 groups on 20 partitions answer 1.0 MB in
// 0.24-0.8 s (docs/decisions.md, "The queue detail lists the first groups'
// lag").
func (s *Store) fillLag(ctx context.Context, qid uuid.UUID, parts []PartitionDetail, index map[uuid.UUID]int, limit int) error {
	rows, err := s.pool.Query(ctx, `SELECT p.id, c.consumer_group, l.lag
		FROM queen.partitions p
		CROSS JOIN LATERAL (SELECT c.consumer_group, c.cursor_offset FROM queen.consumer_cursors c
			WHERE c.partition_id = p.id ORDER BY c.consumer_group LIMIT $2) c
		CROSS JOIN `+cursorLagSQL+` l
		WHERE p.queue_id = $1 ORDER BY p.id, c.consumer_group`, qid, limit+1)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var pid pgtype.UUID
		var group string
		var lag int64
		if err := rows.Scan(&pid, &group, &lag); err != nil {
			return err
		}
		i, ok := index[pid.Bytes]
		if !ok {
			continue
		}
		if len(parts[i].Lag) == limit { // the limit+1st: there are more
			parts[i].LagTruncated = true
			continue
		}
		parts[i].Lag[group] = lag
	}
	return rows.Err()
}

// DeleteQueue deletes a queue with its partitions, messages, cursors, dead
// letters, dedup entries and message traces; it reports whether the queue
// existed.
func (s *Store) DeleteQueue(ctx context.Context, name string) (bool, error) {
	// Deleting the partitions cascades to segments, cursors, dead letters
	// and traces; the dedup sidecar has no foreign key (schema.sql), so its
	// entries are deleted by partition id. Order matters: the queue row is
	// locked first (a new partition's foreign-key check waits on it), the
	// partitions' delete then waits for projections holding their row
	// locks, and the sidecar delete, a later statement, sees what those
	// committed. So no entry outlives its partition.
	//
	// The queue's cursors are locked before its partitions are deleted: a
	// pop or ack locks a cursor and may then insert a dead letter, whose
	// foreign-key check waits on the partition row. Deleting the partitions
	// first would wait on that cursor while the ack waits on the partition:
	// a deadlock. The partitions are then locked in id order before their
	// delete (the order projection batches lock them in). A deadlock that
	// still happens is retried (withRetry).
	var existed bool
	deleteTx := func(tx pgx.Tx) error {
		existed = false
		var qid pgtype.UUID
		err := tx.QueryRow(ctx, `SELECT id FROM queen.queues WHERE name = $1 FOR UPDATE`, name).Scan(&qid)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		existed = true
		if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
			WHERE p.queue_id = $1 FOR UPDATE OF c`, qid); err != nil {
			return err
		}
		// The partitions are locked in id order, the order a projection
		// batch locks them in: deleted in scan order, they deadlocked with
		// batches of the same queue (each holding rows the other wanted).
		if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions WHERE queue_id = $1 ORDER BY id FOR UPDATE`, qid); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM queen.partitions WHERE queue_id = $1 RETURNING id`, qid)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
		if err != nil {
			return err
		}
		// queen.dedup_batches rows span queues: the deleted partitions' keys
		// expire with them (pg/dedup.go). An upgraded database's run layout
		// has a row per partition.
		if s.legacyRuns.Load() {
			if _, err := tx.Exec(ctx, `DELETE FROM queen.dedup_runs WHERE partition_id = ANY($1)`, ids); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM queen.dedup WHERE partition_id = ANY($1)`, ids); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM queen.queues WHERE id = $1`, qid)
		return err
	}
	err := withRetry(false, func() error { return pgx.BeginFunc(ctx, s.pool, deleteTx) })
	if err != nil {
		return false, fmt.Errorf("pg: delete queue %q: %w", name, err)
	}
	s.mu.Lock()
	s.partIDs.forgetQueue(name)
	s.mu.Unlock()
	return existed, nil
}

// timeLagSQL is a cursor's time lag in seconds (alias c for
// queen.consumer_cursors): how long ago the group last moved its cursor on
// the partition, or since the cursor was created if it never moved. Callers
// apply it only where the group has stored messages at or past the cursor
// (cursorLagSQL's lag > 0; else the time lag is 0). GET /api/v1/consumer-groups, .../consumer-groups/:group and
// .../consumer-groups/lagging all report this figure.
const timeLagSQL = `extract(epoch FROM now() - ` + cursorSinceSQL + `)`

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

// GroupFilter selects one page of GET /api/v1/consumer-groups.
type GroupFilter struct {
	// Queue, when not "", lists only the groups with a cursor on that
	// queue (the console's queue page).
	Queue string
	// Limit is the most (group, queue) entries answered, at least 1 (the
	// route's default is 100, its maximum 1000); Offset is how many
	// entries of the order (group, then queue name) to skip.
	Limit, Offset int
}

// groupsPageSQL is ListGroups' query, $1 limit, $2 offset, $3 the queue
// name when queueFilter. The costly part of an entry is the lag of each of
// its cursors (cursorLagSQL: a probe of the segments' primary key and one
// of the tombstones' per cursor), so it is computed for the page's entries
// only; unpaged, 3,000 groups on 20 partitions (60,000 cursors) computed
// it for every cursor, for a multi-megabyte answer. From the inside out:
//
//   - k: the page's (group, queue) keys, by group then queue name (a
//     total order: a queue name is unique), from the cursors' plain
//     columns (no lag), distinct, sorted, offset and limit applied.
//   - c: the cursors of those keys (a join of every cursor with the page's
//     keys; OFFSET 0 keeps PostgreSQL from computing the lag before that
//     join cuts the rows down).
//   - the lag per cursor of c, aggregated per key, and the key's
//     subscription (queen.consumer_groups).
//
// What remains proportional to the whole broker is reading every cursor's
// plain columns twice (the keys, then their cursors), not computing their
// lag.
func groupsPageSQL(queueFilter bool) string {
	where := ""
	if queueFilter {
		where = "WHERE q.name = $3"
	}
	return `SELECT c.consumer_group, c.queue_name,
		count(*) FILTER (WHERE c.lease_expires_at > now()),
		count(*) FILTER (WHERE l.lag > 0),
		coalesce(sum(l.lag), 0)::bigint,
		coalesce(max(CASE WHEN l.lag > 0 THEN ` + timeLagSQL + ` END), 0)::float8,
		g.subscription_mode, g.subscription_from, g.created_at
		FROM (SELECT c.partition_id, c.consumer_group, c.cursor_offset, c.lease_expires_at, c.last_consumed_at,
				c.created_at, k.queue_id, k.queue_name
			FROM (SELECT DISTINCT c.consumer_group, q.id AS queue_id, q.name AS queue_name
				FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
				JOIN queen.queues q ON q.id = p.queue_id ` + where + `
				ORDER BY c.consumer_group, q.name LIMIT $1 OFFSET $2) k
			JOIN queen.partitions p ON p.queue_id = k.queue_id
			JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = k.consumer_group
			OFFSET 0) c
		JOIN queen.partitions p ON p.id = c.partition_id
		CROSS JOIN ` + cursorLagSQL + ` l
		LEFT JOIN queen.consumer_groups g ON g.queue_id = c.queue_id AND g.consumer_group = c.consumer_group
		GROUP BY c.consumer_group, c.queue_name, g.subscription_mode, g.subscription_from, g.created_at
		ORDER BY c.consumer_group, c.queue_name`
}

// ListGroups lists one page (f.Limit entries after the first f.Offset) of
// the consumer groups per queue (queue mode included), by group name, then
// queue name; with f.Queue, only the entries of that queue. Lag is the
// stored, undeleted messages at or past each cursor (cursorLagSQL: neither
// those retention deleted nor tombstoned ones), summed over the partitions
// where the group has a cursor (Queen's get_consumer_groups_v1 counted the
// same partitions; docs/api.md, "Consumer groups and dead letters"). The
// order is by names, which do not change, so consecutive pages are
// disjoint and together list every entry, except that an entry made or
// deleted between two pages shifts the ones after it by one.
func (s *Store) ListGroups(ctx context.Context, f GroupFilter) ([]GroupSummary, error) {
	args := []any{f.Limit, f.Offset}
	if f.Queue != "" {
		args = append(args, f.Queue)
	}
	rows, err := s.pool.Query(ctx, groupsPageSQL(f.Queue != ""), args...)
	if err != nil {
		return nil, fmt.Errorf("pg: list groups: %w", err)
	}
	defer rows.Close()
	var out []GroupSummary
	for rows.Next() {
		var g GroupSummary
		var mode *string
		if err := rows.Scan(&g.Name, &g.Queue, &g.Members, &g.PartitionsWithLag, &g.TotalLag, &g.MaxTimeLagSeconds,
			&mode, &g.SubscriptionFrom, &g.CreatedAt); err != nil {
			return nil, fmt.Errorf("pg: list groups: %w", err)
		}
		if mode != nil {
			g.SubscriptionMode = *mode
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: list groups: %w", err)
	}
	return out, nil
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

// GetGroup lists a consumer group's cursors across queues; OffsetLag is
// the lag of ListGroups (cursorLagSQL).
func (s *Store) GetGroup(ctx context.Context, group string) ([]GroupPartition, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.name, p.name, c.lease_id, coalesce(c.lease_expires_at > now(), false),
		c.last_consumed_at, c.total_consumed, c.cursor_offset, l.lag,
		CASE WHEN l.lag > 0 THEN `+timeLagSQL+` ELSE 0 END::float8
		FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		CROSS JOIN `+cursorLagSQL+` l
		WHERE c.consumer_group = $1 ORDER BY q.name, p.name`, group)
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
		g.LeaseID = optUUID(lease)
		out = append(out, g)
	}
	return out, rows.Err()
}

// DeleteGroup deletes a consumer group's cursors on one queue or (queue "")
// on all queues: DELETE /api/v1/consumer-groups/:group[/queues/:queue]
// (docs/api.md, "Consumer groups and dead letters"). With deleteMetadata (the
// route's ?deleteMetadata, default true) the group's subscription metadata
// (queen.consumer_groups rows on the same queues) goes too, and the group's
// next pop subscribes afresh by the mode that pop sends. Without it the
// metadata stays, and the group starts over in every partition by its stored
// subscription (mode and start timestamp), as Queen's
// delete_consumer_group_v1 with p_delete_metadata=false did.
//
// It returns how many cursors were deleted, whether any metadata row was
// deleted (always false without deleteMetadata), and the sorted names of
// the queues it changed (so that the caller can wake pops waiting on them).
func (s *Store) DeleteGroup(ctx context.Context, group, queue string, deleteMetadata bool) (int64, bool, []string, error) {
	var cursors, meta int64
	touched := map[string]bool{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		clear(touched)
		cursors, meta = 0, 0
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
		if !deleteMetadata {
			return nil
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
	return cursors, meta > 0, sortedKeys(touched), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// UpdateSubscription moves a named consumer group's subscription start to
// at on every queue where the group has subscription metadata (a
// queen.consumer_groups row): POST /api/v1/consumer-groups/:group/subscription
// (docs/api.md, "Consumer groups and dead letters"; Queen's
// update_consumer_group_subscription_v1).
//
// Only where the group has no cursor yet does this change anything: there
// the group's first pop starts at the first message committed at or after
// at (see startOffset). Existing cursors are not moved (use seek for that),
// as in Queen, where the timestamp "only matters for partitions where the
// group has no cursor yet". This broker creates a cursor when the group
// first claims a partition, so that covers the partitions the group has
// not popped from yet, existing ones included, and partitions created
// later.
//
// A group subscribed with mode "all" has a metadata row here but no start
// time (Queen stored no row for it, so the call matched nothing there); its
// mode becomes "timestamp" so that the new start time takes effect, which
// is what the caller asked for. Modes "new" and "timestamp" keep their
// mode. Queue mode (__QUEUE_MODE__) has no metadata and always starts at
// the beginning, so it is never updated.
//
// It returns how many metadata rows were updated (one per queue) and the
// sorted names of those queues.
func (s *Store) UpdateSubscription(ctx context.Context, group string, at time.Time) (int64, []string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE queen.consumer_groups g SET subscription_from = $2,
		subscription_mode = CASE WHEN g.subscription_mode = $3 THEN $4 ELSE g.subscription_mode END
		FROM queen.queues q WHERE g.queue_id = q.id AND g.consumer_group = $1
		RETURNING q.name`, group, at, SubscribeAll, SubscribeTimestamp)
	if err != nil {
		return 0, nil, fmt.Errorf("pg: update subscription: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, nil, fmt.Errorf("pg: update subscription: %w", err)
	}
	sort.Strings(names)
	return int64(len(names)), names, nil
}

// LaggingPartition is one row of GET /api/v1/consumer-groups/lagging: a
// consumer group's cursor on a partition with messages past it.
type LaggingPartition struct {
	Group       string
	Queue       string
	Partition   string
	PartitionID uuid.UUID
	// LeaseID is the live lease on the partition for the group, if any.
	LeaseID *uuid.UUID
	// OffsetLag is how many stored messages are at or past the cursor
	// (cursorLagSQL): deleted ones (tombstones) and those retention
	// deleted are not counted.
	OffsetLag int64
	// TimeLagSeconds is timeLagSQL, truncated to whole seconds.
	TimeLagSeconds int64
	// OldestUnconsumed is when the first stored, undeleted message past
	// the cursor was committed: its segment's commit time, read by two
	// probes of the segments' primary key (nil when retention removed them
	// all).
	OldestUnconsumed *time.Time
	LastConsumedAt   *time.Time
}

// LaggingFilter selects one page of GET /api/v1/consumer-groups/lagging.
type LaggingFilter struct {
	// MinLagSeconds is the least time lag (TimeLagSeconds) a cursor must
	// have to be listed; 0 lists every cursor with stored messages past it.
	MinLagSeconds int
	// Limit is the most rows answered, at least 1 (the route's default is
	// 100, its maximum 1000); Offset is how many rows of the order to skip.
	Limit, Offset int
}

// cursorSinceSQL is when the group last moved its cursor c (alias c for
// queen.consumer_cursors) on the partition, or when the cursor was made if
// it never moved: the start of its time lag (timeLagSQL).
const cursorSinceSQL = `coalesce(c.last_consumed_at, c.created_at)`

// laggingPageSQL is LaggingPartitions' query, $1 minLagSeconds, $2 limit,
// $3 offset. The costly part of a row, its lag (cursorLagSQL: a probe of
// the segments' primary key and one of the tombstones') and the commit
// time of its first unconsumed message (firstLiveAtSQL: two more probes
// and a segment scan), is computed for the rows up to the page's end, not
// for every cursor; unpaged, that made the listing take 1 s at 60,000
// lagging cursors. From the inside out:
//
//   - The innermost subquery (alias c) takes the cursors that may
//     qualify, by their own columns and their partition's: moved (or made)
//     at least $1 seconds ago (the same as floor(timeLagSQL) >= $1, without
//     computing it), and not caught up (next_offset > cursor_offset,
//     without which the lag is 0). It sorts them in the answer's order:
//     since (cursorSinceSQL) ascending, which is time lag descending and,
//     unlike the time lag, the same from one request to the next, then
//     group, queue and partition name, a total order. Its ORDER BY keeps
//     PostgreSQL from pulling it up into the query around it.
//   - The page subquery (alias x) walks c in that order through nested
//     loops (no sort of its own), computes each row's lag, drops the rows
//     whose messages past the cursor are all deleted (lag 0), and stops
//     after offset + limit rows.
//   - The outer query computes the first unconsumed message's commit time
//     for the page's rows only, in the page's order (again no sort).
//
// What remains proportional to the whole broker is reading and sorting
// every cursor's plain columns: about 35 ms of the 50-70 ms a page of 100
// took at 60,000 lagging cursors, where the unpaged listing took 0.8-1 s
// (PostgreSQL 15, two shared cores). An
// index to read them in order would be on last_consumed_at, which every
// ack changes: cursor updates would no longer be HOT (schema.sql,
// queen.consumer_cursors). A deep page computes the lag of every row
// before it, at most what the whole listing cost.
var laggingPageSQL = `SELECT x.consumer_group, x.queue_name, x.partition_name, x.partition_id, x.lease_id, x.lag, x.time_lag,
		` + firstLiveAtSQL("x.partition_id", "x.cursor_offset", "x.deleted = 0") + `,
		x.last_consumed_at
	FROM (SELECT c.consumer_group, c.queue_name, c.partition_name, c.partition_id, c.since,
			CASE WHEN c.lease_expires_at > now() THEN c.lease_id END AS lease_id,
			l.lag, l.deleted, floor(` + timeLagSQL + `)::bigint AS time_lag, c.cursor_offset, c.last_consumed_at
		FROM (SELECT c.partition_id, c.consumer_group, c.cursor_offset, c.lease_id, c.lease_expires_at,
				c.last_consumed_at, c.created_at, ` + cursorSinceSQL + ` AS since,
				q.name AS queue_name, p.name AS partition_name
			FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE p.next_offset > c.cursor_offset AND ` + cursorSinceSQL + ` <= now() - make_interval(secs => $1)
			ORDER BY since, c.consumer_group, q.name, p.name) c
		JOIN queen.partitions p ON p.id = c.partition_id
		CROSS JOIN ` + cursorLagSQL + ` l
		WHERE l.lag > 0
		ORDER BY c.since, c.consumer_group, c.queue_name, c.partition_name
		LIMIT $2 OFFSET $3) x
	ORDER BY x.since, x.consumer_group, x.queue_name, x.partition_name`

// LaggingPartitions lists one page (f.Limit rows after the first f.Offset)
// of the cursors (every group, queue mode included) that have stored
// messages at or past them and a time lag of at least f.MinLagSeconds,
// largest time lag first: by when the cursor last moved (or was made),
// oldest first, then by group, queue and partition name. The
// lag figures are those of GetGroup. The order is fixed by when each
// cursor last moved, so consecutive pages are disjoint and together list
// every row as long as no listed cursor moves in between; one that does
// leaves the list or goes to its end, and the rows after its old place
// move up one, so that the next page may miss one row (and see the moved
// one again). laggingPageSQL says what a page costs.
func (s *Store) LaggingPartitions(ctx context.Context, f LaggingFilter) ([]LaggingPartition, error) {
	rows, err := s.pool.Query(ctx, laggingPageSQL, f.MinLagSeconds, f.Limit, f.Offset)
	if err != nil {
		return nil, fmt.Errorf("pg: lagging: %w", err)
	}
	defer rows.Close()
	out := []LaggingPartition{}
	for rows.Next() {
		var l LaggingPartition
		var pid, lease pgtype.UUID
		if err := rows.Scan(&l.Group, &l.Queue, &l.Partition, &pid, &lease, &l.OffsetLag, &l.TimeLagSeconds,
			&l.OldestUnconsumed, &l.LastConsumedAt); err != nil {
			return nil, fmt.Errorf("pg: lagging: %w", err)
		}
		l.PartitionID = pid.Bytes
		l.LeaseID = optUUID(lease)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: lagging: %w", err)
	}
	return out, nil
}

// Seek moves a group's existing cursors on a queue (partition "" = all):
// toEnd to the end; otherwise to the first message committed after at
// (messages committed at or before at count as consumed), or the end when
// none was: a cursor past that message moves backwards (a replay). Leases
// are released. It returns how many cursors moved (0 for a queue the group
// has no cursor on, or that does not exist).
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

// DeadLetterFilter selects dead letters for GET /api/v1/dlq. Empty strings
// and nil times do not filter. Queue, Partition and Group match names
// exactly; From and To bound the time the message was dead-lettered
// (failedAt), both inclusive. Limit and Offset page the newest-first list.
type DeadLetterFilter struct {
	Queue, Partition, Group string
	From, To                *time.Time
	Limit, Offset           int
}

// ListDeadLetters returns one page of the dead letters matching f, newest
// first, and the number of all dead letters matching f (the page's
// limit/offset ignored): the messages and total of GET /api/v1/dlq.
func (s *Store) ListDeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, int64, error) {
	var out []DeadLetter
	var total int64
	// One snapshot, so that total and the page agree.
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		out, total = nil, 0
		const from = ` FROM queen.dead_letters d JOIN queen.partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR p.name = $2) AND ($3 = '' OR d.consumer_group = $3)
			AND ($4::timestamptz IS NULL OR d.failed_at >= $4) AND ($5::timestamptz IS NULL OR d.failed_at <= $5)`
		args := []any{f.Queue, f.Partition, f.Group, f.From, f.To}
		if err := tx.QueryRow(ctx, `SELECT count(*)`+from, args...).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT d.partition_id, q.name, p.name, d.consumer_group, d.msg_offset, d.message_id,
			d.transaction_id, `+deadLetterErrorSQL("d.error")+`, d.retry_count, d.failed_at`+from+`
			ORDER BY d.id DESC LIMIT $6 OFFSET $7`, append(args, f.Limit, f.Offset)...)
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
		return nil, 0, fmt.Errorf("pg: dlq: %w", err)
	}
	return out, total, nil
}

// retentionLockKey makes one broker at a time run a retention pass.
const retentionLockKey = 737001

// RetentionPass deletes expired segments (whole segments: a segment goes when
// its newest message qualifies), at most limit per rule, and returns how many
// it deleted. Rules per queue: retentionEnabled with retentionSeconds > 0
// deletes segments older than that; retentionEnabled with
// completedRetentionSeconds > 0 deletes segments older than that which every
// consumer group of the partition has consumed; maxWaitTimeSeconds > 0
// deletes segments older than that whether consumed or not. The traces of the
// deleted messages go with them. The dedup window is separate
// (docs/decisions.md, "Retention"): the keys of deleted messages still inside
// their window are copied to queen.dedup (spillKeys, pg/dedup.go).
func (s *Store) RetentionPass(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(retentionLockKey)).Scan(&got); err != nil || !got {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM queen.segments s WHERE (s.partition_id, s.base_offset) IN (
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
			LIMIT $1)
			RETURNING s.partition_id, s.base_offset, coalesce((SELECT q.dedup_window_seconds FROM queen.partitions p
				JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = s.partition_id), 0),
				CASE WHEN s.created_at >= now() - make_interval(secs => $2::float8 + (SELECT q.dedup_window_seconds FROM queen.partitions p
				JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = s.partition_id)) THEN s.body END`, limit, spillGrace.Seconds())
		if err != nil {
			return err
		}
		var pids, spillPIDs []uuid.UUID
		var bases []int64
		var bodies [][]byte
		var windows []int32
		for rows.Next() {
			var pid pgtype.UUID
			var base int64
			var win int32
			var body []byte
			if err := rows.Scan(&pid, &base, &win, &body); err != nil {
				rows.Close()
				return err
			}
			pids = append(pids, pid.Bytes)
			if body != nil {
				spillPIDs, bases, bodies, windows = append(spillPIDs, pid.Bytes), append(bases, base), append(bodies, body), append(windows, win)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = int64(len(pids))
		if n == 0 {
			return nil
		}
		// The dedup window outlives the segment (docs/decisions.md,
		// "Retention"): the sidecar confirms a hit against the segment, so
		// the exact keys of messages still inside their window are kept in
		// queen.dedup.
		if err := spillKeys(ctx, tx, spillPIDs, bases, bodies, windows); err != nil {
			return err
		}
		// A message's traces go with the message: retention deletes whole
		// segments from a partition's old end, so the traces below its first
		// stored offset belong to messages no longer stored.
		_, err = tx.Exec(ctx, `DELETE FROM queen.message_traces t USING (
			SELECT p.id, coalesce((SELECT min(sg.base_offset) FROM queen.segments sg WHERE sg.partition_id = p.id), p.next_offset) AS first
			FROM queen.partitions p WHERE p.id = ANY($1)) f
			WHERE t.partition_id = f.id AND t.msg_offset < f.first`, pids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pg: retention: %w", err)
	}
	return n, nil
}
