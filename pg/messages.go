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

	"github.com/queenmq/queen-go/internal/binenc"
)

// Message browsing: GET /api/v1/messages (ListMessages) and
// GET /api/v1/messages/:partitionId/:transactionId (GetMessage), the
// read-only routes behind Queen's admin listMessages/getMessage
// (docs/api.md, "Messages and traces"). Nothing here writes.
//
// A message's status is judged for one consumer group (queue mode,
// QueueModeGroup, unless the caller names one) from that group's cursor on
// the message's partition, in this order:
//
//	dead_letter  the group has a dead_letters row for the message
//	completed    offset < cursor_offset
//	processing   cursor_offset <= offset <= lease_end under a live lease
//	             (lease_expires_at > now())
//	pending      anything else, also where the group has no cursor yet
//
// Messages acked out of order inside a live lease are still processing:
// if the lease lapses they are delivered again (docs/consume.md, "Lease expiry, retries, dead letters").
//
// Bounding the list. Messages live packed in segments (segment.go), so a
// list must decode segments, and the window is on the message's createdAt
// (its acceptance time, broker clock), which is not a column. A segment's
// created_at (its commit time, PostgreSQL clock) bounds the createdAt of
// every message in it from above: a message is accepted before the
// transaction that stores it starts. So ListMessages walks the segments of
// the matching partitions newest commit first (index segments_created_at,
// schema.sql) and stops as soon as it holds limit+offset messages all newer
// than the next segment's created_at + MessageClockSlack: no later segment
// can hold a newer one. It decodes a segment only when the segment can
// hold a message of the requested status (the group's cursor and lease
// give the status of whole offset ranges; dead letters are probed per
// segment) and its first message (read from the first bytes of the body)
// is not after the window. Segments committed before from - slack cannot
// hold a message of the window and are never read; segments committed more
// than MessageCommitGrace after to are not searched (a message that waited
// that long between acceptance and commit, e.g. buffered in the WAL during
// a PostgreSQL outage, is listed only by a window whose to is later).
// What is not bounded by limit+offset is the header scan (index order, 40
// bytes of body per segment): when few messages match (a rare status, a
// small partition among busy ones) it reads every segment header of the
// window, still decoding only the candidates.

// Message statuses (GET /api/v1/messages "status").
const (
	MessagePending    = "pending"
	MessageProcessing = "processing"
	MessageCompleted  = "completed"
	MessageDeadLetter = "dead_letter"
)

// Bounds of the list scan (see the comment above).
const (
	// MessageClockSlack is the clock difference allowed between a
	// broker (which stamps createdAt) and PostgreSQL (which stamps a
	// segment's created_at). Segments committed within it of the oldest
	// listed message are decoded too.
	MessageClockSlack = 250 * time.Millisecond
	// MessageCommitGrace is how long after a window's end a segment may
	// have been committed and still be searched for messages accepted
	// inside the window.
	MessageCommitGrace = time.Minute
	// messagePage is how many segment headers one scan query returns.
	messagePage = 256
	// segmentPrefixBytes covers a segment body's version, count, first
	// message id and first createdAt (1 + 10 + 16 + 10 bytes at most), and
	// a compressed body's version, count and first createdAt (pg/segment.go).
	segmentPrefixBytes = 40
)

// ErrMessageNotFound is returned by GetMessage when the partition has no
// stored message with the transactionId that can be found (see
// GetMessage), or its segment is gone.
var ErrMessageNotFound = errors.New("pg: message not found")

// ValidMessageStatus reports whether s is one of the four statuses.
func ValidMessageStatus(s string) bool {
	switch s {
	case MessagePending, MessageProcessing, MessageCompleted, MessageDeadLetter:
		return true
	}
	return false
}

// MessageFilter selects messages for ListMessages. Empty strings do not
// filter; names match exactly. Group is the consumer group statuses are
// judged for ("" = QueueModeGroup). Status is "" or a Message* status.
// From and To bound createdAt, both inclusive (callers set both). Limit
// and Offset page the newest-first list (Limit below 1 is taken as 1).
type MessageFilter struct {
	Queue, Partition, Namespace, Task string
	Group                             string
	Status                            string
	From, To                          time.Time
	Limit, Offset                     int
}

