package fastapi

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// StatusReader is what the status and analytics routes read from
// PostgreSQL (pg.Status; docs/api.md, "Status and analytics", says what
// each figure means).
type StatusReader interface {
	Queues(ctx context.Context, f pg.StatusFilter, limit, offset int) ([]pg.StatusQueue, error)
	// QueueDetail returns pg.ErrQueueNotFound for an unknown queue.
	QueueDetail(ctx context.Context, name string) (*pg.StatusQueueDetail, error)
	// QueueMessages returns pg.ErrQueueNotFound for an unknown queue.
	QueueMessages(ctx context.Context, queue string, limit, offset int) (*pg.MessageList, error)
	StoredPerBucket(ctx context.Context, f pg.StatusFilter, from, to time.Time, width time.Duration) ([]pg.Bucket, error)
	Leases(ctx context.Context) (pg.LeaseSummary, error)
	DeadLetters(ctx context.Context, f pg.StatusFilter) (*pg.DeadLetterSummary, error)
	PostgresStats(ctx context.Context) (json.RawMessage, error)
}

// StatusSource is what the status routes need from the running broker
// (Deps.Runtime).
type StatusSource interface {
	// BufferStatus reports the WAL backlog now.
	BufferStatus() BufferStatus
	// ProcessSample reports this broker's process and pool figures now.
	ProcessSample() ProcessSample
}

// FilteredPopper serves GET /api/v1/pop, a pop by namespace and/or task
// (Deps.FilteredPop).
type FilteredPopper interface {
	// PopFiltered pops from one queue matching a namespace and/or task
	// (pg.FilteredPop.Pop).
	PopFiltered(ctx context.Context, req pg.FilteredPopRequest) (*pg.PopResult, error)
	// MatchingQueues names the queues matching a namespace and/or task.
	MatchingQueues(ctx context.Context, namespace, task string) ([]string, error)
}

// BufferStatus is the WAL backlog: the records fsynced in the WAL and not
// yet committed to PostgreSQL by the projector.
type BufferStatus struct {
	// Records is the number of unprojected records (one per push request).
	Records uint64
	// Items is the number of push items those records hold, or nil when
	// the backlog is over BufferItemsLimit records (they are not read).
	Items *int64
	// OldestAcceptedAt is the acceptance time of the oldest unprojected
	// record, nil when there is none (or it could not be read).
	OldestAcceptedAt *time.Time
	// DBHealthy: the projector's last PostgreSQL round trip succeeded.
	DBHealthy bool
	// BufferHealthy: the WAL accepts writes.
	BufferHealthy bool
	// Paused: push maintenance mode holds the projector.
	Paused bool
	// Checkpoint and DurableIndex are the last WAL index committed to
	// PostgreSQL and the last fsynced.
	Checkpoint, DurableIndex uint64
	// WALBytes is the WAL's size on disk.
	WALBytes int64
}

// BufferItemsLimit is the largest backlog, in records, whose items
// BufferStatus counts (each is a WAL read, which the projector's reads
// queue behind).
const BufferItemsLimit = 256

// ProcessSample is this broker's figures at one instant.
type ProcessSample struct {
	Hostname string
	Port     int
	BrokerID string
	// RSSBytes and VirtualBytes are the process's resident and virtual
	// memory, 0 where the platform does not tell (read from /proc).
	RSSBytes, VirtualBytes int64
	// HeapBytes is the Go heap in use, Goroutines how many run.
	HeapBytes  uint64
	Goroutines int
	Pool       pg.PoolStats
}

// statusTimeout bounds one status or analytics route's PostgreSQL work.
const statusTimeout = 30 * time.Second

// filteredRecheck is about how long a waiting filtered pop sleeps at most
// without a wake-up (filteredRecheckAfter): it also notices queues of the
// namespace or task created while it waited, which no wake-up names.
const filteredRecheck = 5 * time.Second

// filteredRecheckAfter is one waiting filtered pop's sleep:
// filteredRecheck ± 25%, drawn per sleep, so that filtered pops that
// arrived together do not recheck together every 5 s (300 of them did,
// scanning their namespace's queues at once, and held other producers'
// pushes up to 1.5 s, a hostile-input probe, 2026-12-07).
func filteredRecheckAfter() time.Duration {
	return filteredRecheck*3/4 + rand.N(filteredRecheck/2)
}

