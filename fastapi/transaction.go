package fastapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// Transactor runs POST /api/v1/transaction (see pg.Store.Transaction).
type Transactor interface {
	Transaction(ctx context.Context, pushes []pg.ProjectItem, acks []pg.AckRequest) (*pg.TxResult, error)
}

type txOp struct {
	Type          string          `json:"type"`
	Items         json.RawMessage `json:"items"`
	TransactionID *string         `json:"transactionId"`
	PartitionID   *string         `json:"partitionId"`
	Status        string          `json:"status"`
	ConsumerGroup string          `json:"consumerGroup"`
	LeaseID       *string         `json:"leaseId"`
	Error         string          `json:"error"`
}

// transaction handles POST /api/v1/transaction: {"operations":[{"type":
// "push","items":[...]} | {"type":"ack",transactionId,partitionId,...}]}.
// 400 for a malformed request (nothing applied); 200 {"success":true,
// "results":[...]} when committed; 200 {"success":false,"error":...} when
// an operation rolled everything back; 503 when PostgreSQL failed.
func (s *Server) transaction(ctx *fasthttp.RequestCtx) {
	var req struct {
		Operations []txOp `json:"operations"`
	}
	if !s.readObject(ctx, &req) {
		return
	}
	if len(req.Operations) == 0 {
		writeErr(ctx, fasthttp.StatusBadRequest, "operations (non-empty array) is required")
		return
	}
	type slot struct {
		push bool
		idx  int // into pushes or acks
	}
	var pushes []pg.ProjectItem
	var acks []pg.AckRequest
	var order []slot
	var opOf []int // operation index of each slot
	now := time.Now().UnixMicro()
	sub := producerSub(ctx)
	for i, op := range req.Operations {
		switch op.Type {
		case "push":
			items, err := ingest.ParseTransactionItems(op.Items)
			if err != nil {
				writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d]: %v", i, err))
				return
			}
			for _, it := range items {
				id, err := uuid.NewV7()
				if err != nil {
					writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
					return
				}
				txid := it.TransactionID
				if txid == "" {
					txid = id.String()
				}
				order = append(order, slot{true, len(pushes)})
				opOf = append(opOf, i)
				pushes = append(pushes, pg.ProjectItem{Queue: it.Queue, Partition: it.Partition, AcceptedAtMicros: now,
					Message: pg.Message{ID: id, TransactionID: txid, CreatedAtMicros: now, TraceID: it.TraceID, ProducerSub: sub,
						Payload: append([]byte(nil), it.Payload...)}})
			}
		case "ack":
			r, msg := toAckRequest(ackBody{TransactionID: op.TransactionID, PartitionID: op.PartitionID, Status: op.Status,
				ConsumerGroup: op.ConsumerGroup, Error: op.Error, LeaseID: op.LeaseID}, "")
			if msg != "" {
				writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d]: %s", i, msg))
				return
			}
			order = append(order, slot{false, len(acks)})
			opOf = append(opOf, i)
			acks = append(acks, r)
		default:
			writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d].type must be \"push\" or \"ack\"", i))
			return
		}
	}
	txID, _ := uuid.NewV7()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.t.Transaction(c, pushes, acks)
	var abort *pg.TxAbort
	switch {
	case errors.As(err, &abort):
		op := -1 // the operation the failing push item or ack came from
		for i, sl := range order {
			if sl.push == abort.Push && sl.idx == abort.Index {
				op = opOf[i]
				break
			}
		}
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"transactionId": txID.String(), "success": false,
			"error": fmt.Sprintf("operations[%d]: %s", op, abort.Reason), "results": []any{}})
		return
	case err != nil:
		s.log.Error("transaction failed", "err", err)
		writeErr(ctx, fasthttp.StatusServiceUnavailable, "database unavailable")
		return
	}
	results := make([]map[string]any, 0, len(order))
	for i, sl := range order {
		if sl.push {
			p := pushes[sl.idx]
			results = append(results, map[string]any{"index": i, "type": "push", "success": true,
				"transactionId": p.Message.TransactionID, "messageId": p.Message.ID.String(),
				"partitionId": res.PartitionIDs[sl.idx].String(), "queueName": p.Queue})
		} else {
			a := res.Acks[sl.idx]
			results = append(results, map[string]any{"index": i, "type": "ack", "success": true,
				"transactionId": acks[sl.idx].TransactionID, "error": nil, "dlq": a.DLQ})
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"transactionId": txID.String(), "success": true, "results": results})
}
