// Package broker wires the parts of one broker together: WAL, projector,
// PostgreSQL store, push pipeline and HTTP server. cmd/queen runs one from
// the environment; tests run them in-process.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/metrics"
	"github.com/queenmq/queen-go/internal/waker"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// maintenanceKey and popMaintenanceKey are the system_state keys of push
// and pop maintenance mode.
const (
	maintenanceKey    = "maintenance_mode"
	popMaintenanceKey = "pop_maintenance_mode"
)

// flagRefresh is how often the maintenance flag is re-read from
// PostgreSQL, so that a flag set through another broker takes effect here.
const flagRefresh = 2 * time.Second

// Config of a broker. See cmd/queen for the environment variables.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// PGURL is the PostgreSQL connection URL.
	PGURL string
	// WALDir is the WAL directory (FILE_BUFFER_DIR). It also holds the
	// broker id file.
	WALDir string
	// MaxBodyBytes is the push body limit in bytes (QUEEN_MAX_BODY_BYTES).
	MaxBodyBytes int
	// WAL, Projector and HTTP tune the parts; zero values take defaults.
	WAL            wal.Options
	Projector      projector.Config
	HTTP           fastapi.Config
	VerdictTimeout time.Duration
	// RetentionInterval is how often a retention pass runs
	// (RETENTION_INTERVAL; default 5 minutes).
	RetentionInterval time.Duration
	PoolSize          int32
	// Auth configures JWT authentication (off unless Auth.Enabled).
	Auth auth.Config
	// EncryptionKey encrypts payloads of queues with encryptionEnabled in
	// PostgreSQL (QUEEN_ENCRYPTION_KEY); nil = such queues are stored in
	// plaintext with a warning.
	EncryptionKey *crypt.Key
	// Now is the clock that stamps acceptance times on pushes (default
	// time.Now); tests set it to drive the dedup window deterministically.
	Now    func() time.Time
	Logger *slog.Logger
}

// Broker is a running broker.
type Broker struct {
	cfg       Config
	log       *slog.Logger
	ID        uuid.UUID
	WAL       *wal.Log
	Store     *pg.Store
	Projector *projector.Projector
	pipeline  *ingest.Pipeline
	status    *pg.Status
	filtered  *pg.FilteredPop
	http      *fastapi.Server
	ln        net.Listener

	waker    *waker.Waker
	verifier *auth.Verifier
	// Metrics are this broker's Prometheus metrics.
	Metrics     *metrics.Metrics
	popMaint    atomic.Bool
	maintenance atomic.Bool
	flagDirty   atomic.Bool // set locally but not yet persisted
	walHealthy  atomic.Bool

	stopOnce sync.Once
	cancel   context.CancelFunc
	bg       sync.WaitGroup
	serveErr chan error
}

// BrokerID reads or creates the broker id file in dir.
func BrokerID(dir string) (uuid.UUID, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return uuid.Nil, err
	}
	p := filepath.Join(dir, "broker.id")
	if b, err := os.ReadFile(p); err == nil {
		return uuid.Parse(strings.TrimSpace(string(b)))
	}
	id := uuid.New()
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id.String()+"\n"), 0o640); err != nil {
		return uuid.Nil, err
	}
	f, err := os.Open(tmp)
	if err == nil {
		_ = f.Sync()
		f.Close()
	}
	if err := os.Rename(tmp, p); err != nil {
		return uuid.Nil, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return id, nil
}