// ListedMessage is one message of a list: StoredMessage without its
// payload (Payload is nil, Encrypted tells how it is stored), where it
// lives and its status for the filter's group. LeaseExpiresAt is the
// group's live lease expiry when Status is processing, else nil.
type ListedMessage struct {
	StoredMessage
	Namespace, Task string
	Status          string
	LeaseExpiresAt  *time.Time
}

// GroupsMode describes who consumes a set of partitions, as Queen's "mode":
// HasQueueMode when queue mode has a cursor on any of them, BusGroups the
// number of distinct named groups with a cursor, and Type "queue" (queue
// mode only), "bus" (named groups only), "hybrid" (both) or "none".
type GroupsMode struct {
	HasQueueMode bool
	BusGroups    int
	Type         string
}

func groupsMode(hasQueue bool, bus int) GroupsMode {
	m := GroupsMode{HasQueueMode: hasQueue, BusGroups: bus, Type: "none"}
	switch {
	case hasQueue && bus > 0:
		m.Type = "hybrid"
	case hasQueue:
		m.Type = "queue"
	case bus > 0:
		m.Type = "bus"
	}
	return m
}

// MessageList is ListMessages' result: the page, newest first (createdAt
// descending, then offset descending), the consumers of the matching
// partitions, and how many segment bodies were read to build it.
type MessageList struct {
	Messages        []ListedMessage
	Mode            GroupsMode
	SegmentsDecoded int
}

// groupCursor is one group's position on one partition (zero: no cursor,
// so everything is pending); live says the lease (leaseEnd, leaseExpires)
// is live.
type groupCursor struct {
	offset       int64
	live         bool
	leaseEnd     int64
	leaseExpires *time.Time
}

// status is the package comment's status of offset off, dl telling
// whether the group dead-lettered it.
func (c groupCursor) status(off int64, dl bool) string {
	switch {
	case dl:
		return MessageDeadLetter
	case off < c.offset:
		return MessageCompleted
	case c.live && off <= c.leaseEnd:
		return MessageProcessing
	}
	return MessagePending
}

// mayHold reports whether offsets base..last can hold a message of status
// st ("" = any) for this cursor; hasDL whether the group dead-lettered one
// of them.
func (c groupCursor) mayHold(st string, base, last int64, hasDL bool) bool {
	switch st {
	case MessageCompleted:
		return base < c.offset
	case MessageProcessing:
		return c.live && base <= c.leaseEnd && last >= c.offset
	case MessagePending:
		if c.live {
			return last > max(c.leaseEnd, c.offset-1)
		}
		return last >= c.offset
	case MessageDeadLetter:
		return hasDL
	}
	return true
}

// listedPartition is one matching partition of a list.
type listedPartition struct {
	queue, name, namespace, task string
	cursor                       groupCursor
}

// messageFilterSQL selects the partitions matching a filter (aliases p and
// q for queen.partitions and queen.queues; parameters $1..$4 are queue,
// partition, namespace, task).
const messageFilterSQL = `($1 = '' OR q.name = $1) AND ($2 = '' OR p.name = $2)
	AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)`

// ListMessages returns one page of the messages matching f, newest first,
// with their status for f.Group, and the consumers of the matching
// partitions. It reads one snapshot and decodes only the segments it needs
// (see the comment at the top of this file). Unknown names match nothing
// (an empty list, not an error).
func (s *Store) ListMessages(ctx context.Context, f MessageFilter) (*MessageList, error) {
	if f.Group == "" {
		f.Group = QueueModeGroup
	}
	f.Limit, f.Offset = max(f.Limit, 1), max(f.Offset, 0)
	need := f.Offset + f.Limit
	out := &MessageList{Messages: []ListedMessage{}}
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		out.Messages, out.SegmentsDecoded = out.Messages[:0], 0
		filter := []any{f.Queue, f.Partition, f.Namespace, f.Task}
		var hasQueue bool
		var bus int
		if err := tx.QueryRow(ctx, `SELECT coalesce(bool_or(c.consumer_group = $5), false),
			count(DISTINCT c.consumer_group) FILTER (WHERE c.consumer_group <> $5)
			FROM queen.consumer_cursors c JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE `+messageFilterSQL,
			append(filter, QueueModeGroup)...).Scan(&hasQueue, &bus); err != nil {
			return err
		}
		out.Mode = groupsMode(hasQueue, bus)
		parts, err := listPartitions(ctx, tx, filter, f.Group)
		if err != nil || len(parts) == 0 {
			return err
		}
		return s.scanSegments(ctx, tx, f, need, parts, out)
	})
	if err != nil {
		return nil, fmt.Errorf("pg: list messages: %w", err)
	}
	if f.Offset >= len(out.Messages) {
		out.Messages = out.Messages[:0]
	} else {
		out.Messages = out.Messages[f.Offset:min(need, len(out.Messages))]
	}
	return out, nil
}

