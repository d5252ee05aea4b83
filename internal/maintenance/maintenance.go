// Package maintenance owns a broker's two maintenance modes, the one place
// where their state is held:
//
//   - push maintenance mode: pushes are written to the WAL and answered
//     "buffered", and the projector holds projection (after the
//     transaction in flight) until the mode is turned off;
//   - pop maintenance mode: pops answer 204 without touching PostgreSQL.
//
// Each mode is persisted in queen.system_state as {"enabled": bool} under
// Queen's keys (PushKey, PopKey), so that every broker sharing a database
// follows it and a restart keeps it. The Service re-reads both every
// RefreshInterval (2 s by default) and adopts a value another broker set.
//
// A mode set here takes effect here at once, whether PostgreSQL answers
// or not. Persisting it is tried at once (Set's error says that failed)
// and then on every refresh until it succeeds; until then the local value
// wins over the one in the database, so a mode set while PostgreSQL is
// away is kept and written when the database returns.
package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/queen-go/internal/startstop"
)

// Keys of the modes in queen.system_state (Queen's names).
const (
	PushKey = "maintenance_mode"
	PopKey  = "pop_maintenance_mode"
)

// Defaults applied where a Config field is zero.
const (
	// DefaultRefreshInterval is how often the modes are re-read from
	// PostgreSQL (and unpersisted ones written): the longest a mode set
	// through another broker takes to reach this one.
	DefaultRefreshInterval = 2 * time.Second
	// DefaultTimeout bounds each refresh, and the first read in Start.
	DefaultTimeout = 2 * time.Second
)

// Mode names one of the two maintenance modes.
type Mode int

// The maintenance modes.
const (
	Push Mode = iota // push maintenance mode (PushKey)
	Pop              // pop maintenance mode (PopKey)
)

// String is "push" or "pop".
func (m Mode) String() string {
	if m == Pop {
		return "pop"
	}
	return "push"
}

// Store is the part of pg.Store the Service uses.
type Store interface {
	// EnsureSchema applies the schema if it has not been applied yet.
	EnsureSchema(ctx context.Context) error
	// GetFlag reads a flag from queen.system_state; false when unset.
	GetFlag(ctx context.Context, key string) (bool, error)
	// SetFlag writes a flag to queen.system_state.
	SetFlag(ctx context.Context, key string, enabled bool) error
}

// Config of a Service; zero fields take the defaults above.
type Config struct {
	// RefreshInterval: see DefaultRefreshInterval.
	RefreshInterval time.Duration
	// Timeout: see DefaultTimeout.
	Timeout time.Duration
	// OnChange, when set, is called after a mode's value changed on this
	// broker (set here, adopted from PostgreSQL, or read at Start), with
	// the mode and its new value. It runs on the setter's goroutine or the
	// refresh loop's and must not block. Concurrent changes may be
	// reported out of order: read the current value from the Service.
	OnChange func(m Mode, on bool)
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Service holds the maintenance modes and keeps them in step with
// PostgreSQL. Start runs the refresh loop; Stop ends it. The modes can be
// read and set before Start and after Stop (no refresh runs then).
type Service struct {
	cfg   Config
	store Store
	log   *slog.Logger
	modes [2]*flag
	loop  startstop.Loop
}

// flag is one mode's state.
type flag struct {
	key string
	on  atomic.Bool // the value in effect here

	mu    sync.Mutex
	dirty bool   // set here and not yet persisted
	gen   uint64 // incremented by every set

	// write serialises the writes of this flag to PostgreSQL, so that the
	// last write carries the latest value.
	write chan struct{}
}

// New returns a stopped Service with both modes off.
func New(cfg Config, store Store) *Service {
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, store: store, log: cfg.Logger}
	for m, key := range [2]string{Push: PushKey, Pop: PopKey} {
		s.modes[m] = &flag{key: key, write: make(chan struct{}, 1)}
	}
	return s
}

