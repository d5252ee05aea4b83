package fastapi

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// Admin is what the admin summary routes need; *pg.Store implements it.
// Every count is computed live (pg/admin.go says how).
type Admin interface {
	// QueueDepth returns a group's backlog per partition, or
	// pg.ErrQueueNotFound.
	QueueDepth(ctx context.Context, queue, group string) (*pg.QueueDepth, error)
	// WorstQueueDepth returns, per partition, the largest backlog of any
	// group consuming the queue, or pg.ErrQueueNotFound.
	WorstQueueDepth(ctx context.Context, queue string) (*pg.QueueDepth, error)
	// Overview returns the system totals.
	Overview(ctx context.Context) (*pg.Overview, error)
	// NamespaceSummaries and TaskSummaries return one row per non-empty
	// namespace or task, by name.
	NamespaceSummaries(ctx context.Context) ([]pg.LabelSummary, error)
	TaskSummaries(ctx context.Context) ([]pg.LabelSummary, error)
	// ListPartitions returns a page of partitions and how many match, or
	// pg.ErrQueueNotFound for an unknown f.Queue.
	ListPartitions(ctx context.Context, f pg.PartitionFilter) ([]pg.PartitionSummary, int64, error)
}

// Paging of GET /api/v1/resources/partitions.
const (
	// DefaultPartitionsLimit is limit when the query has none.
	DefaultPartitionsLimit = 100
	// MaxPartitionsLimit is the largest limit served (larger is clamped).
	MaxPartitionsLimit = 1000
)

// adminRoutes serves the admin routes with Deps.Admin.
type adminRoutes struct {
	s *Server
	a Admin
}

// routeAdmin registers the admin summary routes (docs/api.md, "Queues").
// "overview", "namespaces",
// "tasks" and "partitions" are static segments beside "queues", and
// ".../queues/{queue}/depth" is one segment longer than the queue detail
// route, so no route shadows another.
func (s *Server) routeAdmin(r listingRoutes) {
	ar := &adminRoutes{s: s, a: s.deps.Admin}
	r.GET("/api/v1/resources/queues/{queue}/depth", ar.depth)
	r.GET("/api/v1/resources/overview", ar.overview)
	r.GET("/api/v1/resources/namespaces", ar.namespaces)
	r.GET("/api/v1/resources/tasks", ar.tasks)
	r.GET("/api/v1/resources/partitions", ar.partitions)
	r.POST("/api/v1/stats/refresh", ar.refreshStats)
}

// depth handles GET /api/v1/resources/queues/:queue/depth?group=<name>
// (JS getQueueDepth, Go GetQueueDepth; Queen's log_queue_depth_v1 shape):
// the backlog of one consumer group per partition. group is optional;
// absent or empty means the worst group per partition, as Queen answers
// (pg.Store.WorstQueueDepth; "group" is null then). :queue is
// percent-decoded.
//
//	200 {"queue","group","pending","processing","ready","partitionsPending",
//	     "partitionsReady","conflation":false,"effectivePending","effectiveReady",
//	     "partitions":[{"partition","pending","processing","ready"}]}
//
// per partition (every partition of the queue, by name): pending = stored
// messages past the group's cursor (a partition the group never popped
// counts from where its first pop would start: the beginning, or its
// subscription time); processing = those under the group's live lease;
// ready = pending - processing. The top-level counts are the sums;
// partitionsPending/partitionsReady count partitions with pending/ready > 0.
// This broker has no conflating (last-value) groups, so conflation is false
// and effectivePending/effectiveReady equal pending/ready.
// 404 {"error":"Queue not found"}; 400 for an invalid queue or group name.
func (ar *adminRoutes) depth(ctx *fasthttp.RequestCtx) {
	queue, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	group := string(ctx.QueryArgs().Peek("group"))
	if group != "" && !validName(ctx, "group", group) {
		return
	}
	c, cancel := ar.s.adminCtx()
	defer cancel()
	var d *pg.QueueDepth
	var err error
	if group == "" {
		d, err = ar.a.WorstQueueDepth(c, queue)
	} else {
		d, err = ar.a.QueueDepth(c, queue, group)
	}
	if errors.Is(err, pg.ErrQueueNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		ar.s.dbFail(ctx, "queue depth", err)
		return
	}
	var pending, processing, partsPending, partsReady int64
	parts := make([]map[string]any, len(d.Partitions))
	for i, p := range d.Partitions {
		ready := p.Pending - p.Processing
		pending += p.Pending
		processing += p.Processing
		if p.Pending > 0 {
			partsPending++
		}
		if ready > 0 {
			partsReady++
		}
		parts[i] = map[string]any{"partition": p.Name, "pending": p.Pending, "processing": p.Processing, "ready": ready}
	}
	var groupJSON any = d.Group
	if d.Group == "" {
		groupJSON = nil
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queue": d.Queue, "group": groupJSON,
		"pending": pending, "processing": processing, "ready": pending - processing,
		"partitionsPending": partsPending, "partitionsReady": partsReady, "conflation": false,
		"effectivePending": pending, "effectiveReady": pending - processing, "partitions": parts})
}

