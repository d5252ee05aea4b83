package pg

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/internal/startstop"
)

// NotifyChannel is the PostgreSQL NOTIFY channel on which a commit that
// stored messages (or released a lease) names the queue, so that brokers
// wake their long-polling pops.
const NotifyChannel = "queen_queue"

// Reconnect delays of the Listener while PostgreSQL is away: the first
// retry after listenBackoffMin, doubling up to listenBackoffMax.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// DefaultListenLinger is how long a Listener on demand (ListenOnDemand)
// keeps its connection after the last waiter here: long enough that pops
// coming and going do not open a connection (a PostgreSQL backend) each
// time.
const DefaultListenLinger = 30 * time.Second

// errListenIdle ends a connection of a Listener on demand that nobody
// needs any more.
var errListenIdle = errors.New("pg: listen connection idle")

// Demand tells a Listener on demand when it is needed
// (internal/waker.Waker implements it).
type Demand interface {
	// Wanted is signalled when a waiter may have come; a token may be
	// stale.
	Wanted() <-chan struct{}
	// Idle reports that no waiter can be waiting and none came for
	// linger.
	Idle(linger time.Duration) bool
	// WakeAll makes every waiter look again; called once LISTEN is in
	// effect, so that what was committed before it (its NOTIFY reached
	// nobody here) is found.
	WakeAll()
}

// Listener is the service that carries other brokers' wake-ups to this
// one. It holds one dedicated connection (outside the pool, with the
// pool's connection settings) LISTENing on NotifyChannel and calls wake
// with each notification's payload, a queue name, from its own goroutine,
// one at a time; wake must not block.
//
// While PostgreSQL is away the Listener reconnects with backoff
// (listenBackoffMin doubling to listenBackoffMax) and wake-ups are only
// local: a pop waiting here for a queue that another broker fills is
// answered when its own wait ends. Notifications sent while no connection
// listens are lost (NOTIFY is not queued for absent listeners); nothing
// else is, since a wake-up only shortens a wait.
//
// Start returns at once, without waiting for the connection; Stop closes
// it and waits for the goroutine (internal/startstop).
//
// By default the Listener holds its connection all the time. On demand
// (ListenOnDemand) it holds it only while a pop may wait on this broker:
// PostgreSQL delivers every NOTIFY, this broker's own included (one per
// projection batch, which its own commit already woke locally), to every
// LISTENing connection, and delivering it costs PostgreSQL a backend
// wake-up and a send and this broker a read (docs/decisions.md, "A broker
// listens only while a pop waits").
type Listener struct {
	store  *Store
	wake   func(queue string)
	log    *slog.Logger
	loop   startstop.Loop
	demand Demand        // nil: always listen
	linger time.Duration // with demand: how long an idle connection is kept
}

// NewListener returns a stopped Listener on s's database that calls wake
// with each notified queue name. log nil means slog.Default().
func NewListener(s *Store, wake func(queue string), log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{store: s, wake: wake, log: log}
}

// ListenOnDemand makes l listen only while d is not idle: it connects when
// d signals Wanted, calls d.WakeAll once LISTEN is in effect, and closes
// the connection once d has been Idle(linger) (checked every linger;
// linger <= 0 means DefaultListenLinger). Call it before Start.
func (l *Listener) ListenOnDemand(d Demand, linger time.Duration) {
	if linger <= 0 {
		linger = DefaultListenLinger
	}
	l.demand, l.linger = d, linger
}

// Start launches the LISTEN loop; startstop.ErrStarted if started before.
func (l *Listener) Start(ctx context.Context) error { return l.loop.Start(ctx, l.run) }

// Stop closes the connection and waits for the loop to end. Idempotent.
func (l *Listener) Stop() { l.loop.Stop() }

func (l *Listener) run(ctx context.Context) {
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		if l.demand != nil && l.demand.Idle(l.linger) {
			select {
			case <-l.demand.Wanted():
			case <-ctx.Done():
				return
			}
			continue // a stale token finds it still idle
		}
		listened, err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errListenIdle) {
			backoff = listenBackoffMin
			continue
		}
		if listened {
			backoff = listenBackoffMin // the connection worked: retry soon
		}
		l.log.Debug("pg: listen connection lost; retrying", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(backoff*2, listenBackoffMax)
	}
}

// listenOnce connects, LISTENs and delivers notifications until the
// connection fails or ctx ends; listened says whether LISTEN succeeded.
func (l *Listener) listenOnce(ctx context.Context) (listened bool, err error) {
	cfg := l.store.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return false, err
	}
	lctx := ctx
	if l.demand != nil {
		var cancel context.CancelCauseFunc
		lctx, cancel = context.WithCancelCause(ctx)
		watched := make(chan struct{})
		go l.watchIdle(lctx, cancel, watched)
		defer func() { cancel(nil); <-watched }()
		l.demand.WakeAll()
	}
	for {
		n, err := conn.WaitForNotification(lctx)
		if err != nil {
			if errors.Is(context.Cause(lctx), errListenIdle) {
				return true, errListenIdle
			}
			return true, err
		}
		l.wake(n.Payload)
	}
}

// watchIdle cancels lctx with errListenIdle once l.demand is idle, looking
// every l.linger, and closes done when it returns (at lctx's end).
func (l *Listener) watchIdle(lctx context.Context, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(l.linger)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if l.demand.Idle(l.linger) {
				cancel(errListenIdle)
				return
			}
		case <-lctx.Done():
			return
		}
	}
}

// NotifyQueue sends a wake-up for queue to every broker (best effort).
func (s *Store) NotifyQueue(ctx context.Context, queue string) {
	_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, queue)
}
