package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Admin summaries: the backlog (depth) of a queue for one consumer group,
// the system overview, the per-namespace and per-task rollups and the
// partition list (GET /api/v1/resources/queues/:q/depth, /overview,
// /namespaces, /tasks, /partitions; docs/api.md, "Queues").
//
// Every count is computed live from the tables, by watermark arithmetic
// per partition, never by reading messages or summing segments:
//
//	first    = base_offset of the partition's oldest stored segment
//	           (one primary-key probe), or next_offset when none is stored
//	total    = next_offset - first                 messages stored
//	start    = the group's cursor_offset; without a cursor, where the group
//	           would start (startOffset: 0, or its subscription time)
//	pending  = max(next_offset - max(start, first), 0)
//	processing = the stored span of a live lease
//	           (lease_end - max(cursor_offset, first) + 1), at most pending
//
// Offsets are dense and retention deletes whole segments from the old end
// of a partition, so first..next_offset-1 are exactly the stored messages
// and the counts are exact. Messages retention removed before a group read
// them are not pending: no pop can deliver them any more. The resource
// routes (/resources/queues, /queues/:q), the status routes and the
// consumer-group routes count the same way (backlogLateralSQL, pendingSQL,
// cursorLagSQL).
// Deleted messages (DELETE /api/v1/messages/:p/:t, tombstones)
// are subtracted from each figure: the tombstones at offsets >= first
// (total), >= max(start, first) (pending) and in the lease's span
// (processing), counted by one range scan of the tombstones' primary key
// per partition (deletedCountsSQL). The cost is O(partitions) index
// probes, plus, for depth only, one bounded segment probe per partition a
// named group with a "new"/"timestamp" subscription has not consumed yet.

// QueueDepth is one consumer group's backlog in one queue
// (GET /api/v1/resources/queues/:q/depth), partitions by name.
type QueueDepth struct {
	Queue      string
	Group      string
	Partitions []PartitionDepth
}

// PartitionDepth is one partition of a QueueDepth. Pending is how many
// stored messages are past the group's position; Processing how many of
// them are under the group's live lease (≤ Pending).
type PartitionDepth struct {
	Name       string
	Pending    int64
	Processing int64
}

// QueueDepth returns the backlog of group (QueueModeGroup for queue mode)
// in every partition of queue, or ErrQueueNotFound. A partition where the
// group has no cursor yet counts from where the group's first pop there
// would start: the beginning for queue mode, a group without subscription
// metadata or with mode "all"; else the first segment committed at or after
// its subscription time (nothing pending when there is none), as
// startOffset decides.
func (s *Store) QueueDepth(ctx context.Context, queue, group string) (*QueueDepth, error) {
	var qid pgtype.UUID
	err := s.pool.QueryRow(ctx, `SELECT id FROM queen.queues WHERE name = $1`, queue).Scan(&qid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrQueueNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT p.name, b.pending, b.processing
		FROM queen.partitions p
		LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $2
		LEFT JOIN queen.consumer_groups g ON g.queue_id = p.queue_id AND g.consumer_group = $2 AND $2 <> $4
		CROSS JOIN `+firstOffsetLateralSQL+` f
		CROSS JOIN LATERAL (SELECT coalesce(c.cursor_offset, CASE WHEN g.subscription_mode <> $3 AND g.subscription_from IS NOT NULL
			THEN coalesce((SELECT min(sg.base_offset) FROM queen.segments sg
				WHERE sg.partition_id = p.id AND sg.created_at >= g.subscription_from), p.next_offset)
			ELSE 0 END) AS start) st
		CROSS JOIN `+deletedCountsSQL("f.first", "greatest(st.start, f.first)")+` del
		CROSS JOIN `+backlogLateralSQL("p.next_offset", "f.first", "st.start", leasedSQL("f.first"), "del.pending",
		"del.leased")+` b
		WHERE p.queue_id = $1 ORDER BY p.name`, qid, group, SubscribeAll, QueueModeGroup)
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	defer rows.Close()
	d := &QueueDepth{Queue: queue, Group: group, Partitions: []PartitionDepth{}}
	for rows.Next() {
		var p PartitionDepth
		if err := rows.Scan(&p.Name, &p.Pending, &p.Processing); err != nil {
			return nil, fmt.Errorf("pg: queue depth: %w", err)
		}
		d.Partitions = append(d.Partitions, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	return d, nil
}

// WorstQueueDepth is the depth of queue when no group is named (Queen's
// getQueueDepth without a group): per partition, the largest backlog of
// any consumer group that consumes the queue (has a cursor or subscription
// metadata there, queue mode included when it has cursors), with that
// group's processing count. A queue nobody consumes answers queue mode's
// depth (every stored message pending). Group is "" in the result.
// ErrQueueNotFound for an unknown queue.
func (s *Store) WorstQueueDepth(ctx context.Context, queue string) (*QueueDepth, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.consumer_group FROM queen.consumer_cursors c
		JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1
		UNION SELECT g.consumer_group FROM queen.consumer_groups g JOIN queen.queues q ON q.id = g.queue_id WHERE q.name = $1
		ORDER BY 1`, queue)
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	if len(groups) == 0 {
		groups = []string{QueueModeGroup}
	}
	var worst *QueueDepth
	for _, g := range groups {
		d, err := s.QueueDepth(ctx, queue, g)
		if err != nil {
			return nil, err
		}
		if worst == nil {
			worst = d
			continue
		}
		for i, p := range d.Partitions { // same partitions, by name, in one queue
			if i < len(worst.Partitions) && worst.Partitions[i].Name == p.Name && p.Pending > worst.Partitions[i].Pending {
				worst.Partitions[i] = p
			}
		}
	}
	worst.Group = ""
	return worst, nil
}

