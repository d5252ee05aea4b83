package fastapi

import (
	"bytes"
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

// MaxTransactionOperations is the most operations one POST
// /api/v1/transaction may carry, as an ack/batch carries at most
// MaxAckBatch acks: the whole request is one PostgreSQL transaction, which
// must finish within the database timeout while it holds its partitions'
// locks (500,000 ack operations took 4 s and 340 MB of broker memory).
// Its push items are bounded by ingest.MaxTransactionItems.
const MaxTransactionOperations = 10_000

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

// transaction handles POST /api/v1/transaction (Queen SDK wire contract:
// docs/api.md, "Producing"; docs/consume.md, "Transactions"; the Go/JS
// TransactionBuilder):
//
//	{"operations":[{"type":"push","items":[...]}
//	             | {"type":"ack",transactionId,partitionId,status?,consumerGroup?,leaseId?,error?}],
//	 "requiredLeases"?:[<lease uuid>...], "kv"?:[...], "timers"?:[...]}
//
// Out: 200 {"transactionId","success":true,"results":[...]} when committed;
// 200 {"transactionId","success":false,"error":"operations[i]: ...",
// "results":[]} when an operation rolled everything back; 400 {"error"} for
// a malformed request; 503 when PostgreSQL failed. Nothing is applied
// unless the answer is success:true.
//
// Riders: newer Go SDKs may add top-level "kv" and "timers" arrays that are
// meant to gate the bundle (e.g. kv putIfAbsent + push = exactly-once).
// This broker has no kv/timers, so a present rider that is neither null nor
// [] is refused with 400 and nothing is applied, instead of committing the
// bundle ungated; null and [] are ignored.
//
// requiredLeases: both SDKs list the lease ids of the acked messages here
// (the JS SDK puts the lease ONLY here, never on the ack op). Queen 2 fences
// an ack with the leaseId its operation carries, and lends it the required
// lease only when the bundle names a single lease
// (queen-mq/queen clients/client-go/transaction_lease_wire_test.go and
// clients/client-go/tests/transaction_lease_test.go). So: an ack op without
// leaseId, in a request whose requiredLeases holds exactly one distinct
// lease, is applied as if it carried that lease; if that lease expired or
// is not the message's current lease, the ack is refused and the whole
// transaction rolls back (success:false). With two or more distinct
// required leases nothing is lent (such acks are fenced only by the
// message having some live lease, as before), and requiredLeases is not
// otherwise a gate: Queen does not require every listed lease to be live.
// Every requiredLeases entry must be a UUID string (400 otherwise).
func (s *Server) transaction(ctx *fasthttp.RequestCtx) {
	var req struct {
		Operations     []txOp          `json:"operations"`
		RequiredLeases json.RawMessage `json:"requiredLeases"`
		KV             json.RawMessage `json:"kv"`
		Timers         json.RawMessage `json:"timers"`
	}
	if !s.readObject(ctx, &req) {
		return
	}
	for _, r := range []struct {
		name string
		raw  json.RawMessage
	}{{"kv", req.KV}, {"timers", req.Timers}} {
		if !emptyRider(r.raw) {
			writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf(
				"%q transaction riders are not supported by this broker (no kv/timers); nothing was applied", r.name))
			return
		}
	}
	if len(req.Operations) == 0 {
		writeErr(ctx, fasthttp.StatusBadRequest, "operations (non-empty array) is required")
		return
	}
	if len(req.Operations) > MaxTransactionOperations {
		writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations holds %d operations; at most %d are accepted in one transaction",
			len(req.Operations), MaxTransactionOperations))
		return
	}
	lent, msg := singleRequiredLease(req.RequiredLeases)
	if msg != "" {
		writeErr(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	type slot struct {
		push bool
		idx  int // into pushes or acks
		op   int // index into req.Operations
	}
	var pushes []pg.ProjectItem
	var parsed []ingest.ParsedItem // every push item, for the partition limit
	var acks []pg.AckRequest
	var order []slot
	now := time.Now().UnixMicro()
	sub := producerSub(ctx)
	for i, op := range req.Operations {
		switch op.Type {
		case "push":
			if len(bytes.TrimSpace(op.Items)) == 0 {
				writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d].items (an array of push items) is required", i))
				return
			}
			items, err := ingest.ParseTransactionItems(op.Items, len(parsed))
			if err != nil {
				writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d]: %v", i, err))
				return
			}
			parsed = append(parsed, items...)
			built, err := inTxPushItems(items, now, sub, true)
			if err != nil {
				writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
				return
			}
			for j := range built {
				order = append(order, slot{true, len(pushes) + j, i})
			}
			pushes = append(pushes, built...)
		case "ack":
			r, msg := toAckRequest(ackBody{TransactionID: op.TransactionID, PartitionID: op.PartitionID, Status: op.Status,
				ConsumerGroup: op.ConsumerGroup, Error: op.Error, LeaseID: op.LeaseID}, "")
			if msg != "" {
				writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d]: %s", i, msg))
				return
			}
			if r.LeaseID == nil && lent != nil {
				r.LeaseID = lent // fenced exactly like an ack carrying leaseId
			}
			order = append(order, slot{false, len(acks), i})
			acks = append(acks, r)
		default:
			writeErr(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("operations[%d].type must be \"push\" or \"ack\"", i))
			return
		}
	}
	// The queues and partitions of the pushes are created before the
	// transaction, on the request's time: bounded as a push's are.
	if err := ingest.CheckPartitions(parsed, s.cfg.MaxPushPartitions); err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	txID, _ := uuid.NewV7()
	c, cancel := s.dbCtx()
	defer cancel()
	res, err := s.deps.Transactor.Transaction(c, pushes, acks)
	var abort *pg.TxAbort
	switch {
	case errors.As(err, &abort):
		op := -1 // the operation the failing push item or ack came from
		for _, sl := range order {
			if sl.push == abort.Push && sl.idx == abort.Index {
				op = sl.op
				break
			}
		}
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"transactionId": txID.String(), "success": false,
			"error": fmt.Sprintf("operations[%d]: %s", op, abort.Reason), "results": []any{}})
		return
	case err != nil:
		s.dbFail(ctx, "transaction", err)
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

