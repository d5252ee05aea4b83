package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TxAbort is returned by Transaction when an operation's outcome rolls
// the whole transaction back: push item Index was a duplicate (Push true),
// or ack Index was refused; Reason says why.
type TxAbort struct {
	Push   bool
	Index  int
	Reason string
}

func (e *TxAbort) Error() string { return "transaction rolled back: " + e.Reason }

// TxResult is what a committed Transaction did: one Outcome per push item
// (with its partition id) and one AckResult per ack.
type TxResult struct {
	Pushes       []Outcome
	PartitionIDs []uuid.UUID
	Acks         []AckResult
}

// Transaction stores pushes and applies acks in ONE PostgreSQL
// transaction, all or nothing (POST /api/v1/transaction).
//
// Transactional pushes do not go through the WAL: the WAL cannot commit
// atomically with acks in PostgreSQL, so these items are written directly
// in this transaction, through the same projection code as the projector
// (partition rows locked in id order, dedup probe, consecutive offsets), so
// partition order and offsets stay exact beside concurrent projectors.
// Their durability is PostgreSQL's commit; with PostgreSQL away the route
// fails instead of buffering. A push that is a duplicate inside its
// queue's dedup window, or an ack that does not succeed, rolls everything
// back with *TxAbort.
//
// Acks follow Ack's rules (applyAcks): an AckRequest with LeaseID is fenced,
// i.e. refused with ErrTextInvalidLease unless LeaseID is the live lease the
// message is currently delivered under, so an expired or foreign lease
// aborts the whole transaction and none of its pushes are stored. An ack
// without LeaseID needs only some live lease on the message. The HTTP layer
// fills LeaseID from the request's single requiredLeases entry when the ack
// op has none (Queen SDK wire contract, see fastapi's transaction handler).
func (s *Store) Transaction(ctx context.Context, pushes []ProjectItem, acks []AckRequest) (*TxResult, error) {
	res := &TxResult{}
	var err error
	if len(pushes) > 0 {
		if res.PartitionIDs, err = s.partitionIDs(ctx, nil, pushes, false); err != nil {
			return nil, err
		}
	}
	err = withRetry(false, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if len(pushes) > 0 {
				out, err := s.project(ctx, tx, false, pushes, res.PartitionIDs, nil)
				if err != nil {
					return err
				}
				for i, o := range out {
					if o.Duplicate {
						return &TxAbort{Push: true, Index: i, Reason: fmt.Sprintf("transactionId %q is a duplicate in partition %q",
							pushes[i].Message.TransactionID, pushes[i].Partition)}
					}
				}
				res.Pushes = out
			}
			var w pgx.Batch
			acked, err := applyAcks(ctx, tx, acks, false, &w)
			if err != nil {
				return err
			}
			if err := tx.SendBatch(ctx, &w).Close(); err != nil {
				return err
			}
			for i, r := range acked {
				if !r.Success {
					return &TxAbort{Index: i, Reason: fmt.Sprintf("ack of %q: %s", acks[i].TransactionID, r.Error)}
				}
			}
			res.Acks = acked
			return nil
		})
	})
	var abort *TxAbort
	if errors.As(err, &abort) {
		return nil, abort
	}
	if err != nil { // project has forgotten the cached ids of a partition that went (ErrPartitionGone)
		return nil, fmt.Errorf("pg: transaction: %w", err)
	}
	return res, nil
}