// firstOffsetSQL is a partition's first stored offset (alias p for
// queen.partitions): one probe of the segments' primary key.
const firstOffsetSQL = `coalesce((SELECT sg.base_offset FROM queen.segments sg WHERE sg.partition_id = p.id
	ORDER BY sg.base_offset LIMIT 1), p.next_offset)`

// firstOffsetLateralSQL is a LATERAL subquery (alias it) with one column,
// first: firstOffsetSQL. OFFSET 0 keeps PostgreSQL from pulling the
// subquery up into the query around it, which would copy the probe into
// every expression that reads first (four probes a partition in
// partitionCountsSQL, three a cursor in ListGroups) instead of running it
// once a row.
const firstOffsetLateralSQL = `LATERAL (SELECT ` + firstOffsetSQL + ` AS first OFFSET 0)`

// pendingSQL is the package comment's pending less the deleted messages,
// as an SQL expression: how many stored, undeleted messages a group has
// at or past its position. next, first and start are SQL expressions for
// the partition's next_offset, its first stored offset (firstOffsetSQL)
// and the group's position (its cursor_offset, or where it would start);
// deleted counts the tombstones at offsets >= max(start, first). Counting
// from max(start, first), not from start, leaves out the messages
// retention deleted before the group read them: no pop can deliver them.
// Every pending and lag figure (QueueDepth, the listings, the lag of
// the consumer-group routes) is this expression, through
// backlogLateralSQL where processing is wanted too.
func pendingSQL(next, first, start, deleted string) string {
	return `(greatest(` + next + ` - greatest(` + start + `, ` + first + `), 0) - ` + deleted + `)`
}

// backlogLateralSQL is a LATERAL subquery (alias it) with the package
// comment's pending and processing less the deleted messages, as columns
// pending (pendingSQL) and processing (the lease's undeleted span, at
// most pending). Its arguments are SQL expressions: next, first and start
// as pendingSQL takes them; leased the stored offsets a live lease spans
// (leasedSQL, 0 without one); delPending the tombstones at offsets >=
// max(start, first) and delLeased those under the lease (deletedCountsSQL's
// pending and leased). It is the one definition of both figures:
// QueueDepth and partitionCountsSQL read them from here. pending is
// computed once a row (the OFFSET 0 fence keeps PostgreSQL from pulling
// the inner subquery up and copying the expression into processing).
func backlogLateralSQL(next, first, start, leased, delPending, delLeased string) string {
	return `LATERAL (SELECT bl.pending, least(greatest(` + leased + ` - ` + delLeased + `, 0), bl.pending) AS processing
		FROM (SELECT ` + pendingSQL(next, first, start, delPending) + ` AS pending OFFSET 0) bl)`
}

// leasedSQL is how many stored offsets a live lease of cursor c (alias c,
// possibly a LEFT JOIN's NULLs: 0) spans, an SQL expression: from
// max(cursor_offset, first) to lease_end, first an SQL expression for the
// partition's first stored offset (firstOffsetSQL). Retention may delete
// segments under a live lease; their offsets are not processing.
func leasedSQL(first string) string {
	return `CASE WHEN c.lease_expires_at > now() THEN greatest(c.lease_end - greatest(c.cursor_offset, ` + first + `) + 1, 0)
		ELSE 0 END`
}

