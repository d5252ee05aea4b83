package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Histogram is a cumulative histogram as Prometheus keeps it: how many
// observations, their sum (seconds for the latency histograms), and per
// upper bound how many observations were at most that bound (the last
// bound is +Inf, encoded as a nil UpperBound so it stays valid JSON).
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket of a Histogram; UpperBound nil is +Inf.
type Bucket struct {
	UpperBound *float64 `json:"le"`
	Count      uint64   `json:"count"`
}

// Snapshot is the value of this broker's counters and histograms at one
// moment, as /metrics would print them. Counters only grow while the
// process lives, so a reader derives rates from two snapshots (the web
// console does, docs/console.md).
type Snapshot struct {
	// PushItems is queen_push_items_total by status (queued, duplicate,
	// buffered, failed), each present (0 before its first push).
	PushItems map[string]float64 `json:"pushItems"`
	// Popped is queen_popped_messages_total.
	Popped float64 `json:"popped"`
	// Acks is queen_acks_total summed over status, by result (ok,
	// rejected), both present (0 before the first ack).
	Acks map[string]float64 `json:"acks"`
	// WALFsync is queen_wal_fsync_seconds.
	WALFsync Histogram `json:"walFsyncSeconds"`
	// ProjectorBatch is queen_projector_batch_seconds{outcome="ok"}, and
	// ProjectorErrors the count of outcome="error".
	ProjectorBatch  Histogram `json:"projectorBatchSeconds"`
	ProjectorErrors uint64    `json:"projectorBatchErrors"`
	// ProjectedItems is queen_projector_batch_items_sum: items committed to
	// PostgreSQL by this broker's projector.
	ProjectedItems float64 `json:"projectedItems"`
}

// Snapshot reads the metrics. It never fails: a metric that cannot be
// read (which client_golang does not do for these kinds) is left zero.
func (m *Metrics) Snapshot() Snapshot {
	s := Snapshot{PushItems: map[string]float64{}, Acks: map[string]float64{}}
	for _, c := range collect(m.PushItems) {
		s.PushItems[label(c, "status")] += c.GetCounter().GetValue()
	}
	for _, c := range collect(m.Acks) {
		s.Acks[label(c, "result")] += c.GetCounter().GetValue()
	}
	for _, c := range collect(m.Popped) {
		s.Popped += c.GetCounter().GetValue()
	}
	for _, c := range collect(m.WALFsync) {
		s.WALFsync = histogram(c.GetHistogram())
	}
	for _, c := range collect(m.ProjectorBatch) {
		switch label(c, "outcome") {
		case "ok":
			s.ProjectorBatch = histogram(c.GetHistogram())
		case "error":
			s.ProjectorErrors = c.GetHistogram().GetSampleCount()
		}
	}
	for _, c := range collect(m.ProjectorItems) {
		s.ProjectedItems = c.GetHistogram().GetSampleSum()
	}
	if s.ProjectorBatch.Buckets == nil {
		s.ProjectorBatch.Buckets = []Bucket{}
	}
	if s.WALFsync.Buckets == nil {
		s.WALFsync.Buckets = []Bucket{}
	}
	return s
}

// collect returns the written form of every metric c holds.
func collect(c prometheus.Collector) []*dto.Metric {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var out []*dto.Metric
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			out = append(out, &d)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histogram(h *dto.Histogram) Histogram {
	out := Histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: make([]Bucket, 0, len(h.GetBucket())+1)}
	for _, b := range h.GetBucket() {
		ub := b.GetUpperBound()
		out.Buckets = append(out.Buckets, Bucket{UpperBound: &ub, Count: b.GetCumulativeCount()})
	}
	out.Buckets = append(out.Buckets, Bucket{Count: h.GetSampleCount()})
	return out
}