// listPartitions loads the partitions matching filter with group's cursor.
func listPartitions(ctx context.Context, tx pgx.Tx, filter []any, group string) (map[uuid.UUID]*listedPartition, error) {
	rows, err := tx.Query(ctx, `SELECT p.id, q.name, p.name, q.namespace, q.task, coalesce(c.cursor_offset, 0), coalesce(c.lease_expires_at > now() AND c.lease_end IS NOT NULL, false),
		coalesce(c.lease_end, -1), c.lease_expires_at
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $5
		WHERE `+messageFilterSQL, append(filter, group)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	parts := map[uuid.UUID]*listedPartition{}
	for rows.Next() {
		var id pgtype.UUID
		lp := &listedPartition{}
		c := &lp.cursor
		if err := rows.Scan(&id, &lp.queue, &lp.name, &lp.namespace, &lp.task, &c.offset, &c.live,
			&c.leaseEnd, &c.leaseExpires); err != nil {
			return nil, err
		}
		parts[id.Bytes] = lp
	}
	return parts, rows.Err()
}

// segmentHeader is one row of the list scan.
type segmentHeader struct {
	pid        uuid.UUID
	base, last int64
	createdAt  time.Time
	prefix     []byte
	hasDL      bool
	size       int64 // the stored body's bytes
}

// scanSegments walks the segments of parts newest commit first and fills
// out.Messages with up to need matching messages, newest first.
func (s *Store) scanSegments(ctx context.Context, tx pgx.Tx, f MessageFilter, need int,
	parts map[uuid.UUID]*listedPartition, out *MessageList) error {
	lo := f.From.Add(-MessageClockSlack)
	hi := f.To.Add(MessageCommitGrace)
	fromUS, toUS := f.From.UnixMicro(), f.To.UnixMicro()
	slackUS := MessageClockSlack.Microseconds()
	// With a filter, name the matching partitions, so that the planner may
	// use the primary key for one partition; without one, no condition.
	var cond string
	args := []any{lo, hi, f.Group, f.Status == MessageDeadLetter}
	if f.Queue != "" || f.Partition != "" || f.Namespace != "" || f.Task != "" {
		ids := make([]uuid.UUID, 0, len(parts))
		for id := range parts {
			ids = append(ids, id)
		}
		cond = ` AND s.partition_id = ANY($5)`
		args = append(args, pgUUIDs(ids))
	}
	k := len(args) + 1
	scan := func(keyset string) string {
		return fmt.Sprintf(`SELECT s.partition_id, s.base_offset, s.last_offset, s.created_at,
			substring(s.body FROM 1 FOR %d), octet_length(s.body),
			$4::boolean AND EXISTS (SELECT 1 FROM queen.dead_letters d WHERE d.partition_id = s.partition_id
				AND d.consumer_group = $3 AND d.msg_offset BETWEEN s.base_offset AND s.last_offset)
			FROM queen.segments s
			WHERE s.created_at >= $1 AND s.created_at <= $2%s%s
			ORDER BY s.created_at DESC, s.partition_id DESC, s.base_offset DESC LIMIT %d`,
			segmentPrefixBytes, cond, keyset, messagePage)
	}
	first := scan("")
	next := scan(fmt.Sprintf(` AND (s.created_at, s.partition_id, s.base_offset) < ($%d, $%d, $%d)`, k, k+1, k+2))
	// trim sorts out.Messages (newestFirst) and cuts it to need; cut is
	// then the need-th newest createdAt (haveCut), which only grows.
	var cut int64
	haveCut := false
	trim := func() {
		slices.SortFunc(out.Messages, newestFirst)
		if len(out.Messages) > need {
			clear(out.Messages[need:])
			out.Messages = out.Messages[:need]
		}
		if len(out.Messages) == need {
			cut, haveCut = out.Messages[need-1].CreatedAtMicros, true
		}
	}
	var key []any
	for {
		var rows pgx.Rows
		var err error
		if key == nil {
			rows, err = tx.Query(ctx, first, args...)
		} else {
			rows, err = tx.Query(ctx, next, append(slices.Clip(args), key...)...)
		}
		if err != nil {
			return err
		}
		hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (segmentHeader, error) {
			var h segmentHeader
			var pid pgtype.UUID
			err := r.Scan(&pid, &h.base, &h.last, &h.createdAt, &h.prefix, &h.size, &h.hasDL)
			h.pid = pid.Bytes
			return h, err
		})
		if err != nil {
			return err
		}
		// The segments to decode, read in chunks (readSegments: one round
		// trip for up to segmentChunk of them or segmentChunkBytes); the
		// answer is sorted and cut to need when it first holds need and
		// then whenever it holds twice that (newestFirst), and cut, the
		// need-th newest createdAt as of the last sort, stops the walk: it
		// only grows, so a stale one stops later, never wrongly. (Sorting after every segment and reading
		// each in a round trip of its own cost seconds of broker CPU on a
		// queue of many small segments.)
		for i := 0; i < len(hs); {
			var chunk []segmentHeader
			var bytes int64
			stop := false
			// Until need messages are found, no more segments than are
			// still missing messages (each holds one at least), so that a
			// short page decodes no segment past the ones it needs.
			limit := segmentChunk
			if !haveCut {
				limit = min(limit, max(need-len(out.Messages), 1))
			}
			for ; i < len(hs) && len(chunk) < limit && bytes < segmentChunkBytes; i++ {
				h := hs[i]
				if haveCut && cut > h.createdAt.UnixMicro()+slackUS {
					stop = true // no segment left can hold a newer message
					break
				}
				lp := parts[h.pid]
				if lp == nil || !lp.cursor.mayHold(f.Status, h.base, h.last, h.hasDL) {
					continue
				}
				if first, ok := firstCreatedAt(h.prefix); ok && first > toUS+slackUS {
					continue // accepted after the window (a segment's messages are in acceptance order)
				}
				chunk = append(chunk, h)
				bytes += h.size
			}
			segs, err := readSegments(ctx, tx, chunk, f.Group)
			if err != nil {
				return err
			}
			for j, h := range chunk {
				lp := parts[h.pid]
				out.SegmentsDecoded++
				sg := segs[j]
				for k := range sg.msgs {
					m := &sg.msgs[k]
					if m.CreatedAtMicros < fromUS || m.CreatedAtMicros > toUS {
						continue
					}
					off := h.base + int64(k)
					if slices.Contains(sg.deleted, off) {
						continue // deleted (pg/tombstone.go)
					}
					st := lp.cursor.status(off, slices.Contains(sg.dl, off))
					if f.Status != "" && st != f.Status {
						continue
					}
					lm := ListedMessage{StoredMessage: StoredMessage{Queue: lp.queue, Partition: lp.name, PartitionID: h.pid,
						Offset: off, Message: *m}, Namespace: lp.namespace, Task: lp.task, Status: st}
					lm.Payload = nil
					if st == MessageProcessing {
						lm.LeaseExpiresAt = lp.cursor.leaseExpires
					}
					out.Messages = append(out.Messages, lm)
				}
				if len(out.Messages) >= 2*need || (!haveCut && len(out.Messages) >= need) {
					trim()
				}
			}
			if stop {
				trim()
				return nil
			}
		}
		if len(hs) < messagePage {
			trim()
			return nil
		}
		last := hs[len(hs)-1]
		key = []any{last.createdAt, pgtype.UUID{Bytes: last.pid, Valid: true}, last.base}
	}
}

