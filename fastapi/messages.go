package fastapi

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// MessageReader is what the message browsing routes need; *pg.Store
// implements it.
type MessageReader interface {
	// ListMessages returns a page of messages, newest first, with their
	// status for f.Group (pg/messages.go says how it stays bounded).
	ListMessages(ctx context.Context, f pg.MessageFilter) (*pg.MessageList, error)
	// GetMessage returns one message with its payload decrypted, or
	// pg.ErrMessageNotFound, or pg.ErrNoKey.
	GetMessage(ctx context.Context, partitionID uuid.UUID, transactionID string) (*pg.MessageDetail, error)
}

// Paging and window of GET /api/v1/messages.
const (
	// DefaultMessagesLimit is limit when the query has none (Queen's).
	DefaultMessagesLimit = 200
	// MaxMessagesLimit is the largest limit served (larger is clamped).
	MaxMessagesLimit = 1000
	// MaxMessagesOffset is the largest offset served (larger is a 400):
	// offset+limit messages are decoded to answer, so it bounds the work.
	MaxMessagesOffset = 10000
	// DefaultMessagesWindow is the window when from is absent: the hour
	// before to (docs/api.md, "Messages and traces": the last hour).
	DefaultMessagesWindow = time.Hour
)

// messagesOffset reads the offset query parameter of a message listing
// (GET /api/v1/messages, /api/v1/status/queues/:q/messages): 0 when absent
// or not a number (Queen's fallback), at least 0. Over MaxMessagesOffset,
// a number too large for an int included, it answers 400 naming the cap
// and what to do instead (hint) and returns false: offset+limit messages
// are decoded to answer a page, and clamped, a deeper page answered the
// page at the cap again, so a client paging until an empty page never
// stopped (a number that overflowed took the default and answered page 0
// again).
func messagesOffset(ctx *fasthttp.RequestCtx, hint string) (int, bool) {
	v := string(ctx.QueryArgs().Peek("offset"))
	n, err := strconv.Atoi(v)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-") {
		n = math.MaxInt
	} else if err != nil {
		n = 0
	}
	if n > MaxMessagesOffset {
		writeErr(ctx, fasthttp.StatusBadRequest, "offset is at most "+strconv.Itoa(MaxMessagesOffset)+": "+hint)
		return 0, false
	}
	return max(n, 0), true
}

// messageRoutes serves the message routes with Deps.Messages.
type messageRoutes struct {
	s *Server
	m MessageReader
}

// routeMessages registers GET /api/v1/messages and GET
// /api/v1/messages/{partitionId}/{transactionId} (docs/api.md, "Messages and
// traces"). DELETE of one message is served by fastapi/streams.go
// (tombstones, pg/tombstone.go). Both routes need the read role
// (auth/roles.go: any GET under /api/v1).
func (s *Server) routeMessages(r listingRoutes) {
	mr := &messageRoutes{s: s, m: s.deps.Messages}
	r.GET("/api/v1/messages", mr.list)
	r.GET("/api/v1/messages/{partitionId}/{transactionId}", mr.get)
}