// maxFilteredWaitQueues is how many matching queues a waiting filtered pop
// watches for wake-ups; beyond it, it rechecks every filteredRecheck.
const maxFilteredWaitQueues = 256

func statusCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), statusTimeout)
}

// routeStatus registers the status and analytics routes: those that read
// PostgreSQL on gated (the listing gate, fastapi/listing.go), the others
// (the WAL's state, this process's figures, fixed answers, and the
// filtered pop, which is a pop, not a listing) on r.
func (s *Server) routeStatus(r, gated interface {
	GET(string, fasthttp.RequestHandler)
}) {
	gated.GET("/api/v1/status", s.status)
	gated.GET("/api/v1/status/queues", s.statusQueues)
	gated.GET("/api/v1/status/queues/{queue}", s.statusQueue)
	gated.GET("/api/v1/status/queues/{queue}/messages", s.statusQueueMessages)
	gated.GET("/api/v1/status/analytics", s.statusAnalytics)
	gated.GET("/api/v1/analytics/postgres-stats", s.postgresStats)
	r.GET("/api/v1/status/buffers", s.statusBuffers)
	r.GET("/api/v1/analytics/system-metrics", s.systemMetrics)
	r.GET("/api/v1/analytics/retention", s.retentionAnalytics)
	r.GET("/api/v1/analytics/worker-metrics", s.unrecordedSeries(map[string]any{
		"timeSeries": []any{}, "workers": []any{}, "queues": []any{}, "summary": map[string]any{}}))
	r.GET("/api/v1/analytics/queue-ops", s.unrecordedSeries(map[string]any{"series": []any{}, "queues": []any{}}))
	r.GET("/api/v1/analytics/queue-parked-replicas", s.unrecordedSeries(map[string]any{"series": []any{}, "replicas": []any{}}))
	r.GET("/api/v1/analytics/queue-lag", s.queueLag)
	r.GET("/api/v1/pop", s.popFiltered)
}

// utcMillis is Queen's timestamp form in status answers.
const utcMillis = "2006-01-02T15:04:05.000Z"

// utcSeconds is Queen's bucket timestamp form.
const utcSeconds = "2006-01-02T15:04:05Z"

func fmtTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(utcMillis)
}

// timeRange reads from and to (ISO 8601, as parseTimestamp), defaulting to
// the last def up to now; it has answered 400 and returns false for a bad
// value or from after to.
func timeRange(ctx *fasthttp.RequestCtx, def time.Duration) (time.Time, time.Time, bool) {
	a := ctx.QueryArgs()
	to := time.Now().UTC()
	if v := string(a.Peek("to")); v != "" {
		t, err := parseTimestamp(v)
		if err != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "to "+err.Error())
			return time.Time{}, time.Time{}, false
		}
		to = t
	}
	from := to.Add(-def)
	if v := string(a.Peek("from")); v != "" {
		t, err := parseTimestamp(v)
		if err != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "from "+err.Error())
			return time.Time{}, time.Time{}, false
		}
		from = t
	}
	if from.After(to) {
		writeErr(ctx, fasthttp.StatusBadRequest, "from must not be after to")
		return time.Time{}, time.Time{}, false
	}
	return from, to, true
}

// bucketMinutes is Queen's bucket width for a time range: 1 minute up to
// an hour, 5 up to 6 hours, 15 up to a day, 60 up to a week, else 360.
func bucketMinutes(d time.Duration) int {
	switch m := d.Minutes(); {
	case m <= 60:
		return 1
	case m <= 360:
		return 5
	case m <= 1440:
		return 15
	case m <= 10080:
		return 60
	}
	return 360
}

// statusFilter reads queue, namespace and task; it has answered 400 and
// returns false for an invalid name.
func statusFilter(ctx *fasthttp.RequestCtx, withQueue bool) (pg.StatusFilter, bool) {
	a := ctx.QueryArgs()
	f := pg.StatusFilter{Namespace: string(a.Peek("namespace")), Task: string(a.Peek("task"))}
	if withQueue {
		f.Queue = string(a.Peek("queue"))
	}
	for name, v := range map[string]string{"queue": f.Queue, "namespace": f.Namespace, "task": f.Task} {
		if v != "" && !validName(ctx, name, v) {
			return f, false
		}
	}
	return f, true
}