// newestFirst orders listed messages by createdAt, then offset, then
// partition id, all descending.
func newestFirst(a, b ListedMessage) int {
	if c := cmp.Compare(b.CreatedAtMicros, a.CreatedAtMicros); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Offset, a.Offset); c != 0 {
		return c
	}
	return slices.Compare(b.PartitionID[:], a.PartitionID[:])
}

// firstCreatedAt reads the createdAt of a segment's first message from the
// first bytes of its body; false when the prefix does not hold it.
func firstCreatedAt(prefix []byte) (int64, bool) {
	rd := binenc.NewReader(prefix)
	version := rd.Byte()
	if (version != segmentVersion && version != segmentVersionS2) || rd.Uvarint() == 0 {
		return 0, false
	}
	if version == segmentVersion {
		rd.Fixed(16) // the first message's id; a compressed body's header has none
	}
	v := rd.Varint()
	return v, rd.Err() == nil
}

// segmentChunk and segmentChunkBytes bound one readSegments of a
// listing: at most this many segments, and the segment that brings their
// stored bytes to segmentChunkBytes is the last.
const (
	segmentChunk      = 32
	segmentChunkBytes = 4 << 20
)

// listedSegment is a segment readSegments decoded: its messages, the
// offsets the group dead-lettered among them and the deleted offsets
// (pg/tombstone.go).
type listedSegment struct {
	msgs        []Message
	dl, deleted []int64
}

