package fastapi

import (
	"context"
	"errors"
	"math"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// Resources is what the queue, consumer-group and DLQ routes need.
type Resources interface {
	ListQueues(ctx context.Context, f pg.QueueFilter) ([]pg.QueueSummary, int64, error)
	// GetQueue describes a queue, each partition's lag map holding at most
	// lagGroups groups (pg.Store.GetQueue).
	GetQueue(ctx context.Context, name string, lagGroups int) (*pg.QueueDetail, error)
	DeleteQueue(ctx context.Context, name string) (bool, error)
	ListGroups(ctx context.Context, f pg.GroupFilter) ([]pg.GroupSummary, error)
	GetGroup(ctx context.Context, group string) ([]pg.GroupPartition, error)
	DeleteGroup(ctx context.Context, group, queue string, deleteMetadata bool) (cursors int64, metadata bool, queues []string, err error)
	UpdateSubscription(ctx context.Context, group string, at time.Time) (rows int64, queues []string, err error)
	LaggingPartitions(ctx context.Context, f pg.LaggingFilter) ([]pg.LaggingPartition, error)
	Seek(ctx context.Context, group, queue, partition string, toEnd bool, at time.Time) (int64, error)
	ListDeadLetters(ctx context.Context, f pg.DeadLetterFilter) ([]pg.DeadLetter, int64, error)
}

func (s *Server) routeResources(r interface {
	GET(string, fasthttp.RequestHandler)
	POST(string, fasthttp.RequestHandler)
	DELETE(string, fasthttp.RequestHandler)
}) {
	r.GET("/api/v1/resources/queues", s.listQueues)
	r.GET("/api/v1/resources/queues/{queue}", s.getQueue)
	r.DELETE("/api/v1/resources/queues/{queue}", s.deleteQueue)
	r.GET("/api/v1/consumer-groups", s.listGroups)
	// fasthttp/router tries static children before parameters, so
	// "lagging" is this route and not a group named "lagging" (a group
	// named "laggingX" still reaches getGroup), as in Queen.
	r.GET("/api/v1/consumer-groups/lagging", s.laggingGroups)
	r.GET("/api/v1/consumer-groups/{group}", s.getGroup)
	r.DELETE("/api/v1/consumer-groups/{group}", s.deleteGroup)
	r.DELETE("/api/v1/consumer-groups/{group}/queues/{queue}", s.deleteGroup)
	r.POST("/api/v1/consumer-groups/{group}/subscription", s.updateSubscription)
	r.POST("/api/v1/consumer-groups/{group}/queues/{queue}/seek", s.heavyWriteGate(s.seek))
	r.POST("/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", s.heavyWriteGate(s.seek))
	r.GET("/api/v1/dlq", s.listDLQ)
}

const (
	// DefaultQueuesLimit is GET /api/v1/resources/queues' limit when the
	// query has none (the other listings' default).
	DefaultQueuesLimit = 100
	// MaxQueuesLimit is the largest limit it serves; larger is a 400.
	MaxQueuesLimit = 1000
	// maxQueuesOffset is the largest offset it takes; larger is a 400.
	maxQueuesOffset = math.MaxInt32
)

// listQueues serves GET /api/v1/resources/queues?limit=L&offset=O
// (docs/api.md, "Queues"): one page of the queues, by name, with queue
// mode's counts: {"queues":[...], "total": n, "pagination": {limit,
// offset}}, Queen's {"queues"} plus this broker's total (every queue) and
// pagination. At most L queues (default DefaultQueuesLimit,
// 1..MaxQueuesLimit) after the first O (default 0); unpaged, 20,000
// queues answered 4.3 MB in 0.8-1 s, and the console's overview asked
// for it every few seconds. A limit or offset that is not an integer in
// its range is a 400 {"error"} naming it (pageArg), as on the other
// routes this broker paged.
func (s *Server) listQueues(ctx *fasthttp.RequestCtx) {
	var f pg.QueueFilter
	var ok bool
	if f.Limit, ok = pageArg(ctx, "limit", DefaultQueuesLimit, 1, MaxQueuesLimit); !ok {
		return
	}
	if f.Offset, ok = pageArg(ctx, "offset", 0, 0, maxQueuesOffset); !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	qs, total, err := s.deps.Resources.ListQueues(c, f)
	if err != nil {
		s.dbFail(ctx, "list queues", err)
		return
	}
	out := make([]queueListed, len(qs))
	for i, q := range qs {
		out[i] = queueListed{CreatedAt: q.CreatedAt.UTC().Format(time.RFC3339Nano), ID: q.ID.String(),
			Name: q.Name, Namespace: q.Namespace, Partitions: q.Partitions, Task: q.Task}
		out[i].Messages.Pending, out[i].Messages.Processing, out[i].Messages.Total = q.Pending, q.Processing, q.Total
	}
	writeJSON(ctx, fasthttp.StatusOK, struct {
		Pagination pagination    `json:"pagination"`
		Queues     []queueListed `json:"queues"`
		Total      int64         `json:"total"`
	}{pagination{f.Limit, f.Offset}, out, total})
}

// pagination is the "pagination" object of a paged listing's answer.
type pagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// queueListed is one queue of GET /api/v1/resources/queues. A struct, not
// a map per queue: at 50,000 queues the maps took the broker's peak RSS
// from 50 to 107 MB for one answer. Its members are in the order a map's
// were written (sorted), so the answer's bytes did not change.
type queueListed struct {
	CreatedAt string `json:"createdAt"`
	ID        string `json:"id"`
	Messages  struct {
		Pending    int64 `json:"pending"`
		Processing int64 `json:"processing"`
		Total      int64 `json:"total"`
	} `json:"messages"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	Partitions int    `json:"partitions"`
	Task       string `json:"task"`
}

func timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// The per-partition lag map of GET /api/v1/resources/queues/:q (this
// broker's addition to Queen's answer) lists at most lagGroups groups, the
// first by name with a cursor on the partition.
const (
	// DefaultLagGroups is lagGroups when the query has none.
	DefaultLagGroups = 10
	// MaxLagGroups is the largest lagGroups served (larger is 400).
	MaxLagGroups = 100
)

// getQueue handles GET /api/v1/resources/queues/:queue[?lagGroups=N]:
// Queen's answer plus, per partition, nextOffset, depth, lag (the first
// lagGroups groups by name with a cursor there, each with the stored
// messages at or past its cursor; DefaultLagGroups, 0..MaxLagGroups) and
// lagTruncated (more groups have a cursor there than lag lists). Every
// group's lag on the queue is GET /api/v1/consumer-groups?queue=, paged.
func (s *Server) getQueue(ctx *fasthttp.RequestCtx) {
	name, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	lagGroups, ok := pageArg(ctx, "lagGroups", DefaultLagGroups, 0, MaxLagGroups)
	if !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	d, err := s.deps.Resources.GetQueue(c, name, lagGroups)
	if errors.Is(err, pg.ErrQueueNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.dbFail(ctx, "get queue", err)
		return
	}
	parts := make([]map[string]any, len(d.Partitions))
	for i, p := range d.Partitions {
		parts[i] = map[string]any{"id": p.ID.String(), "name": p.Name, "createdAt": p.CreatedAt.UTC().Format(time.RFC3339Nano),
			"nextOffset": p.NextOffset, "depth": p.Depth, "lag": p.Lag, "lagTruncated": p.LagTruncated,
			"stats": map[string]int64{"total": p.Depth, "pending": p.Pending, "processing": p.Processing,
				"completed": p.Completed(), "deadLetter": p.DeadLetter},
			"oldestMessage": timePtr(p.Oldest), "newestMessage": timePtr(p.Newest)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": d.ID.String(), "name": d.Name, "namespace": d.Namespace,
		"task": d.Task, "createdAt": d.CreatedAt.UTC().Format(time.RFC3339Nano), "options": d.Options,
		"partitions": parts, "totals": map[string]int64{"total": d.Total, "pending": d.Pending, "processing": d.Processing}})
}

func (s *Server) deleteQueue(ctx *fasthttp.RequestCtx) {
	name, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	existed, err := s.deps.Resources.DeleteQueue(c, name)
	if err != nil {
		s.dbFail(ctx, "delete queue", err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"deleted": true, "queue": name, "existed": existed})
}

// groupStaleSeconds is the time lag (pg.GroupSummary.MaxTimeLagSeconds)
// past which a group is Lagging or Dead on a queue.
const groupStaleSeconds = 300

// groupState is the state of GET /api/v1/consumer-groups (docs/api.md,
// "Consumer groups and dead letters"): "Dead" when the group's time lag on
// the queue is over groupStaleSeconds with messages waiting and no live
// lease (nobody consumes), "Lagging" when it is over that while a
// consumer holds a lease, else "Stable".
func groupState(g pg.GroupSummary) string {
	switch {
	case g.Members == 0 && g.TotalLag > 0 && g.MaxTimeLagSeconds > groupStaleSeconds:
		return "Dead"
	case g.MaxTimeLagSeconds > groupStaleSeconds:
		return "Lagging"
	}
	return "Stable"
}

const (
	// DefaultGroupsLimit is GET /api/v1/consumer-groups' limit when the
	// query has none (the lagging route's and the other listings').
	DefaultGroupsLimit = 100
	// MaxGroupsLimit is the largest limit GET /api/v1/consumer-groups
	// serves; larger is a 400.
	MaxGroupsLimit = 1000
	// maxGroupsOffset is the largest offset it takes; larger is a 400.
	maxGroupsOffset = math.MaxInt32
)

// listGroups serves GET /api/v1/consumer-groups?limit=L&offset=O&queue=Q
// (docs/api.md, "Consumer groups and dead letters"; Go SDK
// ListConsumerGroups, JS listConsumerGroups): one entry per (group,
// queue) where the group has a cursor, queue mode included, by group name
// then queue name, with the lag of the group's cursors on the queue.
//
// The answer is one page: at most L entries (default DefaultGroupsLimit,
// 1..MaxGroupsLimit) after the first O (default 0); with Q, only the
// entries of queue Q (the console's queue page). Unpaged, 3,000 groups on
// 20 partitions computed the lag of all 60,000 cursors for every request
// (docs/decisions.md). The answer stays a bare array, as Queen's SDKs read
// it, so a client pages until a page is shorter than L. A limit or offset
// that is not an integer in its range is a 400 {"error"} naming it
// (pageArg), as is a queue that cannot be a name.
func (s *Server) listGroups(ctx *fasthttp.RequestCtx) {
	f := pg.GroupFilter{Queue: string(ctx.QueryArgs().Peek("queue"))}
	if f.Queue != "" && ingest.ValidateName(f.Queue) != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "queue must be 1..255 bytes of UTF-8 without control characters")
		return
	}
	var ok bool
	if f.Limit, ok = pageArg(ctx, "limit", DefaultGroupsLimit, 1, MaxGroupsLimit); !ok {
		return
	}
	if f.Offset, ok = pageArg(ctx, "offset", 0, 0, maxGroupsOffset); !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	gs, err := s.deps.Resources.ListGroups(c, f)
	if err != nil {
		s.dbFail(ctx, "list groups", err)
		return
	}
	out := make([]groupListed, len(gs))
	for i, g := range gs {
		out[i] = groupListed{MaxTimeLag: g.MaxTimeLagSeconds, Members: g.Members, Name: g.Name,
			PartitionsWithLag: g.PartitionsWithLag, QueueName: g.Queue, State: groupState(g),
			SubscriptionCreatedAt: timePtr(g.CreatedAt), SubscriptionMode: g.SubscriptionMode,
			SubscriptionTimestamp: timePtr(g.SubscriptionFrom), Topics: []string{g.Queue}, TotalLag: g.TotalLag}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// groupListed is one (queue, group) of GET /api/v1/consumer-groups: a
// struct, not a map per row (as queueListed), members in a map's sorted
// order so that the answer's bytes did not change.
type groupListed struct {
	MaxTimeLag            float64  `json:"maxTimeLag"`
	Members               int      `json:"members"`
	Name                  string   `json:"name"`
	PartitionsWithLag     int      `json:"partitionsWithLag"`
	QueueName             string   `json:"queueName"`
	State                 string   `json:"state"`
	SubscriptionCreatedAt any      `json:"subscriptionCreatedAt"`
	SubscriptionMode      string   `json:"subscriptionMode"`
	SubscriptionTimestamp any      `json:"subscriptionTimestamp"`
	Topics                []string `json:"topics"`
	TotalLag              int64    `json:"totalLag"`
}

func (s *Server) getGroup(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	ps, err := s.deps.Resources.GetGroup(c, group)
	if err != nil {
		s.dbFail(ctx, "get group", err)
		return
	}
	out := map[string]map[string][]map[string]any{}
	for _, p := range ps {
		q, ok := out[p.Queue]
		if !ok {
			q = map[string][]map[string]any{"partitions": {}}
			out[p.Queue] = q
		}
		var worker any
		if p.LeaseID != nil && p.LeaseActive {
			worker = p.LeaseID.String()
		}
		q["partitions"] = append(q["partitions"], map[string]any{"partition": p.Partition, "workerId": worker,
			"lastConsumedAt": timePtr(p.LastConsumedAt), "totalConsumed": p.TotalConsumed, "cursorOffset": p.Cursor,
			"offsetLag": p.OffsetLag, "timeLagSeconds": p.TimeLagSeconds, "leaseActive": p.LeaseActive})
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// deleteGroup serves DELETE /api/v1/consumer-groups/:group and DELETE
// /api/v1/consumer-groups/:group/queues/:queue (docs/api.md, "Consumer groups
// and dead letters"): it deletes the group's cursors on every queue or on
// :queue. ?deleteMetadata (default true; Queen's boolean rule: only "true"
// and "1" are true) also deletes the group's subscription metadata there;
// with deleteMetadata=false the metadata stays and the group starts over by
// its stored subscription (see pg.Store.DeleteGroup). 200 {success,
// consumerGroup[, queueName], deletedPartitions (cursors deleted),
// metadataDeleted (whether metadata rows were actually deleted)}. Pops
// waiting on any queue it touched are woken.
func (s *Server) deleteGroup(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	queue, ok := optionalPathName(ctx, "queue")
	if !ok {
		return
	}
	deleteMetadata := true
	if a := ctx.QueryArgs(); len(a.Peek("deleteMetadata")) > 0 {
		deleteMetadata = boolArg(a, "deleteMetadata")
	}
	c, cancel := s.adminCtx()
	defer cancel()
	n, meta, touched, err := s.deps.Resources.DeleteGroup(c, group, queue, deleteMetadata)
	if err != nil {
		s.dbFail(ctx, "delete group", err)
		return
	}
	res := map[string]any{"success": true, "consumerGroup": group, "deletedPartitions": n, "metadataDeleted": meta}
	if queue != "" {
		res["queueName"] = queue
	}
	// Pops of this group waiting on any touched queue start over at once
	// by their subscription mode, not at their next safety recheck.
	for _, q := range touched {
		s.deps.Consumer.WakeQueue(c, q)
	}
	writeJSON(ctx, fasthttp.StatusOK, res)
}

// updateSubscription serves POST /api/v1/consumer-groups/:group/subscription
// with body {"subscriptionTimestamp": "<ISO 8601>"} (docs/api.md, "Consumer
// groups and dead letters"; docs/consume.md, "Subscriptions: where a new
// group starts"; Go SDK UpdateConsumerGroupTimestamp, JS
// updateConsumerGroupTimestamp). It moves the group's stored subscription
// start to that time on every queue where the group has subscription
// metadata. Existing cursors are NOT moved: the new start applies only where
// the group has no cursor yet, i.e. partitions it has not popped from (see
// pg.Store.UpdateSubscription); seek moves cursors. The timestamp is read by
// parseTimestamp.
//
// 200 {success:true, consumerGroup, newTimestamp (the time stored, RFC 3339
// UTC), rowsUpdated (queues whose metadata changed; 0 for a group without
// metadata, not an error)}. 400 {"error"} for an empty or non-object body,
// bad JSON, or a subscriptionTimestamp that is missing, not a string or
// not a timestamp. Pops waiting on the queues updated are woken.
func (s *Server) updateSubscription(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	var req struct {
		SubscriptionTimestamp *string `json:"subscriptionTimestamp"`
	}
	if !s.readObject(ctx, &req) {
		return
	}
	if req.SubscriptionTimestamp == nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "subscriptionTimestamp is required")
		return
	}
	at, err := parseTimestamp(*req.SubscriptionTimestamp)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "subscriptionTimestamp "+err.Error())
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	n, queues, err := s.deps.Resources.UpdateSubscription(c, group, at)
	if err != nil {
		s.dbFail(ctx, "update subscription", err)
		return
	}
	for _, q := range queues {
		s.deps.Consumer.WakeQueue(c, q)
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "consumerGroup": group,
		"newTimestamp": at.UTC().Format(time.RFC3339Nano), "rowsUpdated": n})
}

// defaultMinLagSeconds is minLagSeconds' default on the lagging route
// (Queen's C++ route: one hour).
const defaultMinLagSeconds = 3600

const (
	// DefaultLaggingLimit is the lagging route's limit when the query has
	// none (the DLQ's and the other listings' default).
	DefaultLaggingLimit = 100
	// MaxLaggingLimit is the largest limit the lagging route serves;
	// larger is a 400.
	MaxLaggingLimit = 1000
	// maxLaggingOffset is the largest offset the lagging route takes;
	// larger is a 400.
	maxLaggingOffset = math.MaxInt32
)

// laggingGroups serves GET
// /api/v1/consumer-groups/lagging?minLagSeconds=N&limit=L&offset=O
// (docs/api.md, "Consumer groups and dead letters"; Go SDK
// GetLaggingConsumers, JS getLaggingConsumers): the cursors of every group
// (queue mode included) with messages past them and a time lag of at least N
// seconds (default 3600; a bad value falls back to it, a negative one counts
// as 0), largest lag first (by when the cursor last moved, oldest first,
// then by group, queue and partition name). The
// time lag is the figure GET /api/v1/consumer-groups/:group reports
// (seconds since the group last moved its cursor on the partition), in
// whole seconds.
//
// The answer is one page: at most L rows (default DefaultLaggingLimit,
// 1..MaxLaggingLimit) after the first O (default 0). Unpaged, 3,000 groups
// on 20 partitions answered 17.7 MB in 2.7 s, and four clients asking in a
// loop took another client from 5,596 requests in 15 s to 314 (a probe's
// finding). The answer stays a bare array, as Queen's SDKs read it, so a
// client pages until a page is shorter than L. A limit or offset that is
// not an integer in its range is a 400 {"error"} naming it (pageArg).
//
// 200 [] or an array of rows with Queen's snake_case keys: {consumer_group,
// queue_name, partition_name, partition_id, worker_id (live lease id or
// null), offset_lag, time_lag_seconds, lag_hours, oldest_unconsumed_at,
// last_consumed_at}.
func (s *Server) laggingGroups(ctx *fasthttp.RequestCtx) {
	f := pg.LaggingFilter{MinLagSeconds: intArg(ctx.QueryArgs(), "minLagSeconds", defaultMinLagSeconds, 0, 1<<31-1)}
	var ok bool
	if f.Limit, ok = pageArg(ctx, "limit", DefaultLaggingLimit, 1, MaxLaggingLimit); !ok {
		return
	}
	if f.Offset, ok = pageArg(ctx, "offset", 0, 0, maxLaggingOffset); !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	ls, err := s.deps.Resources.LaggingPartitions(c, f)
	if err != nil {
		s.dbFail(ctx, "lagging groups", err)
		return
	}
	out := make([]map[string]any, len(ls))
	for i, l := range ls {
		var worker any
		if l.LeaseID != nil {
			worker = l.LeaseID.String()
		}
		out[i] = map[string]any{"consumer_group": l.Group, "queue_name": l.Queue, "partition_name": l.Partition,
			"partition_id": l.PartitionID.String(), "worker_id": worker, "offset_lag": l.OffsetLag,
			"time_lag_seconds": l.TimeLagSeconds, "lag_hours": math.Round(float64(l.TimeLagSeconds)/36) / 100,
			"oldest_unconsumed_at": timePtr(l.OldestUnconsumed), "last_consumed_at": timePtr(l.LastConsumedAt)}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) seek(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	queue, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	partition, ok := optionalPathName(ctx, "partition")
	if !ok {
		return
	}
	var req struct {
		ToEnd     bool    `json:"toEnd"`
		Timestamp *string `json:"timestamp"`
	}
	if !s.readObject(ctx, &req) {
		return
	}
	var at time.Time
	switch {
	case partition != "":
		req.ToEnd = true // the partition route moves to the end (Queen)
	case req.ToEnd:
	case req.Timestamp != nil:
		var err error
		if at, err = parseTimestamp(*req.Timestamp); err != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "timestamp "+err.Error())
			return
		}
	default:
		writeErr(ctx, fasthttp.StatusBadRequest, "toEnd or timestamp is required")
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	n, err := s.deps.Resources.Seek(c, group, queue, partition, req.ToEnd, at)
	if err != nil {
		s.dbFail(ctx, "seek", err)
		return
	}
	s.deps.Consumer.WakeQueue(c, queue)
	res := map[string]any{"success": true, "consumerGroup": group, "queueName": queue, "seekToEnd": req.ToEnd,
		"partitionsUpdated": n}
	if !req.ToEnd {
		res["targetTimestamp"] = at.UTC().Format(time.RFC3339Nano)
	}
	writeJSON(ctx, fasthttp.StatusOK, res)
}

// listDLQ serves GET /api/v1/dlq (docs/api.md, "Consumer groups and dead
// letters"). Filters, each optional: queue, partition, consumerGroup (exact
// names), from and to (inclusive bounds on failedAt, read by parseTimestamp;
// an unreadable one is a 400 {"error"}); limit (default 100, 1..1000) and
// offset (default 0) page the newest-first list. 200 {"messages":[{id,
// transactionId, partitionId, queue, partition, offset, consumerGroup,
// errorMessage, retryCount, data, producerSub, createdAt, failedAt}],
// "pagination": {limit, offset}, "total": n}, where total counts every dead
// letter matching the filters, whatever limit and offset are (the Go SDK
// reads it; Queen's C++ server documented it without sending it).
func (s *Server) listDLQ(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	f := pg.DeadLetterFilter{Queue: string(a.Peek("queue")), Partition: string(a.Peek("partition")),
		Group: string(a.Peek("consumerGroup")), Limit: intArg(a, "limit", 100, 1, 1000),
		Offset: intArg(a, "offset", 0, 0, 1<<30)}
	// Filters are names (api.md, "Names"): one that cannot be a name (a NUL
	// byte, invalid UTF-8, over 255 bytes) is the client's mistake, not a
	// query for PostgreSQL to refuse.
	for _, n := range []struct{ arg, v string }{{"queue", f.Queue}, {"partition", f.Partition}, {"consumerGroup", f.Group}} {
		if n.v != "" && ingest.ValidateName(n.v) != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, n.arg+" must be 1..255 bytes of UTF-8 without control characters")
			return
		}
	}
	for _, b := range []struct {
		name string
		to   **time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := a.Peek(b.name); len(v) > 0 {
			t, err := parseTimestamp(string(v))
			if err != nil {
				writeErr(ctx, fasthttp.StatusBadRequest, b.name+" "+err.Error())
				return
			}
			*b.to = &t
		}
	}
	if f.From != nil && f.To != nil && f.From.After(*f.To) {
		writeErr(ctx, fasthttp.StatusBadRequest, "from must not be after to")
		return
	}
	limit, offset := f.Limit, f.Offset
	c, cancel := s.adminCtx()
	defer cancel()
	dls, total, err := s.deps.Resources.ListDeadLetters(c, f)
	if err != nil {
		s.dbFail(ctx, "dlq", err)
		return
	}
	msgs := make([]map[string]any, len(dls))
	for i, d := range dls {
		m := d.Message
		var data any
		if d.PayloadFound {
			data = json.RawMessage(m.Payload)
		}
		var sub any
		if m.ProducerSub != nil {
			sub = *m.ProducerSub
		}
		var created any
		if d.PayloadFound {
			created = time.UnixMicro(m.CreatedAtMicros).UTC().Format(time.RFC3339Nano)
		}
		msgs[i] = map[string]any{"id": m.ID.String(), "transactionId": m.TransactionID, "partitionId": m.PartitionID.String(),
			"queue": m.Queue, "partition": m.Partition, "offset": m.Offset, "consumerGroup": d.Group, "errorMessage": d.Error,
			"retryCount": d.RetryCount, "data": data, "producerSub": sub, "createdAt": created,
			"failedAt": d.FailedAt.UTC().Format(time.RFC3339Nano)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"messages": msgs,
		"pagination": map[string]int{"limit": limit, "offset": offset}, "total": total})
}