// buckets lays the counts on every bucket of width from from to to
// (aligned as pg.Status.StoredPerBucket), empty ones as 0, oldest first.
// A bucket starts at a multiple of width in Unix time, rounded down (as
// SQL's floor) also before 1970, where Go's division rounds toward zero,
// i.e. up: the bucket holding from was dropped, and a range ending before
// 1970 answered a bucket starting after to, where the counts never land.
func buckets(counts []pg.Bucket, from, to time.Time, width time.Duration) []pg.Bucket {
	byStart := make(map[int64]int64, len(counts))
	for _, c := range counts {
		byStart[c.Start.Unix()] += c.Messages
	}
	w := int64(width / time.Second)
	first, last := floorTo(from.Unix(), w), floorTo(to.Unix(), w)
	out := make([]pg.Bucket, 0, (last-first)/w+1)
	for t := first; t <= last; t += w {
		out = append(out, pg.Bucket{Start: time.Unix(t, 0).UTC(), Messages: byStart[t]})
	}
	return out
}

// floorTo returns the greatest multiple of w (> 0) not above t, negative t
// included (-90 to 60 is -120; Go's t/w*w gives -60).
func floorTo(t, w int64) int64 {
	q := t / w
	if t%w < 0 {
		q--
	}
	return q * w
}

// status handles GET /api/v1/status?from&to&queue&namespace&task (Queen's
// dashboard overview; default range the last hour). See docs/api.md,
// "Status and analytics", for each field and the ones that are zero here.
func (s *Server) status(ctx *fasthttp.RequestCtx) {
	from, to, ok := timeRange(ctx, time.Hour)
	if !ok {
		return
	}
	f, ok := statusFilter(ctx, true)
	if !ok {
		return
	}
	c, cancel := statusCtx()
	defer cancel()
	bm := bucketMinutes(to.Sub(from))
	width := time.Duration(bm) * time.Minute
	// One throughput point per bucket of the range, as analytics: bounded
	// (a range of centuries was millions of points and gigabytes).
	if n := to.Sub(from) / width; n > maxAnalyticsPoints {
		writeErr(ctx, fasthttp.StatusBadRequest, "range too long: at most "+strconv.Itoa(maxAnalyticsPoints)+
			" points of "+strconv.Itoa(bm)+" minutes")
		return
	}
	counts, err := s.deps.Status.StoredPerBucket(c, f, from, to, width)
	if err != nil {
		s.dbFail(ctx, "status throughput", err)
		return
	}
	qs, err := s.deps.Status.Queues(c, f, maxStatusQueues, 0)
	if err != nil {
		s.dbFail(ctx, "status queues", err)
		return
	}
	leases, err := s.deps.Status.Leases(c)
	if err != nil {
		s.dbFail(ctx, "status leases", err)
		return
	}
	dl, err := s.deps.Status.DeadLetters(c, f)
	if err != nil {
		s.dbFail(ctx, "status dead letters", err)
		return
	}
	bs := buckets(counts, from, to, width)
	throughput := make([]map[string]any, 0, len(bs))
	for i := len(bs) - 1; i >= 0; i-- { // newest first, as Queen
		b := bs[i]
		throughput = append(throughput, map[string]any{"timestamp": b.Start.Format(utcSeconds),
			"ingested": b.Messages, "processed": 0,
			"ingestedPerSecond": perSecond(b.Messages, width), "processedPerSecond": 0,
			"avgLagMs": nil, "maxLagMs": nil})
	}
	var total, pending, processing int64
	queues := []map[string]any{}
	for _, q := range qs {
		total += q.Total
		pending += q.Pending
		processing += q.Active
		if q.Total > 0 {
			queues = append(queues, map[string]any{"id": q.ID.String(), "name": q.Name, "namespace": q.Namespace,
				"task": q.Task, "partitions": q.Partitions, "totalConsumed": q.Completed()})
		}
	}
	topErrors := make([]map[string]any, len(dl.TopErrors))
	for i, e := range dl.TopErrors {
		topErrors[i] = map[string]any{"error": e.Error, "count": e.Count}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"timeRange":     map[string]string{"from": from.UTC().Format(utcMillis), "to": to.UTC().Format(utcMillis)},
		"bucketMinutes": bm,
		"pointCount":    len(throughput),
		"throughput":    throughput,
		"queues":        queues,
		"messages": map[string]int64{"total": total, "pending": pending, "processing": processing,
			"completed": total - pending, "failed": 0, "deadLetter": dl.Total},
		"leases": map[string]int64{"active": leases.Active, "partitionsWithLeases": leases.Partitions,
			"totalBatchSize": leases.BatchSize, "totalAcked": leases.Acked},
		"deadLetterQueue": map[string]any{"totalMessages": dl.Total, "affectedPartitions": dl.Partitions,
			"topErrors": topErrors},
		"workers":  []any{},
		"errors":   map[string]int64{"dlqMessages": dl.Total},
		"statsAge": 0,
	})
}

