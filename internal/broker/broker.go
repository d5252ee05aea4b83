// Package broker wires the parts of one broker together: it builds the
// WAL, the PostgreSQL store, the push pipeline and the HTTP server, starts
// the long-running services in order (maintenance modes, projector,
// retention, LISTEN) and stops them in reverse. The logic lives in those
// parts; what is here is wiring, the metrics hooks and the thin methods
// through which fastapi reaches them where the broker itself combines
// parts (fastapi.Deps names each capability). cmd/queen runs one from the
// environment; tests run them in-process.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/console"
	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/maintenance"
	"github.com/queenmq/queen-go/internal/metrics"
	"github.com/queenmq/queen-go/internal/retention"
	"github.com/queenmq/queen-go/internal/waker"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

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
	// MaxPushItems is the most items one push may carry
	// (QUEEN_MAX_PUSH_ITEMS): 0 means ingest.DefaultMaxPushItems, negative
	// means no limit.
	MaxPushItems int
	// MaxPushPartitions is the most distinct partitions one push may name
	// (QUEEN_MAX_PUSH_PARTITIONS): 0 means
	// ingest.DefaultMaxPushPartitions, negative no limit.
	MaxPushPartitions int
	// WAL, Projector and HTTP tune the parts; zero values take defaults.
	WAL            wal.Options
	Projector      projector.Config
	HTTP           fastapi.Config
	VerdictTimeout time.Duration
	// RetentionInterval is how often retention runs (RETENTION_INTERVAL;
	// default retention.DefaultInterval, 5 minutes).
	RetentionInterval time.Duration
	PoolSize          int32
	// PlainSegments stores segment bodies uncompressed
	// (QUEEN_SEGMENT_COMPRESSION=false; pg.Config.PlainSegments).
	PlainSegments bool
	// MaxPopBytes bounds one pop's messages in bytes (QUEEN_MAX_POP_BYTES;
	// pg.Config.MaxPopBytes; 0: pg.DefaultMaxPopBytes).
	MaxPopBytes int64
	// Auth configures JWT authentication (off unless Auth.Enabled).
	Auth auth.Config
	// Console configures the web console (QUEEN_CONSOLE,
	// QUEEN_CONSOLE_PATH); the zero value serves it at "/".
	Console console.Config
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

	// Maintenance holds push and pop maintenance mode (the one owner the
	// projector, the push pipeline and the HTTP routes read).
	Maintenance *maintenance.Service
	retention   *retention.Service
	listener    *pg.Listener
	// services run from Start to Stop: started in this order, stopped in
	// reverse.
	services []service

	waker    *waker.Waker
	verifier *auth.Verifier
	// Metrics are this broker's Prometheus metrics.
	Metrics    *metrics.Metrics
	walHealthy atomic.Bool
	lag        lagCache // pipeline.go

	stopOnce sync.Once
	cancel   context.CancelFunc
	serveErr chan error
}

// service is a long-running loop: Start returns once it runs, Stop (also
// before Start, also twice) ends it and waits.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// DirError is an error of Start about the broker directory
// (Config.WALDir, FILE_BUFFER_DIR): it cannot be created, its broker.id
// cannot be read or created, or its WAL cannot be opened. Dir is that
// directory, Err the cause (which names the file or step). cmd/queen
// turns it into an error naming FILE_BUFFER_DIR.
type DirError struct {
	Dir string
	Err error
}

func (e *DirError) Error() string { return fmt.Sprintf("broker directory %s: %v", e.Dir, e.Err) }
func (e *DirError) Unwrap() error { return e.Err }

