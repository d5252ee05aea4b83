// Package metrics holds the broker's Prometheus metrics (client_golang)
// and serves them in the text exposition format on GET /metrics.
package metrics

import (
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
	// buffered, failed).
	PushItems *prometheus.CounterVec
	// WALFsync is the duration of each WAL group-commit fsync, seconds.
	WALFsync prometheus.Histogram
	// ProjectorBatch is the duration of each projection transaction,
	// seconds, by outcome (ok, error).
	ProjectorBatch *prometheus.HistogramVec
	// ProjectorItems is the number of items per committed batch.
	ProjectorItems prometheus.Histogram
	// Popped counts delivered messages; Acks counts acks by status and
	// result (ok, rejected).
	Popped prometheus.Counter
	Acks   *prometheus.CounterVec
}

// New registers the metrics plus gauges read from the given functions:
// walIndex (last fsynced WAL index), checkpoint (last WAL index committed
// to PostgreSQL), backlog (the difference) and walBytes (bytes of the WAL's
// segment files, what QUEEN_WAL_MAX_BYTES caps).
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
		Popped: prometheus.NewCounter(prometheus.CounterOpts{Name: "queen_popped_messages_total",
			Help: "Messages delivered by pops."}),
		Acks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_acks_total",
			Help: "Acks by status and result."}, []string{"status", "result"}),
	}
	r.MustRegister(m.PushItems, m.WALFsync, m.ProjectorBatch, m.ProjectorItems, m.Popped, m.Acks,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_wal_durable_index", Help: "Last fsynced WAL index."}, walIndex),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_projector_checkpoint", Help: "Last WAL index committed to PostgreSQL."}, checkpoint),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_projector_backlog", Help: "WAL records not yet in PostgreSQL."}, backlog),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_wal_bytes", Help: "Bytes of the WAL's segment files."}, walBytes),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in Prometheus text format.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
}
