package broker

import (
	"context"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/pg"
)

// streams serves fastapi.Streams and fastapi.MessageDeleter from
// pg.Streams and pg.Tombstones: it applies the schema first (PostgreSQL
// may have been away at start) and, after a committed cycle, wakes
// long-polls of the sink queues at once (local waiters and, by NOTIFY,
// other brokers') and of the source queue when the ack released its
// lease.
type streams struct {
	b     *Broker
	st    *pg.Streams
	tombs *pg.Tombstones
}

var (
	_ fastapi.Streams        = (*streams)(nil)
	_ fastapi.MessageDeleter = (*streams)(nil)
)

func newStreams(b *Broker) *streams {
	return &streams{b: b, st: pg.NewStreams(b.Store), tombs: pg.NewTombstones(b.Store)}
}

func (s *streams) Register(ctx context.Context, r pg.RegisterRequest) (*pg.RegisterResult, error) {
	if err := s.b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	return s.st.Register(ctx, r)
}

func (s *streams) Cycle(ctx context.Context, r pg.CycleRequest) (*pg.CycleResult, error) {
	if err := s.b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := s.st.Cycle(ctx, r)
	if err != nil {
		return nil, err
	}
	woken := map[string]bool{}
	for i, o := range res.Pushes {
		if !o.Duplicate {
			woken[r.Pushes[i].Queue] = true
		}
	}
	if res.Ack != nil && res.Ack.LeaseReleased && res.SourceQueue != "" {
		woken[res.SourceQueue] = true
	}
	for q := range woken {
		s.b.WakeQueue(ctx, q)
	}
	return res, nil
}

func (s *streams) GetState(ctx context.Context, q pg.StateQuery) ([]pg.StateRow, error) {
	if err := s.b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	return s.st.GetState(ctx, q)
}

func (s *streams) DeleteMessage(ctx context.Context, pid uuid.UUID, txid string) (bool, error) {
	if err := s.b.Store.EnsureSchema(ctx); err != nil {
		return false, err
	}
	return s.tombs.DeleteMessage(ctx, pid, txid)
}