// maxStatusQueues bounds the queues GET /api/v1/status sums and lists.
const maxStatusQueues = 10000

func perSecond(n int64, width time.Duration) float64 {
	v := float64(n) / width.Seconds()
	return float64(int64(v*100+0.5)) / 100
}

// statusQueues handles GET /api/v1/status/queues?namespace&task&limit&offset
// (limit 100, 1..1000): queues newest first with queue-mode counts.
func (s *Server) statusQueues(ctx *fasthttp.RequestCtx) {
	f, ok := statusFilter(ctx, false)
	if !ok {
		return
	}
	a := ctx.QueryArgs()
	limit, offset := intArg(a, "limit", 100, 1, 1000), intArg(a, "offset", 0, 0, 1<<31-1)
	c, cancel := statusCtx()
	defer cancel()
	qs, err := s.deps.Status.Queues(c, f, limit, offset)
	if err != nil {
		s.dbFail(ctx, "status queues", err)
		return
	}
	out := make([]map[string]any, len(qs))
	for i, q := range qs {
		out[i] = map[string]any{"id": q.ID.String(), "name": q.Name, "namespace": q.Namespace, "task": q.Task,
			"createdAt": q.CreatedAt.UTC().Format(utcMillis), "partitions": q.Partitions,
			"messages": map[string]int64{"total": q.Total, "pending": q.Pending, "processing": q.Active,
				"completed": q.Completed()}}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queues": out,
		"pagination": map[string]int{"limit": limit, "offset": offset}})
}

// statusQueue handles GET /api/v1/status/queues/:queue: the queue with its
// configuration and per-partition queue-mode counts; 404 Queue not found.
func (s *Server) statusQueue(ctx *fasthttp.RequestCtx) {
	name, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	c, cancel := statusCtx()
	defer cancel()
	d, err := s.deps.Status.QueueDetail(c, name)
	if errors.Is(err, pg.ErrQueueNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.dbFail(ctx, "status queue", err)
		return
	}
	var tot [5]int64 // total, pending, processing, completed, dead letters
	parts := make([]map[string]any, len(d.Partitions))
	for i, p := range d.Partitions {
		counts := map[string]int64{"total": p.Total, "pending": p.Pending, "processing": p.Active,
			"completed": p.Total - p.Pending, "failed": 0, "deadLetter": p.DeadLtr}
		for j, v := range []int64{p.Total, p.Pending, p.Active, p.Total - p.Pending, p.DeadLtr} {
			tot[j] += v
		}
		parts[i] = map[string]any{"id": p.ID.String(), "name": p.Name, "createdAt": p.CreatedAt.UTC().Format(utcMillis),
			"messages": counts, "stats": counts,
			"cursor":       map[string]any{"totalConsumed": p.TotalConsumed},
			"lastActivity": fmtTime(p.LastConsumedAt), "oldestMessage": fmtTime(p.Oldest), "newestMessage": fmtTime(p.Newest)}
	}
	totals := map[string]int64{"total": tot[0], "pending": tot[1], "processing": tot[2], "completed": tot[3],
		"failed": 0, "deadLetter": tot[4]}
	o := d.Options
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"queue": map[string]any{"id": d.ID.String(), "name": d.Name, "namespace": d.Namespace, "task": d.Task,
			"priority": o.Priority, "createdAt": d.CreatedAt.UTC().Format(utcMillis),
			"config": map[string]any{"leaseTime": o.LeaseTime, "retryLimit": o.RetryLimit, "retryDelay": o.RetryDelay,
				"ttl": o.TTL, "maxQueueSize": o.MaxSize, "deadLetterQueue": o.DeadLetterQueue, "dlqAfterMaxRetries": o.DLQAfterMaxRetries,
				"delayedProcessing": o.DelayedProcessing, "windowBuffer": o.WindowBuffer,
				"retentionEnabled": o.RetentionEnabled, "retentionSeconds": o.RetentionSeconds,
				"completedRetentionSeconds": o.CompletedRetentionSeconds, "maxWaitTimeSeconds": o.MaxWaitTimeSeconds,
				"encryptionEnabled": o.EncryptionEnabled, "dedupWindowSeconds": o.DedupWindowSeconds}},
		"partitions": parts,
		"totals": map[string]any{"messages": totals, "total": tot[0], "pending": tot[1], "processing": tot[2],
			"completed": tot[3], "failed": 0, "deadLetter": tot[4]},
	})
}