// list handles GET /api/v1/messages?queue=&partition=&ns=&task=
// &consumerGroup=&status=&from=&to=&limit=200&offset=0 (JS listMessages,
// Go ListMessages; Queen's list_messages_v1):
//
//	200 {"messages":[{"id","transactionId","partitionId","queue","partition",
//	     "namespace","task","offset","status","traceId","producerSub",
//	     "createdAt","leaseExpiresAt"}],
//	     "mode":{"hasQueueMode","busGroupsCount","type"},
//	     "consumerGroup","from","to","pagination":{"limit","offset"}}
//
// Filters (absent or empty: any): queue, partition, ns (or namespace),
// task match names exactly; status is pending, processing, completed or
// dead_letter; from and to (parseTimestamp forms, inclusive) bound
// createdAt, the broker's acceptance time: to defaults to now, from to an
// hour before to. status is judged for consumerGroup, default queue mode
// (__QUEUE_MODE__), as pg/messages.go describes; leaseExpiresAt is that
// group's live lease when status is processing, else null. Messages are
// newest first (createdAt, then offset, descending); payloads are not
// listed (GET /api/v1/messages/:partitionId/:transactionId has them).
// limit is clamped to 1..1000, offset to at least 0; an offset over 10000
// is a 400 (move to instead); a non-number takes the default.
//
// "mode" describes who consumes the partitions the name filters match
// (the time window aside), as Queen's: hasQueueMode when queue mode has a
// cursor on one of them, busGroupsCount the distinct named groups with a
// cursor, type "queue", "bus", "hybrid" or "none". Unlike Queen, a message
// of a bus-only partition is still judged for queue mode (or the named
// consumerGroup), never by "consumed by every group"; "consumerGroup" in
// the answer says whose status it is.
//
// 400 for an invalid name, status or timestamp, or from after to; 503
// when PostgreSQL fails. Unknown queues or partitions list nothing.
func (mr *messageRoutes) list(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	f := pg.MessageFilter{Queue: string(a.Peek("queue")), Partition: string(a.Peek("partition")),
		Namespace: string(a.Peek("ns")), Task: string(a.Peek("task")), Group: string(a.Peek("consumerGroup")),
		Status: string(a.Peek("status")),
		Limit:  intArg(a, "limit", DefaultMessagesLimit, 1, MaxMessagesLimit)}
	var ok bool
	if f.Offset, ok = messagesOffset(ctx, "page further back by moving to (createdAt of the last message listed) instead"); !ok {
		return
	}
	if f.Namespace == "" {
		f.Namespace = string(a.Peek("namespace"))
	}
	if f.Group == "" {
		f.Group = pg.QueueModeGroup
	}
	for _, p := range []struct{ name, v string }{{"queue", f.Queue}, {"partition", f.Partition},
		{"ns", f.Namespace}, {"task", f.Task}, {"consumerGroup", f.Group}} {
		if p.v != "" && ingest.ValidateName(p.v) != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "invalid "+p.name)
			return
		}
	}
	if f.Status != "" && !pg.ValidMessageStatus(f.Status) {
		writeErr(ctx, fasthttp.StatusBadRequest, "status must be pending, processing, completed or dead_letter")
		return
	}
	f.To = time.Now()
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"to", &f.To}, {"from", &f.From}} {
		if v := a.Peek(p.name); len(v) > 0 {
			t, err := parseTimestamp(string(v))
			if err != nil {
				writeErr(ctx, fasthttp.StatusBadRequest, p.name+" "+err.Error())
				return
			}
			*p.t = t
		}
	}
	if len(a.Peek("from")) == 0 {
		f.From = f.To.Add(-DefaultMessagesWindow)
	}
	if f.From.After(f.To) {
		writeErr(ctx, fasthttp.StatusBadRequest, "from must not be after to")
		return
	}
	c, cancel := mr.s.adminCtx()
	defer cancel()
	l, err := mr.m.ListMessages(c, f)
	if err != nil {
		mr.s.dbFail(ctx, "list messages", err)
		return
	}
	out := make([]map[string]any, len(l.Messages))
	for i := range l.Messages {
		m := &l.Messages[i]
		out[i] = map[string]any{"id": m.ID.String(), "transactionId": m.TransactionID,
			"partitionId": m.PartitionID.String(), "queue": m.Queue, "partition": m.Partition,
			"namespace": m.Namespace, "task": m.Task, "offset": m.Offset, "status": m.Status,
			"traceId": traceIDJSON(m.TraceID), "producerSub": m.ProducerSub,
			"createdAt":      time.UnixMicro(m.CreatedAtMicros).UTC().Format(MicrosLayout),
			"leaseExpiresAt": messageTime(m.LeaseExpiresAt)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"messages": out, "mode": modeJSON(l.Mode),
		"consumerGroup": f.Group, "from": f.From.UTC().Format(time.RFC3339Nano),
		"to":         f.To.UTC().Format(time.RFC3339Nano),
		"pagination": map[string]int{"limit": f.Limit, "offset": f.Offset}})
}