// readSegments decodes the segments hs (offsets base..last of each) in
// one round trip and returns them in hs's order; the payloads stay as
// stored (not decrypted).
func readSegments(ctx context.Context, tx pgx.Tx, hs []segmentHeader, group string) ([]listedSegment, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	pids, bases := make([]pgtype.UUID, len(hs)), make([]int64, len(hs))
	for i, h := range hs {
		pids[i], bases[i] = pgtype.UUID{Bytes: h.pid, Valid: true}, h.base
	}
	rows, err := tx.Query(ctx, `SELECT k.ord, s.body, ARRAY(SELECT d.msg_offset FROM queen.dead_letters d
		WHERE d.partition_id = s.partition_id AND d.consumer_group = $3
		AND d.msg_offset BETWEEN s.base_offset AND s.last_offset),
		ARRAY(SELECT t.msg_offset FROM queen.tombstones t WHERE t.partition_id = s.partition_id
		AND t.msg_offset BETWEEN s.base_offset AND s.last_offset)
		FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS k(pid, base, ord)
		JOIN queen.segments s ON s.partition_id = k.pid AND s.base_offset = k.base
		ORDER BY k.ord`, pids, bases, group)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]listedSegment, len(hs))
	n := 0
	for rows.Next() {
		var ord int64
		var body []byte
		var sg listedSegment
		if err := rows.Scan(&ord, &body, &sg.dl, &sg.deleted); err != nil {
			return nil, err
		}
		h := hs[ord-1]
		if sg.msgs, err = decodeSegmentRange(h.pid, h.base, h.last, body); err != nil {
			return nil, err
		}
		out[ord-1] = sg
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if n != len(hs) {
		// The snapshot saw every header, so every row is there.
		return nil, fmt.Errorf("%d of %d segments read", n, len(hs))
	}
	return out, nil
}

// MessageGroupStatus is one consumer group's view of a message: its status
// (as ListMessages judges it) and, while it is processing, when the
// group's lease expires.
type MessageGroupStatus struct {
	Name           string
	Status         string
	LeaseExpiresAt *time.Time
}

// DeadLetterRecord is a dead-letter record of a message.
type DeadLetterRecord struct {
	Group      string
	Error      string
	RetryCount int
	FailedAt   time.Time
}

// MessageDetail is GetMessage's result: the message with its payload
// decrypted (Encrypted says it is stored encrypted), where it lives, its
// queue-mode Status (LeaseExpiresAt: queue mode's live lease when it is
// processing), the newest dead-letter record of any group (nil when none),
// the queue's options, the consumers of its partition (Mode) and each
// group's view, by name: every group with a cursor on the partition or a
// dead-letter record of the message.
type MessageDetail struct {
	StoredMessage
	Namespace, Task string
	Encrypted       bool
	Status          string
	LeaseExpiresAt  *time.Time
	DeadLetter      *DeadLetterRecord
	Options         QueueOptions
	Mode            GroupsMode
	Groups          []MessageGroupStatus
}

