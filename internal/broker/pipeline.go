package broker

import (
	"context"
	"sync"
	"time"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
)

// lagCache remembers the acceptance time of the first unprojected WAL
// record, so that polling the pipeline status reads a WAL record only when
// the checkpoint has moved (a record can be as large as the body limit).
type lagCache struct {
	mu         sync.Mutex
	index      uint64 // 0 = nothing cached
	acceptedAt time.Time
}

// oldestUnprojected returns the acceptance time of WAL record index, read
// from the WAL once per index; ok is false when it cannot be read (already
// truncated, damaged, or not a push record).
func (b *Broker) oldestUnprojected(index uint64) (time.Time, bool) {
	b.lag.mu.Lock()
	defer b.lag.mu.Unlock()
	if b.lag.index == index {
		return b.lag.acceptedAt, true
	}
	var at int64
	err := b.WAL.View(index, func(p []byte) (err error) {
		at, _, err = ingest.RecordHeader(p)
		return err
	})
	if err != nil {
		return time.Time{}, false
	}
	b.lag.index, b.lag.acceptedAt = index, time.UnixMicro(at).UTC()
	return b.lag.acceptedAt, true
}

// Pipeline implements fastapi.Broker: the WAL's and projector's state from
// memory, a PostgreSQL round-trip bounded by ctx, and the metrics.
func (b *Broker) Pipeline(ctx context.Context) fastapi.PipelineStatus {
	now := time.Now().UTC()
	st := fastapi.PipelineStatus{Time: now, BrokerID: b.ID.String()}
	first, durable := b.WAL.FirstIndex(), b.WAL.DurableIndex()
	st.WAL = fastapi.PipelineWAL{Bytes: b.WAL.Size(), MaxBytes: b.WAL.MaxBytes(),
		FirstIndex: first, DurableIndex: durable, Healthy: b.walHealthy.Load()}
	if durable >= first {
		st.WAL.Records = durable - first + 1
	}
	p := &st.Projector
	p.Checkpoint, p.Backlog = b.Projector.Checkpoint(), b.Projector.Backlog()
	p.CheckpointConfirmed = b.Projector.CheckpointConfirmed()
	p.Paused, p.DBHealthy = b.Projector.Paused(), b.Projector.Healthy()
	if err := b.Projector.Stopped(); err != nil {
		p.Stopped = err.Error()
	}
	if err := b.Projector.LastError(); err != nil {
		p.LastError = err.Error()
	}
	if p.Backlog == 0 {
		zero := 0.0
		p.LagSeconds = &zero
	} else if at, ok := b.oldestUnprojected(p.Checkpoint + 1); ok {
		lag := max(now.Sub(at).Seconds(), 0)
		p.OldestUnprojectedAt, p.LagSeconds = &at, &lag
	}
	start := time.Now()
	if err := b.Store.Ping(ctx); err != nil {
		st.Postgres.Error = err.Error()
	} else {
		st.Postgres.Healthy = true
	}
	st.Postgres.PingMillis = float64(time.Since(start).Microseconds()) / 1000
	st.Maintenance = fastapi.PipelineMaintenance{Push: b.Maintenance.PushEnabled(), Pop: b.Maintenance.PopEnabled()}
	st.Metrics = b.Metrics.Snapshot()
	return st
}
