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
	return readDepth(rows, &QueueDepth{Queue: queue, Group: group})
}

// readDepth reads rows of (partition name, pending, processing) into d's
// Partitions (empty, not nil, when there are none) and closes rows.
func readDepth(rows pgx.Rows, d *QueueDepth) (*QueueDepth, error) {
	defer rows.Close()
	d.Partitions = []PartitionDepth{}
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
// getQueueDepth without a group): per partition, the backlog of the
// consuming group furthest behind there, with that group's processing
// count. The groups consuming the queue are those with a cursor on one of
// its partitions or subscription metadata for it (queue mode included when
// it has cursors); a group's position on a partition is its cursor there,
// or where its first pop there would start (QueueDepth), and counts from
// the partition's first stored offset when below it. The group furthest
// behind holds the smallest position (among equal positions, the first
// group by name): a group's pending is the stored, undeleted messages at
// or past its position, so no group has more. A queue nobody consumes
// answers queue mode's depth (every stored message pending). Group is ""
// in the result. ErrQueueNotFound for an unknown queue.
//
// One statement (worstDepthSQL) reads each cursor of the queue once; it
// used to compute QueueDepth for every group, one statement per group:
// 3,000 groups on 20 partitions took 1.5-2.8 s (docs/decisions.md, "The
// worst depth is one statement").
func (s *Store) WorstQueueDepth(ctx context.Context, queue string) (*QueueDepth, error) {
	var qid pgtype.UUID
	err := s.pool.QueryRow(ctx, `SELECT id FROM queen.queues WHERE name = $1`, queue).Scan(&qid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrQueueNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	rows, err := s.pool.Query(ctx, worstDepthSQL, qid, SubscribeAll, QueueModeGroup)
	if err != nil {
		return nil, fmt.Errorf("pg: queue depth: %w", err)
	}
	return readDepth(rows, &QueueDepth{Queue: queue})
}

// worstDepthSQL selects, per partition of queue $1 by name, the name,
// pending and processing of the group furthest behind there
// (WorstQueueDepth); $2 is SubscribeAll, $3 QueueModeGroup.
//
//	parts     the queue's partitions with their first stored offset
//	cur       every cursor on them with its position, max(cursor, first)
//	curbest   per partition the smallest cursor position, first group by name
//	lacking   the groups without a cursor on some partition (fewer cursors
//	          than partitions, or only subscription metadata), with the
//	          subscription time they start from (NULL: the beginning)
//	lackpairs those groups by partition they have no cursor on
//	lackzero  per partition the first such group by name starting from the
//	          beginning (position first)
//	lacktime  per partition the such group with the earliest subscription
//	          time (then by name), its position the first segment committed
//	          at or after it, as QueueDepth's start
//	pick      per partition the candidate of the three with the smallest
//	          position, then by name; none when nobody consumes the queue
//
// and then the pick's pending and processing as QueueDepth counts them
// (its cursor's lease; a group without a cursor there has none), position
// 0 when there is no pick (queue mode's depth). Its cost is one read of
// the queue's cursors (by the primary key's partition_id prefix), a few
// hash aggregates over them and, per partition, O(1) index probes; the
// lacking groups, usually none, add a hash probe each per partition and
// the earliest one's segment probe. Among groups whose positions differ
// only by deleted messages (tombstones), which have the same pending, it
// names the one further behind where the per-group loop it replaced named
// the first by name: processing may then differ.
var worstDepthSQL = `WITH parts AS MATERIALIZED (
		SELECT p.id, p.name, p.next_offset, f.first FROM queen.partitions p CROSS JOIN ` + firstOffsetLateralSQL + ` f
		WHERE p.queue_id = $1),
	cur AS MATERIALIZED (
		SELECT c.partition_id, c.consumer_group, greatest(c.cursor_offset, parts.first) AS pos
		FROM parts JOIN queen.consumer_cursors c ON c.partition_id = parts.id),
	curmin AS (SELECT partition_id, min(pos) AS pos FROM cur GROUP BY partition_id),
	curbest AS (SELECT cur.partition_id, cur.pos, min(cur.consumer_group) AS grp
		FROM cur JOIN curmin USING (partition_id, pos) GROUP BY cur.partition_id, cur.pos),
	lacking AS MATERIALIZED (
		SELECT n.grp, CASE WHEN n.grp <> $3 AND cg.subscription_mode <> $2 THEN cg.subscription_from END AS sub_from
		FROM (SELECT consumer_group, count(*) AS n FROM cur GROUP BY consumer_group) k
		FULL JOIN (SELECT consumer_group, subscription_mode, subscription_from FROM queen.consumer_groups
			WHERE queue_id = $1) cg ON cg.consumer_group = k.consumer_group
		CROSS JOIN LATERAL (SELECT coalesce(k.consumer_group, cg.consumer_group) AS grp) n
		WHERE coalesce(k.n, 0) < (SELECT count(*) FROM parts)),
	lackpairs AS MATERIALIZED (
		SELECT parts.id AS partition_id, l.grp, l.sub_from FROM parts CROSS JOIN lacking l
		WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.partition_id = parts.id AND cur.consumer_group = l.grp)),
	lackzero AS (SELECT partition_id, min(grp) AS grp FROM lackpairs WHERE sub_from IS NULL GROUP BY partition_id),
	lacktime AS (SELECT DISTINCT ON (partition_id) partition_id, grp, sub_from FROM lackpairs
		WHERE sub_from IS NOT NULL ORDER BY partition_id, sub_from, grp),
	pick AS (
		SELECT parts.id, parts.name, parts.next_offset, parts.first, w.grp, w.start, w.cursor
		FROM parts
		LEFT JOIN curbest b ON b.partition_id = parts.id
		LEFT JOIN lackzero lz ON lz.partition_id = parts.id
		LEFT JOIN lacktime lt ON lt.partition_id = parts.id
		LEFT JOIN LATERAL (SELECT x.grp, x.start, x.cursor FROM (VALUES
				(b.grp, b.pos, true),
				(lz.grp, parts.first, false),
				(lt.grp, CASE WHEN lt.grp IS NOT NULL THEN greatest(coalesce((SELECT min(sg.base_offset)
					FROM queen.segments sg WHERE sg.partition_id = parts.id AND sg.created_at >= lt.sub_from),
					parts.next_offset), parts.first) END, false)
			) x(grp, start, cursor)
			WHERE x.grp IS NOT NULL ORDER BY x.start, x.grp LIMIT 1) w ON true)
	SELECT p.name, b.pending, b.processing
	FROM pick p
	LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = p.grp AND p.cursor
	CROSS JOIN LATERAL (SELECT coalesce(c.cursor_offset, p.start, 0) AS start) st
	CROSS JOIN ` + deletedCountsSQL("p.first", "greatest(st.start, p.first)") + ` del
	CROSS JOIN ` + backlogLateralSQL("p.next_offset", "p.first", "st.start", leasedSQL("p.first"), "del.pending",
	"del.leased") + ` b
	ORDER BY p.name`

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