// BrokerID reads or creates the broker id file in dir (creating dir if
// missing). A broker.id that exists but cannot be read or parsed is an
// error naming the file, never replaced by a new id: the id is the key of
// this WAL's checkpoint in PostgreSQL, and a new one would orphan it.
func BrokerID(dir string) (uuid.UUID, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return uuid.Nil, err
	}
	p := filepath.Join(dir, "broker.id")
	if b, err := os.ReadFile(p); err == nil {
		id, err := uuid.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return uuid.Nil, fmt.Errorf("%s: %w", p, err)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return uuid.Nil, err // the PathError names the file
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

// Start opens the WAL (repairing a torn tail), starts the services and the
// HTTP server. PostgreSQL need not be reachable: the maintenance modes are
// then read when it returns (waiting at most maintenance.DefaultTimeout
// here).
func Start(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Broker{log: cfg.Logger, serveErr: make(chan error, 1)}
	id, err := BrokerID(cfg.WALDir)
	if err != nil {
		return nil, &DirError{Dir: cfg.WALDir, Err: fmt.Errorf("broker id: %w", err)}
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
		return nil, &DirError{Dir: cfg.WALDir, Err: err}
	}
	if rep != nil {
		b.log.Warn("broker: WAL tail was cut on open", "report", rep.String())
	}
	b.WAL = w
	b.walHealthy.Store(true)
	store, err := pg.Open(pg.Config{URL: cfg.PGURL, PoolSize: cfg.PoolSize, EncryptionKey: cfg.EncryptionKey, Logger: cfg.Logger,
		PlainSegments: cfg.PlainSegments, MaxPopBytes: cfg.MaxPopBytes})
	if err != nil {
		w.Close()
		return nil, err
	}
	b.Store = store
	b.status = pg.NewStatus(store)
	b.filtered = pg.NewFilteredPop(store, func() uint64 { return b.waker.Generation("") })
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
	b.Maintenance = maintenance.New(maintenance.Config{Logger: cfg.Logger, OnChange: func(m maintenance.Mode, _ bool) {
		if m == maintenance.Push {
			b.Projector.MaintenanceChanged()
		}
	}}, store)
	pc.Maintenance = b.Maintenance
	pc.BrokerID = id
	pc.Logger = cfg.Logger
	if pc.CheckpointHint == "" {
		pc.CheckpointHint = filepath.Join(cfg.WALDir, "checkpoint.hint")
	}
	b.Projector = projector.New(pc, w, store, reg)
	b.pipeline = &ingest.Pipeline{WAL: w, Registry: reg, Gate: b.Projector, Maintenance: b.Maintenance.PushEnabled,
		ObserveStages:  b.Metrics.ObservePushStages,
		VerdictTimeout: cfg.VerdictTimeout, Now: cfg.Now, MaxItems: cfg.MaxPushItems,
		Prepare: b.preparePartitions}
	if b.pipeline.MaxItems == 0 {
		b.pipeline.MaxItems = ingest.DefaultMaxPushItems
	} else if b.pipeline.MaxItems < 0 {
		b.pipeline.MaxItems = 0
	}
	switch b.pipeline.MaxPartitions = cfg.MaxPushPartitions; {
	case cfg.MaxPushPartitions == 0:
		b.pipeline.MaxPartitions = ingest.DefaultMaxPushPartitions
	case cfg.MaxPushPartitions < 0:
		b.pipeline.MaxPartitions = 0
	}
	b.retention = retention.New(retention.Config{Interval: cfg.RetentionInterval, Logger: cfg.Logger}, store)
	b.listener = pg.NewListener(store, b.waker.Wake, cfg.Logger)
	// Listen only while a pop waits here: this broker's own commits wake
	// its waiters directly, and a NOTIFY delivered to a broker without
	// waiters is work for nothing on both sides.
	b.listener.ListenOnDemand(b.waker, pg.DefaultListenLinger)

	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	// The maintenance modes first: a broker restarting in maintenance mode
	// projects nothing before it has read the flag.
	b.services = []service{b.Maintenance, b.Projector, b.retention, b.listener}
	for _, s := range b.services {
		if err := s.Start(ctx); err != nil {
			b.Stop(context.Background())
			return nil, err
		}
	}

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
	hc.MaxPopBytes = cfg.MaxPopBytes                // the answer budget's unit (fastapi/answerbudget.go)
	hc.MaxPushPartitions = b.pipeline.MaxPartitions // the transaction route's pushes too
	if verifier.Enabled() {
		hc.Auth = verifier
	}
	hc.Metrics = b.Metrics.Handler()
	if hc.Console, err = console.New(cfg.Console); err != nil {
		b.Stop(context.Background())
		return nil, err
	}
	hc.Logger = cfg.Logger
	st := newStreams(b) // internal/broker/streams.go
	b.http, err = fastapi.New(hc, fastapi.Deps{
		Pusher:         b,
		Configurer:     b,
		Health:         b,
		Maintenance:    b,
		Consumer:       b,
		FilteredPop:    b,
		Transactor:     b,
		Resources:      b.Store,
		Admin:          b.Store,
		Messages:       b.Store,
		Traces:         b.Store,
		Status:         b.status,
		Runtime:        b,
		Streams:        st,
		MessageDeleter: st,
		Pipeline:       b,
	})
	if err != nil {
		b.Stop(context.Background())
		return nil, err
	}
	srv := b.http
	b.Metrics.RegisterPopAnswers(
		func() float64 { return float64(srv.PendingAnswerBytes()) },
		func() float64 { return float64(srv.OneMessagePops()) })
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

// Addr is the address the HTTP server listens on.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// Push implements fastapi.Pusher: the push pipeline, with the push
// metrics and the WAL health it reports.
func (b *Broker) Push(ctx context.Context, body []byte, producerSub *string) ([]ingest.Result, error) {
	res, err := b.pipeline.Push(ctx, body, producerSub)
	// One counter update per run of equal verdicts (a push's items mostly
	// share one), not one label lookup per item.
	for i := 0; i < len(res); {
		j := i + 1
		for j < len(res) && res[j].Status == res[i].Status {
			j++
		}
		b.Metrics.PushItemsFor(string(res[i].Status)).Add(float64(j - i))
		i = j
	}
	if err == nil && len(res) > 0 {
		b.walHealthy.Store(res[0].Status != ingest.StatusFailed)
	} else if errors.Is(err, ingest.ErrMaintenanceWrite) {
		b.walHealthy.Store(false)
	}
	return res, err
}

// Drain implements fastapi.Pusher: the HTTP server is shutting down
// (ingest.Registry.Drain).
func (b *Broker) Drain() { b.pipeline.Registry.Drain() }

// Configure implements fastapi.Configurer (the schema first: PostgreSQL
// may have been away at start).
func (b *Broker) Configure(ctx context.Context, queue string, namespace, task *string, o pg.QueueOptions) (*pg.ConfigureResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	return b.Store.ConfigureQueue(ctx, queue, namespace, task, ingest.DefaultPartition, o)
}

// Health implements fastapi.HealthChecker: the error that stopped the projector
// (projector.Stopped), else a real round-trip to PostgreSQL.
func (b *Broker) Health(ctx context.Context) error {
	if err := b.Projector.Stopped(); err != nil {
		return err
	}
	return b.Store.Ping(ctx)
}

// SetMaintenance implements fastapi.MaintenanceControl (maintenance.Service.Set): the
// mode takes effect on this broker at once; persisting it (for other
// brokers and restarts) is retried in the background when PostgreSQL is
// away, and that error is returned.
func (b *Broker) SetMaintenance(ctx context.Context, on bool) error {
	return b.Maintenance.SetPush(ctx, on)
}

// MaintenanceStatus implements fastapi.MaintenanceControl.
func (b *Broker) MaintenanceStatus() fastapi.MaintenanceStatus {
	return fastapi.MaintenanceStatus{
		MaintenanceMode: b.Maintenance.PushEnabled(),
		BufferedEntries: b.Projector.Backlog(),
		BufferHealthy:   b.walHealthy.Load(),
		DBHealthy:       b.Projector.Healthy(),
		Checkpoint:      b.Projector.Checkpoint(),
		DurableIndex:    b.WAL.DurableIndex(),
	}
}

// Stop shuts down gracefully: stop accepting, finish in-flight requests
// (until ctx ends), stop the services in reverse order (the projector
// after its transaction in flight), flush and close the WAL. Idempotent.
func (b *Broker) Stop(ctx context.Context) error {
	var errs []error
	b.stopOnce.Do(func() {
		if b.http != nil && b.ln != nil {
			errs = append(errs, b.http.Shutdown(ctx))
		}
		for i := len(b.services) - 1; i >= 0; i-- {
			b.services[i].Stop()
		}
		b.cancel()
		if b.verifier != nil {
			b.verifier.Close()
		}
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
	var woken []string // queues woken so far (a batch names one or a few)
	for i := range res {
		if r := &res[i]; r.LeaseReleased && !slices.Contains(woken, r.QueueName) {
			woken = append(woken, r.QueueName)
			b.waker.Wake(r.QueueName)
		}
	}
	b.countAcks(reqs, res)
	return res, nil
}

// countAcks adds acks (reqs[i] answered res[i]) to queen_acks_total: once
// per run of acks with the same status and result (a batch of a whole
// lease is one run), not once per ack, whose label lookup was 100
// hashings per ack/batch of 100. The status label is the ack's status as
// sent, an ack without one counted as "completed", the status it is
// applied as (docs/consume.md, "Ack"); the HTTP routes refuse any status
// outside pg's five, so the label's values are bounded.
func (b *Broker) countAcks(reqs []pg.AckRequest, res []pg.AckResult) {
	for i := 0; i < len(res); {
		status, ok := reqs[i].Status, res[i].Success
		j := i + 1
		for j < len(res) && reqs[j].Status == status && res[j].Success == ok {
			j++
		}
		if status == "" {
			status = pg.AckCompleted
		}
		result := "ok"
		if !ok {
			result = "rejected"
		}
		b.Metrics.Acks.WithLabelValues(status, result).Add(float64(j - i))
		i = j
	}
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

// WakeGeneration implements fastapi.Consumer.
func (b *Broker) WakeGeneration(queue string) uint64 { return b.waker.Generation(queue) }

// PopMaintenance implements fastapi.MaintenanceControl.
func (b *Broker) PopMaintenance() bool { return b.Maintenance.PopEnabled() }

// SetPopMaintenance implements fastapi.MaintenanceControl (maintenance.Service.Set):
// effective at once here, persisted for other brokers and restarts (the
// error says persisting failed; it is retried in the background).
func (b *Broker) SetPopMaintenance(ctx context.Context, on bool) error {
	return b.Maintenance.SetPop(ctx, on)
}

// Transaction implements fastapi.Transactor: pushes and acks in one
// PostgreSQL transaction (see pg.Store.Transaction for why transactional
// pushes bypass the WAL); stored queues and released leases wake pops.
func (b *Broker) Transaction(ctx context.Context, pushes []pg.ProjectItem, acks []pg.AckRequest) (*pg.TxResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := b.Store.Transaction(ctx, pushes, acks)
	if abort, ok := errors.AsType[*pg.TxAbort](err); ok && !abort.Push && abort.Index < len(acks) {
		// The refused ack counts as rejected, as on the ack routes; the
		// rest of the rolled-back transaction applied nothing and counts
		// nothing.
		b.countAcks(acks[abort.Index:abort.Index+1], []pg.AckResult{{}})
	}
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
	// Counted as the WAL path's pushes and the ack routes' acks are. Every
	// push of a committed transaction is queued: a duplicate aborts the
	// whole transaction, which then counts nothing but a refused ack.
	if len(res.Pushes) > 0 {
		b.Metrics.PushItemsFor(string(ingest.StatusQueued)).Add(float64(len(res.Pushes)))
	}
	b.countAcks(acks, res.Acks)
	return res, nil
}

// prepareTimeout bounds the creation of a push's new queues and
// partitions before its WAL append (preparePartitions), the wait for a
// turn included: 1,000 new queues take 0.1-0.2 s of PostgreSQL (durable,
// 100,000 queues already there).
const prepareTimeout = 2 * time.Second

// prepareMinMissing is how many partitions a push must name that the
// projector's cache lacks for the push to create them itself
// (preparePartitions); fewer are left to the projector, which creates
// those of a whole batch of pushes in one statement. Created on the
// pushes' goroutines, queen-bench push-16x100-p1M-new (100 new partitions
// per push) took 60-70% more CPU per message and ran 15-25% slower
// (docs/decisions.md, "New queues are created before the WAL append"),
// while 128 new queues hold the projector for about 20 ms.
const prepareMinMissing = 128

// preparePartitions is the push pipeline's Prepare: it creates the
// queues and partitions of items that the projector's cache does not
// know, on the push's goroutine (pg.Store.PreparePartitions), within
// prepareTimeout. An error only means the projector creates them, as it
// did before: it is logged at debug level.
func (b *Broker) preparePartitions(items []ingest.Item) {
	if len(items) < prepareMinMissing {
		// Too few items to name that many partitions: nothing to look
		// at (the common push pays nothing for this).
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	n, err := b.Store.PreparePartitions(ctx, func(yield func(string, string) bool) {
		for i := range items {
			if !yield(items[i].Queue, items[i].Partition) {
				return
			}
		}
	}, prepareMinMissing)
	if err != nil {
		b.log.Debug("broker: creating a push's new partitions before its WAL append failed; the projector creates them",
			"partitions", n, "err", err)
	}
}
