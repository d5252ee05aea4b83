package fastapi

import (
	"context"
	"errors"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// Resources is what the queue, consumer-group and DLQ routes need.
type Resources interface {
	ListQueues(ctx context.Context) ([]pg.QueueSummary, error)
	GetQueue(ctx context.Context, name string) (*pg.QueueDetail, error)
	DeleteQueue(ctx context.Context, name string) (bool, error)
	ListGroups(ctx context.Context) ([]pg.GroupSummary, error)
	GetGroup(ctx context.Context, group string) ([]pg.GroupPartition, error)
	DeleteGroup(ctx context.Context, group, queue string) (cursors int64, metadata bool, queues []string, err error)
	Seek(ctx context.Context, group, queue, partition string, toEnd bool, at time.Time) (int64, error)
	ListDeadLetters(ctx context.Context, queue, group string, limit, offset int) ([]pg.DeadLetter, error)
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
	r.GET("/api/v1/consumer-groups/{group}", s.getGroup)
	r.DELETE("/api/v1/consumer-groups/{group}", s.deleteGroup)
	r.DELETE("/api/v1/consumer-groups/{group}/queues/{queue}", s.deleteGroup)
	r.POST("/api/v1/consumer-groups/{group}/queues/{queue}/seek", s.seek)
	r.POST("/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", s.seek)
	r.GET("/api/v1/dlq", s.listDLQ)
}

func dbCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (s *Server) dbFail(ctx *fasthttp.RequestCtx, what string, err error) {
	s.log.Error(what+" failed", "err", err)
	writeErr(ctx, fasthttp.StatusServiceUnavailable, "database unavailable")
}

func (s *Server) listQueues(ctx *fasthttp.RequestCtx) {
	c, cancel := dbCtx()
	defer cancel()
	qs, err := s.r.ListQueues(c)
	if err != nil {
		s.dbFail(ctx, "list queues", err)
		return
	}
	out := make([]map[string]any, len(qs))
	for i, q := range qs {
		out[i] = map[string]any{"id": q.ID.String(), "name": q.Name, "namespace": q.Namespace, "task": q.Task,
			"createdAt": q.CreatedAt.UTC().Format(time.RFC3339Nano), "partitions": q.Partitions,
			"messages": map[string]int64{"total": q.Total, "pending": q.Pending, "processing": q.Processing}}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queues": out})
}

func timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (s *Server) getQueue(ctx *fasthttp.RequestCtx) {
	name, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	c, cancel := dbCtx()
	defer cancel()
	d, err := s.r.GetQueue(c, name)
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
			"nextOffset": p.NextOffset, "depth": p.Depth, "lag": p.Lag,
			"stats": map[string]int64{"total": p.Depth, "pending": p.Pending, "processing": p.Processing,
				"completed": p.NextOffset - p.Pending, "deadLetter": p.DeadLetter},
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
	c, cancel := dbCtx()
	defer cancel()
	existed, err := s.r.DeleteQueue(c, name)
	if err != nil {
		s.dbFail(ctx, "delete queue", err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"deleted": true, "queue": name, "existed": existed})
}

func groupState(g pg.GroupSummary) string {
	switch {
	case g.Members == 0 && g.TotalLag > 0 && g.MaxTimeLagSeconds > 300:
		return "Dead"
	case g.MaxTimeLagSeconds > 300:
		return "Lagging"
	}
	return "Stable"
}

func (s *Server) listGroups(ctx *fasthttp.RequestCtx) {
	c, cancel := dbCtx()
	defer cancel()
	gs, err := s.r.ListGroups(c)
	if err != nil {
		s.dbFail(ctx, "list groups", err)
		return
	}
	out := make([]map[string]any, len(gs))
	for i, g := range gs {
		out[i] = map[string]any{"name": g.Name, "topics": []string{g.Queue}, "queueName": g.Queue, "members": g.Members,
			"partitionsWithLag": g.PartitionsWithLag, "totalLag": g.TotalLag, "maxTimeLag": g.MaxTimeLagSeconds,
			"state": groupState(g), "subscriptionMode": g.SubscriptionMode,
			"subscriptionTimestamp": timePtr(g.SubscriptionFrom), "subscriptionCreatedAt": timePtr(g.CreatedAt)}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) getGroup(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	c, cancel := dbCtx()
	defer cancel()
	ps, err := s.r.GetGroup(c, group)
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

func (s *Server) deleteGroup(ctx *fasthttp.RequestCtx) {
	group, ok := pathName(ctx, "group")
	if !ok {
		return
	}
	queue, ok := optionalPathName(ctx, "queue")
	if !ok {
		return
	}
	c, cancel := dbCtx()
	defer cancel()
	n, meta, touched, err := s.r.DeleteGroup(c, group, queue)
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
		s.c.WakeQueue(c, q)
	}
	writeJSON(ctx, fasthttp.StatusOK, res)
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
	c, cancel := dbCtx()
	defer cancel()
	n, err := s.r.Seek(c, group, queue, partition, req.ToEnd, at)
	if err != nil {
		s.dbFail(ctx, "seek", err)
		return
	}
	s.c.WakeQueue(c, queue)
	res := map[string]any{"success": true, "consumerGroup": group, "queueName": queue, "seekToEnd": req.ToEnd,
		"partitionsUpdated": n}
	if !req.ToEnd {
		res["targetTimestamp"] = at.UTC().Format(time.RFC3339Nano)
	}
	writeJSON(ctx, fasthttp.StatusOK, res)
}

func (s *Server) listDLQ(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	limit := intArg(a, "limit", 100, 1, 1000)
	offset := intArg(a, "offset", 0, 0, 1<<30)
	c, cancel := dbCtx()
	defer cancel()
	dls, err := s.r.ListDeadLetters(c, string(a.Peek("queue")), string(a.Peek("consumerGroup")), limit, offset)
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
		"pagination": map[string]int{"limit": limit, "offset": offset}})
}