// get handles GET /api/v1/messages/{partitionId}/{transactionId} (JS
// getMessage, Go GetMessage; Queen's get_message_v1); transactionId is
// percent-decoded:
//
//	200 {"payload":<the pushed JSON, byte for byte, decrypted>,
//	     "id","transactionId","partitionId","queue","partition","namespace",
//	     "task","offset","traceId","producerSub","createdAt","isEncrypted",
//	     "status","leaseExpiresAt","errorMessage","retryCount","failedAt",
//	     "queueConfig":{<every option, as /configure answers "options">},
//	     "mode":{"hasQueueMode","busGroupsCount","type"},
//	     "consumerGroups":[{"name","status","consumed","leaseExpiresAt"}]}
//
// status is queue mode's (pending, processing, completed, dead_letter;
// pg/messages.go) and leaseExpiresAt queue mode's live lease when the
// message is processing. errorMessage, retryCount and failedAt come from
// the newest dead-letter record of the message in any group, null when it
// has none. isEncrypted says the payload is stored encrypted. mode
// describes the partition's consumers (as in the list); consumerGroups
// holds, by name, every group with a cursor on the partition or a
// dead-letter record of the message: its status for that group, consumed
// (completed or dead_letter) and its live lease while processing.
//
// The message is looked up as pg.Store.GetMessage says (dedup sidecar,
// then leased messages): one older than its queue's dedup window (plus 15
// minutes) that no consumer holds is 404 here and found through the list.
// 404 {"error":"Message not found"} for an unknown partition or message or
// a message whose segment is gone; 400 for a partitionId that is not a
// UUID or a bad transactionId; 500 when the payload is encrypted and the
// broker has no key (or the key does not open it); 503 when PostgreSQL
// fails.
func (mr *messageRoutes) get(ctx *fasthttp.RequestCtx) {
	pid, txid, ok := messageKey(ctx)
	if !ok {
		return
	}
	c, cancel := mr.s.adminCtx()
	defer cancel()
	d, err := mr.m.GetMessage(c, pid, txid)
	switch {
	case errors.Is(err, pg.ErrMessageNotFound):
		writeErr(ctx, fasthttp.StatusNotFound, "Message not found")
		return
	case errors.Is(err, pg.ErrNoKey):
		writeErr(ctx, fasthttp.StatusInternalServerError, "the payload is encrypted and QUEEN_ENCRYPTION_KEY is not set")
		return
	case errors.Is(err, crypt.ErrAuthFailed) || errors.Is(err, crypt.ErrBadEnvelope):
		mr.s.log.Error("get message: decrypt", "err", err)
		writeErr(ctx, fasthttp.StatusInternalServerError, "the payload cannot be decrypted with QUEEN_ENCRYPTION_KEY")
		return
	case err != nil:
		mr.s.dbFail(ctx, "get message", err)
		return
	}
	groups := make([]map[string]any, len(d.Groups))
	for i, g := range d.Groups {
		groups[i] = map[string]any{"name": g.Name, "status": g.Status,
			"consumed":       g.Status == pg.MessageCompleted || g.Status == pg.MessageDeadLetter,
			"leaseExpiresAt": messageTime(g.LeaseExpiresAt)}
	}
	var errMsg, failedAt, retries any
	if dl := d.DeadLetter; dl != nil {
		errMsg, retries, failedAt = dl.Error, dl.RetryCount, messageTime(&dl.FailedAt)
	}
	rest, err := json.Marshal(map[string]any{"id": d.ID.String(), "transactionId": d.TransactionID,
		"partitionId": d.PartitionID.String(), "queue": d.Queue, "partition": d.Partition,
		"namespace": d.Namespace, "task": d.Task, "offset": d.Offset, "traceId": traceIDJSON(d.TraceID),
		"producerSub": d.ProducerSub, "createdAt": time.UnixMicro(d.CreatedAtMicros).UTC().Format(MicrosLayout),
		"isEncrypted": d.Encrypted, "status": d.Status, "leaseExpiresAt": messageTime(d.LeaseExpiresAt),
		"errorMessage": errMsg, "retryCount": retries, "failedAt": failedAt, "queueConfig": d.Options,
		"mode": modeJSON(d.Mode), "consumerGroups": groups})
	if err != nil {
		writeErr(ctx, fasthttp.StatusInternalServerError, "encoding response")
		return
	}
	// The payload is spliced in as stored, as pop writes data: an encoder
	// would compact it (and might respell it).
	b := make([]byte, 0, len(d.Payload)+len(rest)+16)
	b = append(b, `{"payload":`...)
	b = append(b, d.Payload...)
	b = append(b, ',')
	b = append(b, rest[1:]...) // rest is a non-empty object: "{...}"
	writeJSONBytes(ctx, fasthttp.StatusOK, b)
}

func traceIDJSON(id *uuid.UUID) any {
	if id == nil {
		return nil
	}
	return id.String()
}

// messageTime renders an optional time as MicrosLayout, or null.
func messageTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(MicrosLayout)
}

func modeJSON(m pg.GroupsMode) map[string]any {
	return map[string]any{"hasQueueMode": m.HasQueueMode, "busGroupsCount": m.BusGroups, "type": m.Type}
}