// GetMessage returns the stored message of partition pid with
// transactionId txid, or ErrMessageNotFound (also for an unknown
// partition), or ErrNoKey when it is stored encrypted and the broker has no
// key.
//
// The message is found, as a trace's is (RecordTrace), through the dedup
// sidecar, which names the latest stored message per (partition,
// transactionId), or else among the messages under a live or lapsed lease
// of the partition. The sidecar is swept 15 minutes after the queue's dedup
// window, so an older message that no consumer holds is not found here
// (ListMessages still lists it); a partition is never scanned whole.
func (s *Store) GetMessage(ctx context.Context, pid uuid.UUID, txid string) (*MessageDetail, error) {
	d := &MessageDetail{}
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		*d = MessageDetail{}
		o := &d.Options
		err := tx.QueryRow(ctx, `SELECT q.name, p.name, q.namespace, q.task, q.lease_time, q.retry_limit,
			q.delayed_processing, q.window_buffer, q.retention_enabled, q.retention_seconds, q.completed_retention_seconds,
			q.max_wait_time_seconds, q.encryption_enabled, q.priority, q.max_size, q.retry_delay, q.ttl, q.dead_letter_queue,
			q.dlq_after_max_retries, q.dedup_window_seconds
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = $1`, pid).Scan(
			&d.Queue, &d.Partition, &d.Namespace, &d.Task, &o.LeaseTime, &o.RetryLimit, &o.DelayedProcessing,
			&o.WindowBuffer, &o.RetentionEnabled, &o.RetentionSeconds, &o.CompletedRetentionSeconds,
			&o.MaxWaitTimeSeconds, &o.EncryptionEnabled, &o.Priority, &o.MaxSize, &o.RetryDelay, &o.TTL,
			&o.DeadLetterQueue, &o.DLQAfterMaxRetries, &o.DedupWindowSeconds)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		m, err := s.findTracedMessage(ctx, tx, pid, txid)
		if errors.Is(err, ErrTraceMessageNotFound) {
			return ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		d.PartitionID, d.Offset, d.Message = pid, m.Offset, m.Message
		d.Encrypted = m.Encrypted
		one := []Message{d.Message}
		if err := s.decrypt(one); err != nil {
			return err
		}
		d.Message = one[0]
		return d.loadGroups(ctx, tx)
	})
	if errors.Is(err, ErrMessageNotFound) || errors.Is(err, ErrNoKey) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("pg: get message: %w", err)
	}
	return d, nil
}

// loadGroups fills d's Status, LeaseExpiresAt, DeadLetter, Mode and Groups
// from the partition's cursors and the message's dead-letter records.
func (d *MessageDetail) loadGroups(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT consumer_group, `+deadLetterErrorSQL("error")+`, retry_count, failed_at
		FROM queen.dead_letters WHERE partition_id = $1 AND msg_offset = $2 AND message_id = $3
		ORDER BY id DESC`, d.PartitionID, d.Offset, d.ID)
	if err != nil {
		return err
	}
	dls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetterRecord, error) {
		var x DeadLetterRecord
		return x, r.Scan(&x.Group, &x.Error, &x.RetryCount, &x.FailedAt)
	})
	if err != nil {
		return err
	}
	dead := map[string]bool{}
	for i := range dls {
		dead[dls[i].Group] = true
	}
	if len(dls) > 0 {
		d.DeadLetter = &dls[0]
	}
	rows, err = tx.Query(ctx, `SELECT consumer_group, cursor_offset,
		coalesce(lease_expires_at > now() AND lease_end IS NOT NULL, false), coalesce(lease_end, -1), lease_expires_at
		FROM queen.consumer_cursors WHERE partition_id = $1`, d.PartitionID)
	if err != nil {
		return err
	}
	cursors := map[string]groupCursor{}
	for rows.Next() {
		var g string
		var c groupCursor
		if err := rows.Scan(&g, &c.offset, &c.live, &c.leaseEnd, &c.leaseExpires); err != nil {
			rows.Close()
			return err
		}
		cursors[g] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	bus := 0
	for g := range cursors {
		if g != QueueModeGroup {
			bus++
		}
	}
	_, hasQueue := cursors[QueueModeGroup]
	d.Mode = groupsMode(hasQueue, bus)
	view := func(g string) MessageGroupStatus {
		c := cursors[g]
		v := MessageGroupStatus{Name: g, Status: c.status(d.Offset, dead[g])}
		if v.Status == MessageProcessing {
			v.LeaseExpiresAt = c.leaseExpires
		}
		return v
	}
	q := view(QueueModeGroup)
	d.Status, d.LeaseExpiresAt = q.Status, q.LeaseExpiresAt
	names := make([]string, 0, len(cursors)+len(dead))
	for g := range cursors {
		names = append(names, g)
	}
	for g := range dead {
		if _, ok := cursors[g]; !ok {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	d.Groups = make([]MessageGroupStatus, len(names))
	for i, g := range names {
		d.Groups[i] = view(g)
	}
	return nil
}