// Start reads both modes from PostgreSQL (waiting at most Timeout; when it
// is away the modes stay as they are and the loop reads them later), then
// launches the refresh loop. startstop.ErrStarted if started before.
func (s *Service) Start(ctx context.Context) error {
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	err := s.refresh(c)
	cancel()
	if err != nil {
		s.log.Debug("maintenance: modes not read at start; PostgreSQL is away", "err", err)
	}
	return s.loop.Start(ctx, s.run)
}

// Stop ends the refresh loop and waits for it. Idempotent.
func (s *Service) Stop() { s.loop.Stop() }

// PushEnabled reports whether push maintenance mode is on here.
func (s *Service) PushEnabled() bool { return s.modes[Push].on.Load() }

// PopEnabled reports whether pop maintenance mode is on here.
func (s *Service) PopEnabled() bool { return s.modes[Pop].on.Load() }

// Enabled reports whether mode m is on here.
func (s *Service) Enabled(m Mode) bool { return s.modes[m].on.Load() }

// SetPush sets push maintenance mode: see Set.
func (s *Service) SetPush(ctx context.Context, on bool) error { return s.Set(ctx, Push, on) }

// SetPop sets pop maintenance mode: see Set.
func (s *Service) SetPop(ctx context.Context, on bool) error { return s.Set(ctx, Pop, on) }

// Set turns mode m on or off. It takes effect here before Set persists it;
// the error (from PostgreSQL, or ctx) says persisting failed, and the
// refresh loop then retries until it succeeds.
func (s *Service) Set(ctx context.Context, m Mode, on bool) error {
	f := s.modes[m]
	f.mu.Lock()
	f.gen++
	f.dirty = true
	was := f.on.Swap(on)
	f.mu.Unlock()
	if was != on {
		s.changed(m, on, "set here")
	}
	return s.persist(ctx, f)
}

func (s *Service) changed(m Mode, on bool, why string) {
	s.log.Info("maintenance mode", "mode", m.String(), "enabled", on, "source", why)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(m, on)
	}
}

// persist writes f's current value to PostgreSQL and clears dirty unless
// f was set again meanwhile (that set's own write follows this one).
func (s *Service) persist(ctx context.Context, f *flag) error {
	select {
	case f.write <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("maintenance: persist %s: %w", f.key, ctx.Err())
	}
	defer func() { <-f.write }()
	f.mu.Lock()
	on, gen := f.on.Load(), f.gen
	f.mu.Unlock()
	if err := s.store.SetFlag(ctx, f.key, on); err != nil {
		return fmt.Errorf("maintenance: persist %s: %w", f.key, err)
	}
	f.mu.Lock()
	if f.gen == gen {
		f.dirty = false
	}
	f.mu.Unlock()
	return nil
}

func (s *Service) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		if err := s.refresh(c); err != nil && ctx.Err() == nil {
			s.log.Debug("maintenance: refresh failed; retrying", "err", err, "interval", s.cfg.RefreshInterval)
		}
		cancel()
	}
}

// refresh brings both modes in step with PostgreSQL: a mode set here and
// not yet persisted is written, the other is read and adopted.
func (s *Service) refresh(ctx context.Context) error {
	if err := s.store.EnsureSchema(ctx); err != nil {
		return err
	}
	var first error
	for m, f := range s.modes {
		if err := s.refreshOne(ctx, Mode(m), f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Service) refreshOne(ctx context.Context, m Mode, f *flag) error {
	f.mu.Lock()
	dirty, gen := f.dirty, f.gen
	f.mu.Unlock()
	if dirty {
		if err := s.persist(ctx, f); err != nil {
			return err
		}
		s.log.Info("maintenance: mode set while PostgreSQL was away is now persisted", "mode", m.String(),
			"enabled", f.on.Load())
		return nil
	}
	on, err := s.store.GetFlag(ctx, f.key)
	if err != nil {
		return fmt.Errorf("maintenance: read %s: %w", f.key, err)
	}
	f.mu.Lock()
	if f.gen != gen || f.dirty { // set here during the read: that value wins
		f.mu.Unlock()
		return nil
	}
	was := f.on.Swap(on)
	f.mu.Unlock()
	if was != on {
		s.changed(m, on, "PostgreSQL")
	}
	return nil
}
