package pg

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL NOTIFY channel on which a commit that
// stored messages (or released a lease) names the queue, so that brokers
// wake their long-polling pops.
const NotifyChannel = "queen_queue"

// Listen holds one dedicated connection LISTENing on NotifyChannel and
// calls wake with each notified queue name until ctx ends. It reconnects
// with backoff while PostgreSQL is away (wake-ups are then only local).
func (s *Store) Listen(ctx context.Context, wake func(queue string), log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		log.Debug("pg: listen connection lost; retrying", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, wake func(string)) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		wake(n.Payload)
	}
}

// NotifyQueue sends a wake-up for queue to every broker (best effort).
func (s *Store) NotifyQueue(ctx context.Context, queue string) {
	_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, queue)
}