// statusQueueMessages handles GET /api/v1/status/queues/:queue/messages
// ?limit&offset (limit 50, 1..1000; offset at most MaxMessagesOffset, 400
// beyond: messagesOffset): the queue's messages newest first
// with their queue-mode status, as an array; 404 Queue not found.
func (s *Server) statusQueueMessages(ctx *fasthttp.RequestCtx) {
	name, ok := pathName(ctx, "queue")
	if !ok {
		return
	}
	a := ctx.QueryArgs()
	limit := intArg(a, "limit", 50, 1, 1000)
	offset, ok := messagesOffset(ctx, "GET /api/v1/messages?queue=… pages further back by its to parameter")
	if !ok {
		return
	}
	c, cancel := statusCtx()
	defer cancel()
	l, err := s.deps.Status.QueueMessages(c, name, limit, offset)
	if errors.Is(err, pg.ErrQueueNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.dbFail(ctx, "status queue messages", err)
		return
	}
	out := make([]map[string]any, len(l.Messages))
	for i, m := range l.Messages {
		out[i] = map[string]any{"id": m.ID.String(), "transactionId": m.TransactionID, "partitionId": m.PartitionID.String(),
			"queuePath": m.Queue + "/" + m.Partition, "queue": m.Queue, "partition": m.Partition, "offset": m.Offset,
			"status": m.Status, "createdAt": time.UnixMicro(m.CreatedAtMicros).UTC().Format(utcMillis)}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// statusBuffers handles GET /api/v1/status/buffers: the WAL backlog, in
// Queen's file-buffer shape ({pending, failed, dbHealthy, worker}) plus
// this broker's own fields.
func (s *Server) statusBuffers(ctx *fasthttp.RequestCtx) {
	b := s.deps.Runtime.BufferStatus()
	var oldestAge any
	if b.OldestAcceptedAt != nil {
		oldestAge = max(time.Since(*b.OldestAcceptedAt).Seconds(), 0)
	}
	var items any
	if b.Items != nil {
		items = *b.Items
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"pending": b.Records, "failed": 0, "dbHealthy": b.DBHealthy, "worker": 0,
		"records": b.Records, "items": items,
		"oldestAcceptedAt": fmtTime(b.OldestAcceptedAt), "oldestAgeSeconds": oldestAge,
		"bufferHealthy": b.BufferHealthy, "paused": b.Paused,
		"checkpoint": b.Checkpoint, "walIndex": b.DurableIndex, "walBytes": b.WALBytes,
	})
}

// statusAnalytics handles GET /api/v1/status/analytics?from&to&interval
// &queue&namespace&task (Queen's get_analytics shape; default range the
// last 24 hours, interval minute, hour (default) or day): messages stored
// per interval.
func (s *Server) statusAnalytics(ctx *fasthttp.RequestCtx) {
	from, to, ok := timeRange(ctx, 24*time.Hour)
	if !ok {
		return
	}
	f, ok := statusFilter(ctx, true)
	if !ok {
		return
	}
	interval := string(ctx.QueryArgs().Peek("interval"))
	width := time.Hour
	switch interval {
	case "minute":
		width = time.Minute
	case "day":
		width = 24 * time.Hour
	case "", "hour":
		interval = "hour"
	default:
		writeErr(ctx, fasthttp.StatusBadRequest, "interval must be minute, hour or day")
		return
	}
	if n := to.Sub(from) / width; n > maxAnalyticsPoints {
		writeErr(ctx, fasthttp.StatusBadRequest, "range too long for interval "+interval+": at most "+
			strconv.Itoa(maxAnalyticsPoints)+" points")
		return
	}
	c, cancel := statusCtx()
	defer cancel()
	counts, err := s.deps.Status.StoredPerBucket(c, f, from, to, width)
	if err != nil {
		s.dbFail(ctx, "status analytics", err)
		return
	}
	bs := buckets(counts, from, to, width)
	points := make([]map[string]any, len(bs))
	for i, b := range bs {
		points[i] = map[string]any{"timestamp": b.Start.Format(utcMillis), "messages": b.Messages}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"dataPoints": points, "interval": interval,
		"from": from.UTC().Format(utcMillis), "to": to.UTC().Format(utcMillis)})
}