// inTxPushItems builds the items of a push written inside a PostgreSQL
// transaction (POST /api/v1/transaction, a stream cycle's sink push) from
// validated push items: a UUIDv7 message id each, now (Unix µs) as the
// acceptance and creation time, producerSub from the token, the payload
// copied byte for byte (the request body is reused after the handler). An
// item without transactionId gets its message id when mintTxID is set,
// else keeps "" for the caller to fill (a cycle derives one).
func inTxPushItems(items []ingest.ParsedItem, now int64, sub *string, mintTxID bool) ([]pg.ProjectItem, error) {
	minted, err := ingest.NewItems(items, sub)
	if err != nil {
		return nil, err
	}
	for j := range minted {
		minted[j].Payload = append([]byte(nil), minted[j].Payload...)
		if !mintTxID && items[j].TransactionID == "" {
			// No longer the minted id's text: the mark goes with it.
			minted[j].TransactionID, minted[j].MintedTxID = "", false
		}
	}
	rec := ingest.Record{AcceptedAt: now, Items: minted}
	return rec.AppendProjectItems(make([]pg.ProjectItem, 0, len(minted))), nil
}

// emptyRider reports whether a transaction rider ("kv" or "timers") is
// absent, null or an empty array, i.e. asks for nothing.
func emptyRider(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return true
	}
	var arr []json.RawMessage
	return t[0] == '[' && json.Unmarshal(t, &arr) == nil && len(arr) == 0
}

// singleRequiredLease parses the top-level "requiredLeases" (absent, null
// or an array of lease UUID strings) and returns the lease to lend to ack
// operations without their own leaseId: the one distinct entry, or nil when
// there are none or several (Queen 2 lends only an unambiguous lease). msg
// is a 400 text when the field is malformed.
func singleRequiredLease(raw json.RawMessage) (*uuid.UUID, string) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, ""
	}
	var entries []json.RawMessage
	if t[0] != '[' || json.Unmarshal(t, &entries) != nil {
		return nil, "requiredLeases must be an array of lease id (UUID) strings"
	}
	var only *uuid.UUID
	several := false
	for i, e := range entries {
		var str string
		if json.Unmarshal(e, &str) != nil {
			return nil, fmt.Sprintf("requiredLeases[%d] must be a lease id (UUID) string", i)
		}
		id, err := uuid.Parse(str)
		if err != nil {
			return nil, fmt.Sprintf("requiredLeases[%d] must be a lease id (UUID) string", i)
		}
		if only == nil {
			only = &id
		} else if *only != id {
			several = true
		}
	}
	if several {
		return nil, ""
	}
	return only, ""
}