// Start opens the WAL (repairing a torn tail), starts the projector and the
// HTTP server. PostgreSQL need not be reachable.
func Start(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}
	id, err := BrokerID(cfg.WALDir)
	if err != nil {
		return nil, fmt.Errorf("broker id: %w", err)
	}
	b.ID = id
	b.Metrics = metrics.New(
		func() float64 { return float64(b.WAL.DurableIndex()) },
		func() float64 { return float64(b.Projector.Checkpoint()) },
		func() float64 { return float64(b.Projector.Backlog()) },
		func() float64 { return float64(b.WAL.Size()) })
	wo := cfg.WAL
	wo.Logger = cfg.Logger
	wo.ObserveSync = func(d time.Duration) { b.Metrics.WALFsync.Observe(d.Seconds()) }
	if wo.MaxRecordBytes == 0 && cfg.MaxBodyBytes > 0 {
		// A record holds the body's payloads plus per-item overhead; an item
		// takes at least ~30 body bytes, so 2× the body bounds it.
		wo.MaxRecordBytes = max(2*cfg.MaxBodyBytes, wal.DefaultMaxRecordBytes)
	}
	w, rep, err := wal.Open(filepath.Join(cfg.WALDir, "wal"), wo)
	if err != nil {
		return nil, err
	}
	if rep != nil {
		b.log.Warn("broker: WAL tail was cut on open", "report", rep.String())
	}
	b.WAL = w
	b.walHealthy.Store(true)
	store, err := pg.Open(pg.Config{URL: cfg.PGURL, PoolSize: cfg.PoolSize, EncryptionKey: cfg.EncryptionKey, Logger: cfg.Logger})
	if err != nil {
		w.Close()
		return nil, err
	}
	b.Store = store
	b.status = pg.NewStatus(store)
	b.filtered = pg.NewFilteredPop(store)
	reg := ingest.NewRegistry()
	b.waker = waker.New()
	pc := cfg.Projector
	pc.ObserveBatch = func(items int, d time.Duration, err error) {
		if err != nil {
			b.Metrics.ProjectorBatch.WithLabelValues("error").Observe(d.Seconds())
			return
		}
		b.Metrics.ProjectorBatch.WithLabelValues("ok").Observe(d.Seconds())
		b.Metrics.ProjectorItems.Observe(float64(items))
	}
	pc.OnCommit = func(queues []string) {
		for _, q := range queues {
			b.waker.Wake(q)
		}
	}
	pc.BrokerID = id
	pc.Logger = cfg.Logger
	b.Projector = projector.New(pc, w, store, reg)
	b.pipeline = &ingest.Pipeline{WAL: w, Registry: reg, Gate: b.Projector, Maintenance: b.maintenance.Load,
		VerdictTimeout: cfg.VerdictTimeout, Now: cfg.Now}

	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	// Learn the maintenance flag before the first push is projected.
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	if on, err := b.readFlag(fctx); err == nil && on {
		b.maintenance.Store(true)
		b.Projector.Pause()
	}
	fcancel()
	if err := b.Projector.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	b.bg.Add(3)
	go b.flagLoop(ctx)
	go b.retentionLoop(ctx)
	go func() {
		defer b.bg.Done()
		b.Store.Listen(ctx, b.waker.Wake, b.log)
	}()

	ac := cfg.Auth
	ac.Logger = cfg.Logger
	verifier, err := auth.New(ctx, ac)
	if err != nil {
		b.Stop(context.Background())
		return nil, fmt.Errorf("auth: %w", err)
	}
	b.verifier = verifier
	hc := cfg.HTTP
	hc.MaxBodyBytes = cfg.MaxBodyBytes
	if verifier.Enabled() {
		hc.Auth = verifier
	}
	hc.Metrics = b.Metrics.Handler()
	hc.Logger = cfg.Logger
	b.http = fastapi.New(hc, b, b.Store, b.status)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		b.Stop(context.Background())
		return nil, err
	}
	b.ln = ln
	go func() { b.serveErr <- b.http.Serve(ln) }()
	b.log.Info("broker started", "addr", ln.Addr().String(), "broker_id", id, "wal", cfg.WALDir,
		"wal_durable_index", w.DurableIndex())
	return b, nil
}

func (b *Broker) readFlag(ctx context.Context) (bool, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return false, err
	}
	if pop, err := b.Store.GetFlag(ctx, popMaintenanceKey); err == nil {
		b.popMaint.Store(pop)
	}
	return b.Store.GetFlag(ctx, maintenanceKey)
}