// maxAnalyticsPoints bounds the buckets of one analytics or status answer
// (the time buckets of its range; a longer range is a 400).
const maxAnalyticsPoints = 10000

// stat is Queen's aggregate of one metric over a bucket, here a single
// sample: avg, min, max and last are the same value.
func stat(v float64) map[string]float64 {
	return map[string]float64{"avg": v, "min": v, "max": v, "last": v}
}

// systemMetrics handles GET /api/v1/analytics/system-metrics?from&to: this
// broker as Queen's one replica, with one sample taken now (the broker
// keeps no metrics history), when now lies in the range; else no points.
func (s *Server) systemMetrics(ctx *fasthttp.RequestCtx) {
	from, to, ok := timeRange(ctx, time.Hour)
	if !ok {
		return
	}
	now := time.Now().UTC()
	p := s.deps.Runtime.ProcessSample()
	series := []map[string]any{}
	if !now.Before(from) && !now.After(to.Add(time.Minute)) {
		metrics := map[string]any{
			"database": map[string]any{"pool_size": stat(float64(p.Pool.Max)), "pool_idle": stat(float64(p.Pool.Idle)),
				"pool_active": stat(float64(p.Pool.Acquired))},
			"runtime": map[string]any{"heap_bytes": stat(float64(p.HeapBytes)), "goroutines": stat(float64(p.Goroutines))},
		}
		if p.RSSBytes > 0 {
			metrics["memory"] = map[string]any{"rss_bytes": stat(float64(p.RSSBytes)), "virtual_bytes": stat(float64(p.VirtualBytes))}
		}
		series = append(series, map[string]any{"timestamp": now.Truncate(time.Minute).Format(utcMillis),
			"sampleCount": 1, "metrics": metrics})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"timeRange": map[string]string{"from": from.UTC().Format(utcMillis), "to": to.UTC().Format(utcMillis)},
		"replicas": []map[string]any{{"hostname": p.Hostname, "port": p.Port, "workerId": p.BrokerID,
			"timeSeries": series}},
		"replicaCount": 1, "bucketMinutes": 1, "pointCount": len(series),
	})
}

// postgresStats handles GET /api/v1/analytics/postgres-stats
// (pg.Status.PostgresStats).
func (s *Server) postgresStats(ctx *fasthttp.RequestCtx) {
	c, cancel := statusCtx()
	defer cancel()
	b, err := s.deps.Status.PostgresStats(c)
	if err != nil {
		s.dbFail(ctx, "postgres stats", err)
		return
	}
	writeJSONBytes(ctx, fasthttp.StatusOK, b)
}

// retentionAnalytics handles GET /api/v1/analytics/retention?from&to: the
// broker records no retention history (a retention pass deletes whole
// segments and logs how many), so the series is empty and the totals zero.
func (s *Server) retentionAnalytics(ctx *fasthttp.RequestCtx) {
	from, to, ok := timeRange(ctx, time.Hour)
	if !ok {
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"timeRange":     map[string]string{"from": from.UTC().Format(utcMillis), "to": to.UTC().Format(utcMillis)},
		"bucketMinutes": bucketMinutes(to.Sub(from)),
		"series":        []any{},
		"totals": map[string]int{"retentionMsgs": 0, "completedRetentionMsgs": 0, "evictionMsgs": 0,
			"totalMsgs": 0, "eventCount": 0},
	})
}