// messagesJSON renders queue-mode message counts.
func messagesJSON(m pg.MessageCounts) map[string]int64 {
	return map[string]int64{"total": m.Total, "pending": m.Pending, "processing": m.Processing}
}

// overview handles GET /api/v1/resources/overview (JS getOverview, Go
// GetOverview; Queen's get_system_overview_v3 keys, computed live):
//
//	200 {"queues","partitions","namespaces","tasks","consumerGroups",
//	     "messages":{"total","pending","processing","completed","deadLetter"},
//	     "timestamp","statsAge":0}
//
// messages are queue-mode counts (pg.MessageCounts, as GET
// /api/v1/resources/queues): total stored, pending past the queue-mode
// cursor (processing included), processing under a live lease; completed =
// total - pending, the stored messages queue mode is past; deadLetter
// counts dead-letter records of every group. namespaces and tasks count the
// distinct non-empty ones; consumerGroups the distinct named groups (queue
// mode excluded). timestamp is now (RFC 3339, UTC); statsAge is 0 because
// nothing is cached. Queen's lag, throughput and failed fields are not
// served: this broker keeps no metrics history.
func (ar *adminRoutes) overview(ctx *fasthttp.RequestCtx) {
	c, cancel := ar.s.adminCtx()
	defer cancel()
	o, err := ar.a.Overview(c)
	if err != nil {
		ar.s.dbFail(ctx, "overview", err)
		return
	}
	m := messagesJSON(o.Messages)
	m["completed"] = o.Messages.Total - o.Messages.Pending
	m["deadLetter"] = o.DeadLetters
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queues": o.Queues, "partitions": o.Partitions,
		"namespaces": o.Namespaces, "tasks": o.Tasks, "consumerGroups": o.ConsumerGroups, "messages": m,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "statsAge": 0})
}

// namespaces handles GET /api/v1/resources/namespaces (JS getNamespaces,
// Go GetNamespaces; Queen's get_namespaces_v2 keys, computed live):
//
//	200 {"namespaces":[{"namespace","queues","partitions","messages":{"total","pending","processing"}}]}
//
// one entry per non-empty namespace, by name; messages are the queue-mode
// counts summed over its queues (pending includes processing, as in GET
// /api/v1/resources/queues; Queen's rollup subtracted it).
func (ar *adminRoutes) namespaces(ctx *fasthttp.RequestCtx) {
	ar.labels(ctx, "namespaces", "namespace", ar.a.NamespaceSummaries)
}

// tasks handles GET /api/v1/resources/tasks (JS getTasks, Go GetTasks;
// Queen's get_tasks_v2 keys): as namespaces, per non-empty task:
//
//	200 {"tasks":[{"task","queues","partitions","messages":{"total","pending","processing"}}]}
func (ar *adminRoutes) tasks(ctx *fasthttp.RequestCtx) {
	ar.labels(ctx, "tasks", "task", ar.a.TaskSummaries)
}