// cursorLagSQL is a LATERAL subquery (alias it) over a partition (alias p)
// and one consumer group's cursor on it (alias c, a row, not a LEFT
// JOIN's NULLs): column lag, how many stored, undeleted messages are at or
// past the cursor (pendingSQL), and deleted, the tombstones among the
// stored offsets at or past it (0 when none of its stored messages is
// deleted). Per cursor it costs one probe of the segments' primary key
// and one range scan of the tombstones' (which finds nothing in one index
// descent when the partition has no tombstone there), each run once
// however often the query reads lag and deleted (the OFFSET 0 fences, as
// in firstOffsetLateralSQL).
var cursorLagSQL = `LATERAL (SELECT d.deleted, ` + pendingSQL("p.next_offset", "d.first", "c.cursor_offset", "d.deleted") + ` AS lag
	FROM (SELECT f.first, ` + deletedFromSQL("p.id", "greatest(c.cursor_offset, f.first)") + ` AS deleted
		FROM ` + firstOffsetLateralSQL + ` f OFFSET 0) d)`

// partitionCountsSQL selects every partition (matching where, a condition
// on alias p, or "true") with its queue-mode counts: id, queue_id, name,
// created_at, last_message_at, next_offset, total, pending, processing.
// Deleted messages (tombstones) are not counted. $1 must be QueueModeGroup.
func partitionCountsSQL(where string) string {
	return `SELECT x.id, x.queue_id, x.name, x.created_at, x.last_message_at, x.next_offset,
		x.next_offset - x.first - x.del_stored AS total, b.pending, b.processing
		FROM (SELECT p.id, p.queue_id, p.name, p.created_at, p.last_message_at, p.next_offset, f.first,
			coalesce(c.cursor_offset, 0) AS start,
			` + leasedSQL("f.first") + ` AS leased,
			del.stored AS del_stored, del.pending AS del_pending, del.leased AS del_leased
			FROM queen.partitions p
			LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $1
			CROSS JOIN ` + firstOffsetLateralSQL + ` f
			CROSS JOIN ` + deletedCountsSQL("f.first", "greatest(coalesce(c.cursor_offset, 0), f.first)") + ` del
			WHERE ` + where + `) x
		CROSS JOIN ` + backlogLateralSQL("x.next_offset", "x.first", "x.start", "x.leased", "x.del_pending", "x.del_leased") + ` b`
}

// MessageCounts are the queue-mode message counts of a set of partitions:
// Total stored, Pending past the queue-mode cursor (a partition never
// popped in queue mode: all stored), Processing under a live queue-mode
// lease (part of Pending).
type MessageCounts struct {
	Total      int64
	Pending    int64
	Processing int64
}

// Overview is GET /api/v1/resources/overview.
type Overview struct {
	Queues     int64
	Partitions int64
	// Namespaces and Tasks count the distinct non-empty names queues carry.
	Namespaces int64
	Tasks      int64
	// ConsumerGroups counts distinct named consumer groups (those with a
	// cursor or subscription metadata on some queue; queue mode is not one).
	ConsumerGroups int64
	Messages       MessageCounts
	// DeadLetters counts dead-letter records of every group.
	DeadLetters int64
}

// Overview counts queues, partitions, namespaces, tasks, named consumer
// groups, messages (queue mode, see MessageCounts) and dead letters, in one
// snapshot.
func (s *Store) Overview(ctx context.Context) (*Overview, error) {
	var o Overview
	m := &o.Messages
	err := s.pool.QueryRow(ctx, `WITH pc AS (`+partitionCountsSQL("true")+`)
		SELECT (SELECT count(*) FROM queen.queues),
			(SELECT count(DISTINCT namespace) FROM queen.queues WHERE namespace <> ''),
			(SELECT count(DISTINCT task) FROM queen.queues WHERE task <> ''),
			(SELECT count(*) FROM (SELECT consumer_group FROM queen.consumer_cursors WHERE consumer_group <> $1
				UNION SELECT consumer_group FROM queen.consumer_groups WHERE consumer_group <> $1) g),
			(SELECT count(*) FROM queen.dead_letters),
			count(*), coalesce(sum(total), 0)::bigint, coalesce(sum(pending), 0)::bigint,
			coalesce(sum(processing), 0)::bigint
		FROM pc`, QueueModeGroup).Scan(&o.Queues, &o.Namespaces, &o.Tasks, &o.ConsumerGroups, &o.DeadLetters,
		&o.Partitions, &m.Total, &m.Pending, &m.Processing)
	if err != nil {
		return nil, fmt.Errorf("pg: overview: %w", err)
	}
	return &o, nil
}