// unrecordedSeries answers an analytics route whose figures are Queen's
// per-worker, per-minute counters, which this broker does not record:
// Queen's envelope (timeRange, bucketMinutes, pointCount 0) with the
// route's series and lists empty (fields).
func (s *Server) unrecordedSeries(fields map[string]any) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		from, to, ok := timeRange(ctx, time.Hour)
		if !ok {
			return
		}
		out := map[string]any{
			"timeRange":     map[string]string{"from": from.UTC().Format(utcMillis), "to": to.UTC().Format(utcMillis)},
			"bucketMinutes": bucketMinutes(to.Sub(from)), "pointCount": 0,
		}
		for k, v := range fields {
			out[k] = v
		}
		writeJSON(ctx, fasthttp.StatusOK, out)
	}
}

// queueLag handles GET /api/v1/analytics/queue-lag?from&to&queue: Queen
// answers a bare array of per-minute lag measured at pop; this broker does
// not measure it, so the array is empty.
func (s *Server) queueLag(ctx *fasthttp.RequestCtx) {
	if _, _, ok := timeRange(ctx, time.Hour); !ok {
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, []any{})
}

// popFilter is the namespace/task of a filtered pop (GET /api/v1/pop).
type popFilter struct{ namespace, task string }

// popFiltered handles GET /api/v1/pop?namespace&task with the parameters of
// a queue pop: it pops from one queue matching the namespace and/or task
// (pg.FilteredPop), through the queue pop's loop (popWith).
func (s *Server) popFiltered(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	f := &popFilter{namespace: string(a.Peek("namespace")), task: string(a.Peek("task"))}
	if f.namespace == "" && f.task == "" {
		writeErr(ctx, fasthttp.StatusBadRequest, "namespace or task is required")
		return
	}
	for name, v := range map[string]string{"namespace": f.namespace, "task": f.task} {
		if v != "" && !validName(ctx, name, v) {
			return
		}
	}
	s.popWith(ctx, f)
}

// label names a filtered pop in logs.
func (f *popFilter) label() string {
	return "namespace=" + strconv.Quote(f.namespace) + " task=" + strconv.Quote(f.task)
}

// popOnce is one pop attempt: of req.Queue, or filtered by f.
func (s *Server) popOnce(ctx context.Context, f *popFilter, req pg.PopRequest) (*pg.PopResult, error) {
	if f == nil {
		return s.deps.Consumer.Pop(ctx, req)
	}
	return s.deps.FilteredPop.PopFiltered(ctx, pg.FilteredPopRequest{Namespace: f.namespace, Task: f.task, PopRequest: req})
}

// popWaitChan is the channel a waiting pop sleeps on: the queue's, or for a
// filtered pop one closed when any matching queue (up to
// maxFilteredWaitQueues) is woken, or after filteredRecheckAfter.
func (s *Server) popWaitChan(f *popFilter, queue string) <-chan struct{} {
	if f == nil {
		return s.deps.Consumer.WaitChan(queue)
	}
	out := make(chan struct{})
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	names, err := s.deps.FilteredPop.MatchingQueues(c, f.namespace, f.task)
	cancel()
	if err != nil || len(names) > maxFilteredWaitQueues {
		names = nil
	}
	cases := make([]reflect.SelectCase, 0, len(names)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(filteredRecheckAfter()))})
	for _, n := range names {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.deps.Consumer.WaitChan(n))})
	}
	// Ends within filteredRecheckAfter, woken or not: no goroutine
	// outlives it.
	go func() {
		reflect.Select(cases)
		close(out)
	}()
	return out
}

// popTarget is the queue and partition of a pop: from the path, or for a
// filtered pop its label (for logs; pg.FilteredPop chooses the queue). It
// has answered 400 and returns false for an invalid name in the path.
func popTarget(ctx *fasthttp.RequestCtx, f *popFilter) (queue, partition string, ok bool) {
	if f != nil {
		return f.label(), "", true
	}
	if queue, ok = pathName(ctx, "queue"); !ok {
		return "", "", false
	}
	partition, ok = optionalPathName(ctx, "partition")
	return queue, partition, ok
}
