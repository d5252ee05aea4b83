package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// pipelineSample is what the runner reads from the broker's /metrics
// around a push scenario's measured phase: the sums and counts of the
// push's two stages (queen_push_stage_seconds), of the committed
// projection transactions (queen_projector_batch_seconds{outcome="ok"})
// and of their items (queen_projector_batch_items), with the time read.
type pipelineSample struct {
	at                    time.Time
	walSum, walN          float64
	projSum, projN        float64
	batchSum, batchN      float64
	batchItems            float64
	hasStages, hasBatches bool
}

// PipelineFigures are a push scenario's figures from the broker's own
// metrics over its measured phase (pushes and catch-up): where a push's
// time went and how busy the one projector loop was. Zero when the broker
// does not export them (a broker before queen_push_stage_seconds).
type PipelineFigures struct {
	// PushWALMs and PushProjectionMs are the mean stage times, in
	// milliseconds, of the pushes answered with verdicts: body in to
	// record fsynced, and fsynced to verdicts (docs/operations.md).
	PushWALMs        float64 `json:"push_wal_ms"`
	PushProjectionMs float64 `json:"push_projection_ms"`
	// BatchMs is the mean committed projection transaction, in ms, and
	// BatchItems its mean items.
	BatchMs    float64 `json:"batch_ms"`
	BatchItems float64 `json:"batch_items"`
	// ProjectorBusy is the share of the phase's wall time spent in
	// committed projection transactions (0-1): near 1, the projector's
	// single transaction chain sets the rate.
	ProjectorBusy float64 `json:"projector_busy"`
}

// readPipeline reads a pipelineSample from base's GET /metrics.
func readPipeline(ctx context.Context, base string) (pipelineSample, error) {
	s := pipelineSample{at: time.Now()}
	var fams map[string]*dto.MetricFamily
	err := getMetrics(ctx, base, func(r io.Reader) error {
		p := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		if fams, err = p.TextToMetricFamilies(r); err != nil {
			return fmt.Errorf("bench: parse /metrics: %w", err)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	if f := fams["queen_push_stage_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			switch label(m, "stage") {
			case "wal":
				s.walSum, s.walN = h.GetSampleSum(), float64(h.GetSampleCount())
				s.hasStages = true
			case "projection":
				s.projSum, s.projN = h.GetSampleSum(), float64(h.GetSampleCount())
			}
		}
	}
	if f := fams["queen_projector_batch_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if label(m, "outcome") == "ok" {
				h := m.GetHistogram()
				s.batchSum, s.batchN = h.GetSampleSum(), float64(h.GetSampleCount())
				s.hasBatches = true
			}
		}
	}
	if f := fams["queen_projector_batch_items"]; f != nil && len(f.GetMetric()) == 1 {
		s.batchItems = f.GetMetric()[0].GetHistogram().GetSampleSum()
	}
	return s, nil
}

// label returns m's value of the label name ("" when it has none).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// pipelineFigures computes the figures between two samples; what a
// sample lacks (the broker does not export it) stays zero.
func pipelineFigures(before, after pipelineSample) PipelineFigures {
	var f PipelineFigures
	if n := after.walN - before.walN; after.hasStages && n > 0 {
		f.PushWALMs = (after.walSum - before.walSum) / n * 1e3
	}
	if n := after.projN - before.projN; after.hasStages && n > 0 {
		f.PushProjectionMs = (after.projSum - before.projSum) / n * 1e3
	}
	if n := after.batchN - before.batchN; after.hasBatches && n > 0 {
		f.BatchMs = (after.batchSum - before.batchSum) / n * 1e3
		f.BatchItems = (after.batchItems - before.batchItems) / n
		if wall := after.at.Sub(before.at).Seconds(); wall > 0 {
			f.ProjectorBusy = (after.batchSum - before.batchSum) / wall
		}
	}
	return f
}