// LabelSummary is one namespace or task of GET /api/v1/resources/namespaces
// or /tasks: how many queues carry it, their partitions and message counts.
type LabelSummary struct {
	Name       string
	Queues     int64
	Partitions int64
	Messages   MessageCounts
}

// NamespaceSummaries summarises the queues of each non-empty namespace, by
// name.
func (s *Store) NamespaceSummaries(ctx context.Context) ([]LabelSummary, error) {
	return s.labelSummaries(ctx, "namespace")
}

// TaskSummaries summarises the queues of each non-empty task, by name.
func (s *Store) TaskSummaries(ctx context.Context) ([]LabelSummary, error) {
	return s.labelSummaries(ctx, "task")
}

// labelSummaries groups queues by column ("namespace" or "task", never
// input).
func (s *Store) labelSummaries(ctx context.Context, column string) ([]LabelSummary, error) {
	rows, err := s.pool.Query(ctx, `WITH pc AS (`+partitionCountsSQL("true")+`)
		SELECT q.`+column+`, count(DISTINCT q.id), count(pc.id), coalesce(sum(pc.total), 0)::bigint,
			coalesce(sum(pc.pending), 0)::bigint, coalesce(sum(pc.processing), 0)::bigint
		FROM queen.queues q LEFT JOIN pc ON pc.queue_id = q.id
		WHERE q.`+column+` <> '' GROUP BY q.`+column+` ORDER BY q.`+column, QueueModeGroup)
	if err != nil {
		return nil, fmt.Errorf("pg: %s summaries: %w", column, err)
	}
	defer rows.Close()
	out := []LabelSummary{}
	for rows.Next() {
		var l LabelSummary
		if err := rows.Scan(&l.Name, &l.Queues, &l.Partitions, &l.Messages.Total, &l.Messages.Pending,
			&l.Messages.Processing); err != nil {
			return nil, fmt.Errorf("pg: %s summaries: %w", column, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pg: %s summaries: %w", column, err)
	}
	return out, nil
}

// PartitionSummary is one partition of GET /api/v1/resources/partitions.
type PartitionSummary struct {
	ID            uuid.UUID
	Queue         string
	Name          string
	Namespace     string
	Task          string
	CreatedAt     time.Time
	LastMessageAt *time.Time
	NextOffset    int64
	Messages      MessageCounts
	// DeadLetters counts the partition's dead-letter records (every group).
	DeadLetters int64
}

// PartitionFilter selects partitions for ListPartitions: Queue "" means
// every queue; Limit and Offset page the list ordered by queue and
// partition name.
type PartitionFilter struct {
	Queue         string
	Limit, Offset int
}

// ListPartitions returns one page of the partitions matching f and how
// many match in all, in one snapshot; ErrQueueNotFound when f.Queue names
// no queue.
func (s *Store) ListPartitions(ctx context.Context, f PartitionFilter) ([]PartitionSummary, int64, error) {
	var out []PartitionSummary
	var total int64
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		out, total = []PartitionSummary{}, 0
		var qid pgtype.UUID // NULL: every queue
		if f.Queue != "" {
			err := tx.QueryRow(ctx, `SELECT id FROM queen.queues WHERE name = $1`, f.Queue).Scan(&qid)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrQueueNotFound
			}
			if err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM queen.partitions WHERE $1::uuid IS NULL OR queue_id = $1`,
			qid).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT pc.id, q.name, pc.name, q.namespace, q.task, pc.created_at, pc.last_message_at,
			pc.next_offset, pc.total, pc.pending, pc.processing,
			(SELECT count(*) FROM queen.dead_letters dl WHERE dl.partition_id = pc.id)
			FROM (`+partitionCountsSQL("$2::uuid IS NULL OR p.queue_id = $2")+`) pc
			JOIN queen.queues q ON q.id = pc.queue_id
			ORDER BY q.name, pc.name LIMIT $3 OFFSET $4`, QueueModeGroup, qid, f.Limit, f.Offset)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p PartitionSummary
			var id pgtype.UUID
			m := &p.Messages
			if err := rows.Scan(&id, &p.Queue, &p.Name, &p.Namespace, &p.Task, &p.CreatedAt, &p.LastMessageAt,
				&p.NextOffset, &m.Total, &m.Pending, &m.Processing, &p.DeadLetters); err != nil {
				return err
			}
			p.ID = id.Bytes
			out = append(out, p)
		}
		return rows.Err()
	})
	if errors.Is(err, ErrQueueNotFound) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("pg: list partitions: %w", err)
	}
	return out, total, nil
}