// flagLoop persists a maintenance flag set while PostgreSQL was away and
// adopts flags set through other brokers.
func (b *Broker) flagLoop(ctx context.Context) {
	defer b.bg.Done()
	t := time.NewTicker(flagRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		if b.flagDirty.Load() {
			if err := b.Store.SetFlag(c, maintenanceKey, b.maintenance.Load()); err == nil {
				b.flagDirty.Store(false)
			}
		} else if on, err := b.readFlag(c); err == nil && on != b.maintenance.Load() && !b.flagDirty.Load() {
			b.applyMaintenance(on)
		}
		cancel()
	}
}

func (b *Broker) applyMaintenance(on bool) {
	b.maintenance.Store(on)
	if on {
		b.Projector.Pause()
	} else {
		b.Projector.Resume()
	}
	b.log.Info("maintenance mode", "enabled", on)
}

// Addr is the address the HTTP server listens on.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// Push implements fastapi.Broker.
func (b *Broker) Push(ctx context.Context, body []byte, producerSub *string) ([]ingest.Result, error) {
	res, err := b.pipeline.Push(ctx, body, producerSub)
	// One counter update per run of equal verdicts (a push's items mostly
	// share one), not one label lookup per item.
	for i := 0; i < len(res); {
		j := i + 1
		for j < len(res) && res[j].Status == res[i].Status {
			j++
		}
		b.Metrics.PushItems.WithLabelValues(string(res[i].Status)).Add(float64(j - i))
		i = j
	}
	if err == nil && len(res) > 0 {
		b.walHealthy.Store(res[0].Status != ingest.StatusFailed)
	} else if errors.Is(err, ingest.ErrMaintenanceWrite) {
		b.walHealthy.Store(false)
	}
	return res, err
}

// Configure implements fastapi.Broker.
func (b *Broker) Configure(ctx context.Context, queue, namespace, task string, o pg.QueueOptions) (*pg.ConfigureResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	return b.Store.Configure(ctx, queue, namespace, task, ingest.DefaultPartition, o)
}

// Health implements fastapi.Broker: the error that stopped the projector
// (projector.Stopped), else a real round-trip to PostgreSQL.
func (b *Broker) Health(ctx context.Context) error {
	if err := b.Projector.Stopped(); err != nil {
		return err
	}
	return b.Store.Ping(ctx)
}

// SetMaintenance implements fastapi.Broker. The mode takes effect on this
// broker at once; persisting it (for other brokers and restarts) is retried
// in the background when PostgreSQL is away, and that error is returned.
func (b *Broker) SetMaintenance(ctx context.Context, on bool) error {
	b.flagDirty.Store(true)
	b.applyMaintenance(on)
	if err := b.Store.SetFlag(ctx, maintenanceKey, on); err != nil {
		return err
	}
	b.flagDirty.Store(false)
	return nil
}

// MaintenanceStatus implements fastapi.Broker.
func (b *Broker) MaintenanceStatus() fastapi.MaintenanceStatus {
	return fastapi.MaintenanceStatus{
		MaintenanceMode: b.maintenance.Load(),
		BufferedEntries: b.Projector.Backlog(),
		BufferHealthy:   b.walHealthy.Load(),
		DBHealthy:       b.Projector.Healthy(),
		Checkpoint:      b.Projector.Checkpoint(),
		DurableIndex:    b.WAL.DurableIndex(),
	}
}

// Stop shuts down gracefully: stop accepting, finish in-flight requests
// (until ctx ends), stop the projector after its transaction in flight,
// flush and close the WAL. Idempotent.
func (b *Broker) Stop(ctx context.Context) error {
	var errs []error
	b.stopOnce.Do(func() {
		if b.http != nil && b.ln != nil {
			errs = append(errs, b.http.Shutdown(ctx))
		}
		b.Projector.Stop()
		b.cancel()
		if b.verifier != nil {
			b.verifier.Close()
		}
		b.bg.Wait()
		errs = append(errs, b.WAL.Close())
		b.Store.Close()
	})
	return errors.Join(errs...)
}

