package fastapi

import (
	"context"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/internal/metrics"
)

// PipelineReporter is what GET /api/v1/system/pipeline needs: the WAL,
// projector and PostgreSQL figures; ctx bounds its PostgreSQL round-trip.
type PipelineReporter interface {
	Pipeline(ctx context.Context) PipelineStatus
}

// PipelineStatus is the body of GET /api/v1/system/pipeline: the durability
// pipeline of this broker (WAL → projector → PostgreSQL) at one moment,
// with the counters and latency histograms a reader needs to derive rates
// from two successive answers. The web console polls it (docs/console.md).
type PipelineStatus struct {
	// Time is when the status was taken (RFC 3339, UTC).
	Time time.Time `json:"time"`
	// BrokerID is this broker's id (the broker.id file).
	BrokerID    string              `json:"brokerId"`
	WAL         PipelineWAL         `json:"wal"`
	Projector   PipelineProjector   `json:"projector"`
	Postgres    PipelinePostgres    `json:"postgres"`
	Maintenance PipelineMaintenance `json:"maintenance"`
	// Metrics are the Prometheus counters and histograms (the same values
	// /metrics prints) at Time.
	Metrics metrics.Snapshot `json:"metrics"`
}

// PipelineWAL describes the local write-ahead log.
type PipelineWAL struct {
	// Bytes is the size of the WAL's segment files (queen_wal_bytes);
	// MaxBytes is QUEEN_WAL_MAX_BYTES (0 = no cap).
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"maxBytes"`
	// FirstIndex..DurableIndex are the records kept on disk; Records is
	// how many (0 when the log is empty). DurableIndex is the last fsynced
	// record (queen_wal_durable_index).
	FirstIndex   uint64 `json:"firstIndex"`
	DurableIndex uint64 `json:"durableIndex"`
	Records      uint64 `json:"records"`
	// Healthy is false after a WAL write failed (the last push answered
	// failed), true again after one succeeds.
	Healthy bool `json:"healthy"`
}

// PipelineProjector describes the projector loop.
type PipelineProjector struct {
	// Checkpoint is the last WAL index committed to PostgreSQL
	// (queen_projector_checkpoint); Backlog the durable records after it
	// (queen_projector_backlog). CheckpointConfirmed is false while the
	// broker has not reached PostgreSQL since it started: Checkpoint is
	// then the one the broker kept from its last run
	// (projector.Config.CheckpointHint; 0 without one).
	Checkpoint          uint64 `json:"checkpoint"`
	CheckpointConfirmed bool   `json:"checkpointConfirmed"`
	Backlog             uint64 `json:"backlog"`
	// OldestUnprojectedAt is the acceptance time of the first record not
	// yet in PostgreSQL, and LagSeconds how long ago that was; both null
	// when the backlog is empty (LagSeconds is then 0) or the record
	// cannot be read.
	OldestUnprojectedAt *time.Time `json:"oldestUnprojectedAt"`
	LagSeconds          *float64   `json:"lagSeconds"`
	// Paused is true in push maintenance mode.
	Paused bool `json:"paused"`
	// DBHealthy is whether the loop's last PostgreSQL round-trip worked.
	DBHealthy bool `json:"dbHealthy"`
	// Stopped, when not empty, is the error that keeps the projector from
	// advancing until an operator acts (docs/operations.md).
	Stopped string `json:"stopped,omitempty"`
	// LastError is the last projection error ("" after a success).
	LastError string `json:"lastError,omitempty"`
}

// PipelinePostgres is the result of a real round-trip to PostgreSQL, made
// for this answer with a timeout of PipelinePingTimeout.
type PipelinePostgres struct {
	Healthy bool `json:"healthy"`
	// PingMillis is the round-trip time in milliseconds.
	PingMillis float64 `json:"pingMillis"`
	// Error is the failure ("" when healthy).
	Error string `json:"error,omitempty"`
}

// PipelineMaintenance is push and pop maintenance mode.
type PipelineMaintenance struct {
	Push bool `json:"push"`
	Pop  bool `json:"pop"`
}

// PipelinePingTimeout bounds the PostgreSQL round-trip of one
// GET /api/v1/system/pipeline.
const PipelinePingTimeout = time.Second

// routePipeline registers GET /api/v1/system/pipeline (admin, as every
// /api/v1/system route: auth/roles.go).
func (s *Server) routePipeline(r *router.Router) {
	r.GET("/api/v1/system/pipeline", s.pipeline)
}

// pipeline answers 200 with a PipelineStatus, also while PostgreSQL is
// away (Postgres.Healthy is then false): it is the page an operator reads
// during an outage.
func (s *Server) pipeline(ctx *fasthttp.RequestCtx) {
	c, cancel := context.WithTimeout(context.Background(), PipelinePingTimeout)
	defer cancel()
	writeJSON(ctx, fasthttp.StatusOK, s.deps.Pipeline.Pipeline(c))
}
