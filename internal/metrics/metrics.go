// Package metrics holds the broker's Prometheus metrics (client_golang)
// and serves them in the text exposition format on GET /metrics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Metrics of one broker. Create with New; every broker in a process (tests)
// has its own registry.
type Metrics struct {
	Registry *prometheus.Registry
	// PushItems counts push verdicts by status (queued, duplicate,
	// buffered, failed). The push path adds through PushItemsFor.
	PushItems *prometheus.CounterVec
	// pushItems are PushItems' children for pushStatuses, resolved in New
	// (PushItemsFor).
	pushItems [len(pushStatuses)]prometheus.Counter
	// WALFsync is the duration of each WAL group-commit fsync, seconds.
	WALFsync prometheus.Histogram
	// ProjectorBatch is the duration of each projection transaction,
	// seconds, by outcome (ok, error).
	ProjectorBatch *prometheus.HistogramVec
	// ProjectorItems is the number of items per committed batch.
	ProjectorItems prometheus.Histogram
	// PushStage is a push's time in each of its two stages, seconds, by
	// stage: "wal" (from the body handed to the pipeline to its record
	// fsynced) and "projection" (from then to its verdicts); observed
	// through ObservePushStages for pushes answered with verdicts
	// (ingest.Pipeline.ObserveStages says which).
	PushStage *prometheus.HistogramVec
	// pushWAL and pushProjection are PushStage's two children, resolved
	// once in New.
	pushWAL, pushProjection prometheus.Observer
	// Popped counts delivered messages; Acks counts acks by status and
	// result (ok, rejected).
	Popped prometheus.Counter
	Acks   *prometheus.CounterVec
}

// New registers the metrics plus gauges read from the given functions:
// walIndex (last fsynced WAL index), checkpoint (last WAL index committed
// to PostgreSQL), backlog (the difference) and walBytes (bytes of the WAL's
// records in its segment files, what QUEEN_WAL_MAX_BYTES caps; a tail
// segment's zero padding and the prepared next segment are not counted).
func New(walIndex, checkpoint, backlog, walBytes func() float64) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		PushItems: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_push_items_total",
			Help: "Push verdicts by status."}, []string{"status"}),
		WALFsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "queen_wal_fsync_seconds",
			Help: "WAL group-commit fsync duration.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		ProjectorBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "queen_projector_batch_seconds",
			Help: "Projection transaction duration by outcome.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)},
			[]string{"outcome"}),
		ProjectorItems: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "queen_projector_batch_items",
			Help: "Items per committed projection batch.", Buckets: prometheus.ExponentialBuckets(1, 2, 16)}),
		PushStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "queen_push_stage_seconds",
			Help:    "Time of a push answered with verdicts in each stage: wal (body in to record fsynced), projection (fsynced to verdicts).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17)}, []string{"stage"}),
		Popped: prometheus.NewCounter(prometheus.CounterOpts{Name: "queen_popped_messages_total",
			Help: "Messages delivered by pops."}),
		Acks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_acks_total",
			Help: "Acks by status and result."}, []string{"status", "result"}),
	}
	m.pushWAL, m.pushProjection = m.PushStage.WithLabelValues("wal"), m.PushStage.WithLabelValues("projection")
	// Every documented label value exists from the start, at zero (as the
	// unlabelled metrics do): a series that appeared only with its first
	// event would make rate() and increase() miss that event, so an alert
	// on rate(queen_push_items_total{status="failed"}[5m]) > 0
	// (docs/operations.md) would not fire on the first failures, and a
	// dashboard would show no series instead of 0 after a restart.
	for i, s := range pushStatuses {
		m.pushItems[i] = m.PushItems.WithLabelValues(s)
	}
	for _, s := range ackStatuses {
		for _, r := range ackResults {
			m.Acks.WithLabelValues(s, r)
		}
	}
	for _, o := range batchOutcomes {
		m.ProjectorBatch.WithLabelValues(o)
	}
	r.MustRegister(m.PushItems, m.WALFsync, m.ProjectorBatch, m.ProjectorItems, m.PushStage, m.Popped, m.Acks,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_wal_durable_index", Help: "Last fsynced WAL index."}, walIndex),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_projector_checkpoint", Help: "Last WAL index committed to PostgreSQL."}, checkpoint),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_projector_backlog", Help: "WAL records not yet in PostgreSQL."}, backlog),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_wal_bytes", Help: "Bytes of the WAL's records in its segment files (zero padding and the prepared next segment not counted)."}, walBytes),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// RegisterPopAnswers adds the gauges of the HTTP server's pop answer
// budget (QUEEN_MAX_PENDING_ANSWER_BYTES): pending, the bytes of pop
// answers over 64 KiB built and not yet written, and a counter of the pops
// it held to one message.
func (m *Metrics) RegisterPopAnswers(pending, oneMessage func() float64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_pop_answer_pending_bytes",
			Help: "Bytes of pop answers over 64 KiB built and not yet written (QUEEN_MAX_PENDING_ANSWER_BYTES bounds them)."}, pending),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_pop_one_message_total",
			Help: "Pops held to one message because answers not yet written held the pop answer budget."}, oneMessage))
}

// pushStatuses are queen_push_items_total's status values, each present
// from New on: the push verdicts (ingest.Status, docs/push.md
// "Verdicts").
var pushStatuses = [...]string{"queued", "duplicate", "buffered", "failed"}

// ackStatuses are queen_acks_total's status values, each present from
// New on (with both results): the ack statuses the HTTP routes accept
// (pg.AckCompleted ... pg.AckRetry, docs/consume.md "Ack"); an ack sent
// without one is counted as "completed".
var ackStatuses = [...]string{"completed", "success", "failed", "dlq", "retry"}

// ackResults are queen_acks_total's result values: the ack applied, or
// refused (a lease not live, an unknown message).
var ackResults = [...]string{"ok", "rejected"}

// batchOutcomes are queen_projector_batch_seconds' outcome values: the
// transaction committed, or failed.
var batchOutcomes = [...]string{"ok", "error"}

// PushItemsFor returns PushItems' counter for status, the same counter
// PushItems.WithLabelValues(status) returns. The push path calls it once
// per push: for the four verdict statuses the child is read from the
// array New filled, where WithLabelValues hashes the label and takes the
// vector's lock on every call (1.4% of the broker's CPU samples at 64
// pushes of one item each). Other statuses go to WithLabelValues.
func (m *Metrics) PushItemsFor(status string) prometheus.Counter {
	for i, s := range pushStatuses {
		if s == status {
			return m.pushItems[i]
		}
	}
	return m.PushItems.WithLabelValues(status)
}

// ObservePushStages records one push's two stage times (PushStage); the
// push path calls it once per push answered with verdicts, without a
// label lookup.
func (m *Metrics) ObservePushStages(wal, projection time.Duration) {
	m.pushWAL.Observe(wal.Seconds())
	m.pushProjection.Observe(projection.Seconds())
}

// Handler serves the registry in Prometheus text format.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
}