// Pop implements fastapi.Consumer.
func (b *Broker) Pop(ctx context.Context, req pg.PopRequest) (*pg.PopResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := b.Store.Pop(ctx, req)
	if err == nil {
		b.Metrics.Popped.Add(float64(len(res.Messages)))
	}
	return res, err
}

// Ack implements fastapi.Consumer; a released lease wakes waiting pops
// (here at once; on other brokers by the NOTIFY pg.Store.Ack commits with
// the ack).
func (b *Broker) Ack(ctx context.Context, reqs []pg.AckRequest) ([]pg.AckResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := b.Store.Ack(ctx, reqs)
	if err != nil {
		return nil, err
	}
	woken := map[string]bool{}
	for i, r := range res {
		result := "ok"
		if !r.Success {
			result = "rejected"
		}
		b.Metrics.Acks.WithLabelValues(reqs[i].Status, result).Inc()
		if r.LeaseReleased && !woken[r.QueueName] {
			woken[r.QueueName] = true
			b.waker.Wake(r.QueueName)
		}
	}
	return res, nil
}

// ReleaseLease implements fastapi.Consumer.
func (b *Broker) ReleaseLease(ctx context.Context, leaseID uuid.UUID, queue string) error {
	if _, err := b.Store.ReleaseLease(ctx, leaseID); err != nil {
		return err
	}
	b.WakeQueue(ctx, queue)
	return nil
}

// ExtendLease implements fastapi.Consumer.
func (b *Broker) ExtendLease(ctx context.Context, leaseID uuid.UUID, seconds int) (time.Time, string, error) {
	return b.Store.ExtendLease(ctx, leaseID, seconds)
}

// WakeQueue implements fastapi.Consumer: local waiters at once, other
// brokers through NOTIFY.
func (b *Broker) WakeQueue(ctx context.Context, queue string) {
	b.waker.Wake(queue)
	b.Store.NotifyQueue(ctx, queue)
}

// WaitChan implements fastapi.Consumer.
func (b *Broker) WaitChan(queue string) <-chan struct{} { return b.waker.Chan(queue) }

// PopMaintenance implements fastapi.Consumer.
func (b *Broker) PopMaintenance() bool { return b.popMaint.Load() }

// SetPopMaintenance implements fastapi.Consumer: effective at once here,
// persisted for other brokers (the error says persisting failed).
func (b *Broker) SetPopMaintenance(ctx context.Context, on bool) error {
	b.popMaint.Store(on)
	return b.Store.SetFlag(ctx, popMaintenanceKey, on)
}

// Transaction implements fastapi.Transactor: pushes and acks in one
// PostgreSQL transaction (see pg.Store.Transaction for why transactional
// pushes bypass the WAL); stored queues and released leases wake pops.
func (b *Broker) Transaction(ctx context.Context, pushes []pg.ProjectItem, acks []pg.AckRequest) (*pg.TxResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := b.Store.Transaction(ctx, pushes, acks)
	if err != nil {
		return nil, err
	}
	woken := map[string]bool{}
	for _, p := range pushes {
		woken[p.Queue] = true
	}
	for _, a := range res.Acks {
		if a.LeaseReleased {
			woken[a.QueueName] = true
		}
	}
	for q := range woken {
		b.WakeQueue(ctx, q)
	}
	return res, nil
}

// DefaultRetentionInterval is how often retention runs by default.
const DefaultRetentionInterval = 5 * time.Minute

// retentionLoop deletes expired segments (pg.Store.RetentionPass) on an
// interval; one broker at a time does the work (advisory lock).
func (b *Broker) retentionLoop(ctx context.Context) {
	defer b.bg.Done()
	every := b.cfg.RetentionInterval
	if every <= 0 {
		every = DefaultRetentionInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			c, cancel := context.WithTimeout(ctx, time.Minute)
			n, err := b.Store.RetentionPass(c, 1000)
			cancel()
			if err != nil {
				b.log.Warn("retention pass failed", "err", err)
				break
			}
			if n > 0 {
				b.log.Info("retention: deleted segments", "segments", n)
			}
			if n < 1000 {
				break
			}
		}
	}
}