func (ar *adminRoutes) labels(ctx *fasthttp.RequestCtx, list, key string,
	load func(context.Context) ([]pg.LabelSummary, error)) {
	c, cancel := ar.s.adminCtx()
	defer cancel()
	ls, err := load(c)
	if err != nil {
		ar.s.dbFail(ctx, list, err)
		return
	}
	out := make([]map[string]any, len(ls))
	for i, l := range ls {
		out[i] = map[string]any{key: l.Name, "queues": l.Queues, "partitions": l.Partitions,
			"messages": messagesJSON(l.Messages)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{list: out})
}

// partitions handles GET /api/v1/resources/partitions?queue=&limit=&offset=
// (JS getPartitions; Queen's C++ server did not serve it, so the shape is
// this broker's): the partitions of queue (every queue when absent or
// empty), ordered by queue then partition name; limit defaults to 100
// (clamped to 1..1000), offset to 0.
//
//	200 {"partitions":[{"id","queue","name","namespace","task","createdAt",
//	     "lastMessageAt" (null before the first message),"nextOffset",
//	     "messages":{"total","pending","processing","deadLetter"}}],
//	     "total":n,"pagination":{"limit","offset"}}
//
// messages are queue-mode counts (pg.MessageCounts) and deadLetter the
// partition's dead-letter records (every group); total counts every
// matching partition whatever limit and offset are. 404 {"error":"Queue
// not found"} when queue names no queue; 400 for an invalid queue name.
func (ar *adminRoutes) partitions(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	f := pg.PartitionFilter{Queue: string(a.Peek("queue")),
		Limit:  intArg(a, "limit", DefaultPartitionsLimit, 1, MaxPartitionsLimit),
		Offset: intArg(a, "offset", 0, 0, 1<<30)}
	if f.Queue != "" && !validName(ctx, "queue", f.Queue) {
		return
	}
	c, cancel := ar.s.adminCtx()
	defer cancel()
	ps, total, err := ar.a.ListPartitions(c, f)
	if errors.Is(err, pg.ErrQueueNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		ar.s.dbFail(ctx, "list partitions", err)
		return
	}
	out := make([]map[string]any, len(ps))
	for i, p := range ps {
		m := messagesJSON(p.Messages)
		m["deadLetter"] = p.DeadLetters
		out[i] = map[string]any{"id": p.ID.String(), "queue": p.Queue, "name": p.Name, "namespace": p.Namespace,
			"task": p.Task, "createdAt": p.CreatedAt.UTC().Format(time.RFC3339Nano),
			"lastMessageAt": timePtr(p.LastMessageAt), "nextOffset": p.NextOffset, "messages": m}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"partitions": out, "total": total,
		"pagination": map[string]int{"limit": f.Limit, "offset": f.Offset}})
}

// refreshStats handles POST /api/v1/stats/refresh (JS refreshConsumerStats,
// Go RefreshConsumerStats; Admin capability, the policy's default for an
// unlisted POST). Queen recomputed its cached stats rollup here; this broker
// caches no statistics, every summary is computed from the tables when it
// is read, so there is nothing to refresh and it answers at once:
//
//	200 {"success":true,"message":"..."}
//
// The body is ignored but must be empty (the Go SDK sends none), JSON null,
// or a JSON object (the JS SDK sends {}); anything else is 400, a body over
// the limit 413.
func (ar *adminRoutes) refreshStats(ctx *fasthttp.RequestCtx) {
	body, ok := ar.s.readBodyOrAnswer(ctx)
	if !ok {
		return
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && string(t) != "null" {
		var v map[string]any
		if err := decodeObject(t, &v); err != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true,
		"message": "statistics are computed live from the tables; nothing to refresh"})
}
