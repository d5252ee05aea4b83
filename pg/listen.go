package pg

import (
	"context"
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
type Listener struct {
	store *Store
	wake  func(queue string)
	log   *slog.Logger
	loop  startstop.Loop
}

// NewListener returns a stopped Listener on s's database that calls wake
// with each notified queue name. log nil means slog.Default().
func NewListener(s *Store, wake func(queue string), log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{store: s, wake: wake, log: log}
}

// Start launches the LISTEN loop; startstop.ErrStarted if started before.
func (l *Listener) Start(ctx context.Context) error { return l.loop.Start(ctx, l.run) }

// Stop closes the connection and waits for the loop to end. Idempotent.
func (l *Listener) Stop() { l.loop.Stop() }

func (l *Listener) run(ctx context.Context) {
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		listened, err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return
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
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		l.wake(n.Payload)
	}
}

// NotifyQueue sends a wake-up for queue to every broker (best effort).
func (s *Store) NotifyQueue(ctx context.Context, queue string) {
	_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, queue)
}
