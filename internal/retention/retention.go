// Package retention runs the broker's retention: every Interval it asks
// PostgreSQL to delete the segments that the queues' retention rules let
// go (pg.Store.RetentionPass holds the rules, the dedup spill and the
// traces that go with the messages), in passes of at most Batch segments
// per rule, repeated while a pass comes back full.
//
// One broker at a time does the work: a pass that finds another broker
// holding the retention lock deletes nothing and returns at once, so
// brokers sharing a database need no coordination. While PostgreSQL is
// away a pass fails (logged at warn level) and the next tick tries again;
// nothing is retried in between, and a missed pass only delays deletion.
package retention

import (
	"context"
	"log/slog"
	"time"

	"github.com/queenmq/queen-go/internal/startstop"
	"github.com/queenmq/queen-go/pg"
)

// Defaults applied where a Config field is zero.
const (
	// DefaultInterval is the time between retention runs
	// (RETENTION_INTERVAL).
	DefaultInterval = 5 * time.Minute
	// DefaultBatch is the most segments one pass deletes per rule.
	DefaultBatch = 1000
	// DefaultPassTimeout bounds one pass (one transaction).
	DefaultPassTimeout = time.Minute
)

// Store is the part of pg.Store the Service uses.
type Store interface {
	// RetentionPass deletes at most limit expired segments per rule and
	// returns how many it deleted (0 when another broker holds the lock).
	RetentionPass(ctx context.Context, limit int) (int64, error)
}

// Config of a Service; zero fields take the defaults above.
type Config struct {
	// Interval: see DefaultInterval. The first run is one Interval after
	// Start.
	Interval time.Duration
	// Batch: see DefaultBatch.
	Batch int
	// PassTimeout: see DefaultPassTimeout.
	PassTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Service is the retention loop. Start it once; Stop is idempotent and
// waits for a pass in flight to end (its transaction is rolled back).
type Service struct {
	cfg   Config
	store Store
	log   *slog.Logger
	loop  startstop.Loop
}

// New returns a stopped Service.
func New(cfg Config, store Store) *Service {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.PassTimeout <= 0 {
		cfg.PassTimeout = DefaultPassTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, store: store, log: cfg.Logger}
}

// Start launches the loop; startstop.ErrStarted if started before.
func (s *Service) Start(ctx context.Context) error { return s.loop.Start(ctx, s.run) }

// Stop ends the loop and waits for it. Idempotent; a no-op before Start.
func (s *Service) Stop() { s.loop.Stop() }

func (s *Service) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.runOnce(ctx)
	}
}

// runOnce runs passes until one deletes fewer than Batch segments or
// fails.
func (s *Service) runOnce(ctx context.Context) {
	for {
		c, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
		n, err := s.store.RetentionPass(c, s.cfg.Batch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Log(ctx, pg.OutageLevel(err), "retention pass failed", "err", err)
			}
			return
		}
		if n > 0 {
			s.log.Info("retention: deleted segments", "segments", n)
		}
		if n < int64(s.cfg.Batch) {
			return
		}
	}
}
