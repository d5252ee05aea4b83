package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// Streams is what the /streams/v1 routes need (Deps.Streams);
// internal/broker wires *pg.Streams behind it and wakes long-polls after a
// cycle commits.
type Streams interface {
	// Register registers a stream query by name (pg.Streams.Register).
	Register(ctx context.Context, r pg.RegisterRequest) (*pg.RegisterResult, error)
	// Cycle applies state ops, sink push and source ack atomically
	// (pg.Streams.Cycle); *pg.CycleAbort when it was rolled back.
	Cycle(ctx context.Context, r pg.CycleRequest) (*pg.CycleResult, error)
	// GetState reads the rows of one shard (pg.Streams.GetState).
	GetState(ctx context.Context, q pg.StateQuery) ([]pg.StateRow, error)
}

// MaxStateKeyBytes is the longest state key accepted (a btree entry must
// fit a page; the SDKs' keys are a tag, a window and a user key).
const MaxStateKeyBytes = 2048

// Limits of a cycle's state ops (docs/decisions.md, "Stream state
// limits"); the state a shard may hold is pg.MaxShardStateBytes.
const (
	// MaxStateValueBytes is the largest value one upsert may store (JSON
	// text as sent, after trimming white space). The SDKs store a window's
	// or a key's accumulator ({acc, windowStart, windowEnd}, a gate's
	// counters): tens to hundreds of bytes; 1 MiB leaves room for an
	// aggregate that collects a list.
	MaxStateValueBytes = 1 << 20
	// MaxStateOps is the most state ops one cycle may carry. The SDKs send
	// one per key or window a batch touched (at most a pop's batch, which
	// is at most 10,000 messages, times the windows a message falls in)
	// plus the deletes of the windows an idle flush closes.
	MaxStateOps = 10000
)

// routeStreams registers Queen's stream routes (no /api prefix) and the
// single-message delete.
func (s *Server) routeStreams(r interface {
	POST(string, fasthttp.RequestHandler)
	DELETE(string, fasthttp.RequestHandler)
}) {
	r.POST("/streams/v1/queries", s.streamRegister)
	// A cycle is a heavy write, a state read a listing: each takes a turn
	// (heavyWriteGate, listingGate), so that a few cannot hold the pool.
	r.POST("/streams/v1/cycle", s.heavyWriteGate(s.streamCycle))
	r.POST("/streams/v1/state/get", s.listingGate(s.streamStateGet))
	// The delete may scan a partition's segments (pg.Tombstones): it
	// takes a listing turn, so that a few of them cannot hold the pool.
	r.DELETE("/api/v1/messages/{partitionId}/{transactionId}", s.listingGate(s.deleteMessage))
}

// streamsBody reads a streams request body as a JSON object of raw fields,
// answering 400 with Queen's texts when it is not one.
func (s *Server) streamsBody(ctx *fasthttp.RequestCtx) (map[string]json.RawMessage, bool) {
	body, ok := s.readBodyOrAnswer(ctx)
	if !ok {
		return nil, false
	}
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		writeErr(ctx, fasthttp.StatusBadRequest, "Empty request body")
		return nil, false
	}
	if !utf8.Valid(t) {
		writeErr(ctx, fasthttp.StatusBadRequest, "request body is not valid UTF-8")
		return nil, false
	}
	if !json.Valid(t) {
		writeErr(ctx, fasthttp.StatusBadRequest, "Invalid JSON: the body does not parse")
		return nil, false
	}
	if t[0] != '{' {
		writeErr(ctx, fasthttp.StatusBadRequest, "request body must be a JSON object")
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := decodeSafe(t, &m); err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "Invalid JSON: "+err.Error())
		return nil, false
	}
	return m, true
}

func decodeSafe(b []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("malformed JSON")
		}
	}()
	return json.Unmarshal(b, v)
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// fieldString reads field name of m as a string. present false when it is
// absent or null; msg is a 400 text when it is there but not a string.
func fieldString(m map[string]json.RawMessage, name string) (v string, present bool, msg string) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		return "", false, ""
	}
	if err := decodeSafe(raw, &v); err != nil || bytes.TrimSpace(raw)[0] != '"' {
		return "", false, fmt.Sprintf("%s must be a string", name)
	}
	return v, true, ""
}

// requiredString is a required non-empty string field: "<field> is
// required" when it is absent, null or empty (Queen's text), "<field> must
// be a string" when it is another JSON type.
func requiredString(m map[string]json.RawMessage, name string) (string, string) {
	v, ok, msg := fieldString(m, name)
	if msg != "" {
		return "", msg
	}
	if !ok || v == "" {
		return "", name + " is required"
	}
	return v, ""
}

func requiredUUID(m map[string]json.RawMessage, name string) (uuid.UUID, string) {
	v, msg := requiredString(m, name)
	if msg != "" {
		return uuid.Nil, msg
	}
	id, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		return uuid.Nil, name + " must be a UUID"
	}
	return id, ""
}

// optionalBool reads a boolean field; def when absent or null.
func optionalBool(m map[string]json.RawMessage, name string, def bool) (bool, string) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		return def, ""
	}
	var v bool
	if err := decodeSafe(raw, &v); err != nil {
		return false, name + " must be a boolean"
	}
	return v, ""
}

// streamRegister handles POST /streams/v1/queries:
//
//	{"name","source_queue","config_hash","sink_queue"?,"reset"?}
//
// 200 {"success":true,"query_id","name","config_hash","fresh","reset"};
// 409 {"success":false,"query_id","name","error":"config_hash mismatch: ..."}
// when the name is registered with another hash and reset is not true; 400
// {"error"} naming the field for a malformed request; 503 when PostgreSQL
// failed. name is any non-empty string; the queue names follow the name
// rules of push (sink_queue "" is none).
func (s *Server) streamRegister(ctx *fasthttp.RequestCtx) {
	m, ok := s.streamsBody(ctx)
	if !ok {
		return
	}
	var req pg.RegisterRequest
	var msg string
	if req.Name, msg = requiredString(m, "name"); msg == "" {
		if req.SourceQueue, msg = requiredString(m, "source_queue"); msg == "" {
			req.ConfigHash, msg = requiredString(m, "config_hash")
		}
	}
	if msg == "" {
		msg = checkRegisterText(m, req.Name, req.ConfigHash)
	}
	if msg == "" {
		if err := ingest.ValidateName(req.SourceQueue); err != nil {
			msg = "source_queue " + err.Error()
		}
	}
	if msg == "" {
		var sinkOK bool
		if req.SinkQueue, sinkOK, msg = fieldString(m, "sink_queue"); msg == "" && sinkOK && req.SinkQueue != "" {
			if err := ingest.ValidateName(req.SinkQueue); err != nil {
				msg = "sink_queue " + err.Error()
			}
		}
	}
	if msg == "" {
		req.Reset, msg = optionalBool(m, "reset", false)
	}
	if msg != "" {
		writeErr(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	c, cancel := s.dbCtx()
	defer cancel()
	res, err := s.deps.Streams.Register(c, req)
	if err != nil {
		s.dbFail(ctx, "streams register", err)
		return
	}
	if res.Mismatch {
		writeJSON(ctx, fasthttp.StatusConflict, map[string]any{"success": false, "query_id": res.ID.String(), "name": req.Name,
			"error": fmt.Sprintf("config_hash mismatch: operator chain changed for queryId '%s'. "+
				"Pass reset:true to wipe existing state, or use a new queryId.", req.Name)})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "query_id": res.ID.String(), "name": req.Name,
		"config_hash": req.ConfigHash, "fresh": res.Fresh, "reset": res.Reset})
}

// MaxConfigHashBytes is the longest config_hash accepted: the SDKs send a
// hash of the operator chain (tens of hexadecimal characters); the bound
// keeps a client from storing megabytes in the query registry.
const MaxConfigHashBytes = 1024

// checkRegisterText checks a registration's name and config_hash (m is the
// body's members): the name is a name as queues and groups have them
// (1..255 bytes of UTF-8 without control characters, api.md "Names"), the
// hash at most MaxConfigHashBytes of UTF-8 without a NUL byte; neither may
// hold a lone surrogate escape (which decoding would silently turn into
// U+FFFD). It returns a 400 text, or "".
func checkRegisterText(m map[string]json.RawMessage, name, hash string) string {
	if err := ingest.ValidateName(name); err != nil {
		return "name must be 1..255 bytes of UTF-8 without control characters"
	}
	switch {
	case len(hash) > MaxConfigHashBytes:
		return fmt.Sprintf("config_hash is longer than %d bytes", MaxConfigHashBytes)
	case strings.IndexByte(hash, 0) >= 0: // UTF-8 already: streamsBody
		return "config_hash must be UTF-8 without a NUL character"
	}
	for _, f := range []string{"name", "config_hash"} {
		if _, lone := ingest.FindLoneSurrogate(m[f]); lone {
			return f + " " + ingest.ErrLoneSurrogate.Error()
		}
	}
	return ""
}

// rawArray reads an optional array field (absent or null: none).
func rawArray(m map[string]json.RawMessage, name string) ([]json.RawMessage, string) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		return nil, ""
	}
	var arr []json.RawMessage
	if bytes.TrimSpace(raw)[0] != '[' || decodeSafe(raw, &arr) != nil {
		return nil, name + " must be an array"
	}
	return arr, ""
}

func validKey(k string) string {
	switch {
	case len(k) > MaxStateKeyBytes:
		return fmt.Sprintf("is longer than %d bytes", MaxStateKeyBytes)
	case !utf8.ValidString(k):
		return "is not valid UTF-8"
	case strings.IndexByte(k, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// parseStateOps reads state_ops: [{"type":"upsert","key","value"?} |
// {"type":"delete","key"}]; a missing upsert value is {}. At most
// MaxStateOps ops, each value at most MaxStateValueBytes, and the upserts'
// keys and values together at most pg.MaxShardStateBytes (a cycle that
// could never fit its shard); else a 400 text naming the limit.
func parseStateOps(m map[string]json.RawMessage) ([]pg.StateOp, string) {
	arr, msg := rawArray(m, "state_ops")
	if msg != "" {
		return nil, msg
	}
	if len(arr) > MaxStateOps {
		return nil, fmt.Sprintf("state_ops holds %d ops, more than the %d one cycle may carry", len(arr), MaxStateOps)
	}
	var upserted int
	ops := make([]pg.StateOp, 0, len(arr))
	for i, raw := range arr {
		var f map[string]json.RawMessage
		if bytes.TrimSpace(raw)[0] != '{' || decodeSafe(raw, &f) != nil {
			return nil, fmt.Sprintf("state_ops[%d] must be an object", i)
		}
		typ, _, _ := fieldString(f, "type")
		key, ok, kmsg := fieldString(f, "key")
		if kmsg != "" || !ok {
			return nil, fmt.Sprintf("state_ops[%d].key is required", i)
		}
		if e := validKey(key); e != "" {
			return nil, fmt.Sprintf("state_ops[%d].key %s", i, e)
		}
		switch typ {
		case "delete":
			ops = append(ops, pg.StateOp{Delete: true, Key: key})
		case "upsert":
			v := []byte("{}")
			if raw, ok := f["value"]; ok {
				raw = bytes.TrimSpace(raw)
				if len(raw) > MaxStateValueBytes {
					return nil, fmt.Sprintf("state_ops[%d].value is %d bytes, more than the %d (1 MiB) one state value may hold",
						i, len(raw), MaxStateValueBytes)
				}
				v = append([]byte(nil), raw...)
			}
			if upserted += len(key) + len(v); upserted > pg.MaxShardStateBytes {
				return nil, fmt.Sprintf("state_ops upsert more than the %d bytes (8 MiB) of keys and values one shard may hold",
					pg.MaxShardStateBytes)
			}
			if !utf8.Valid(v) {
				return nil, fmt.Sprintf("state_ops[%d].value is not valid UTF-8", i)
			}
			ops = append(ops, pg.StateOp{Key: key, Value: v, WindowEnd: windowEnd(v)})
		default:
			return nil, fmt.Sprintf("state_ops[%d].type must be \"upsert\" or \"delete\"", i)
		}
	}
	return ops, ""
}

// windowEnd is the numeric "windowEnd" of an object value (the SDKs'
// window rows), or nil.
func windowEnd(v []byte) *float64 {
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	var w struct {
		WindowEnd *float64 `json:"windowEnd"`
	}
	if decodeSafe(v, &w) != nil {
		return nil
	}
	return w.WindowEnd
}

// parseCycleAck reads ack: null or {"transactionId","leaseId"?,"status"?,
// "count"?,"error"?}.
func parseCycleAck(m map[string]json.RawMessage) (*pg.CycleAck, string) {
	raw, ok := m["ack"]
	if !ok || isNull(raw) {
		return nil, ""
	}
	var f map[string]json.RawMessage
	if bytes.TrimSpace(raw)[0] != '{' || decodeSafe(raw, &f) != nil {
		return nil, "ack must be an object or null"
	}
	a := &pg.CycleAck{Count: 1}
	txid, ok, msg := fieldString(f, "transactionId")
	if msg != "" || !ok || txid == "" {
		return nil, "ack.transactionId is required"
	}
	a.TransactionID = txid
	lease, ok, msg := fieldString(f, "leaseId")
	if msg != "" {
		return nil, "ack.leaseId must be a string"
	}
	if ok && lease != "" {
		id, err := uuid.Parse(lease)
		if err != nil {
			return nil, "ack.leaseId must be a lease id (UUID) or empty"
		}
		a.LeaseID = &id
	}
	status, _, msg := fieldString(f, "status")
	if msg != "" {
		return nil, "ack.status must be a string"
	}
	switch status {
	case "", pg.AckCompleted, pg.AckSuccess, pg.AckFailed, pg.AckDLQ:
		a.Status = status
	default:
		return nil, fmt.Sprintf("ack.status must be completed, success, failed or dlq, not %q", status)
	}
	if raw, ok := f["count"]; ok && !isNull(raw) {
		var n int
		if decodeSafe(raw, &n) != nil || n < 1 {
			return nil, "ack.count must be a positive integer"
		}
		a.Count = n
	}
	if a.Error, _, msg = fieldString(f, "error"); msg != "" {
		return nil, "ack.error must be a string"
	}
	return a, ""
}

// streamCycle handles POST /streams/v1/cycle:
//
//	{"query_id","partition_id","consumer_group"?,"release_lease"?,
//	 "state_ops"?:[...],"push_items"?:[...],"ack"?:{...}|null}
//
// Always 200 once the request is well formed and PostgreSQL answered:
// {"success","query_id","partition_id","queueName","state_ops_applied",
// "push_results":[...],"ack_result":{success,count,lease_released,dlq}|null,
// "error"?}; success false means the whole cycle was rolled back (error
// says why; nothing of it was applied). 400 {"error"} naming the field of a
// malformed request (nothing is applied); 503 when PostgreSQL failed (the
// cycle may be retried: its sink items keep their derived transactionIds).
// push_items follow the push rules of POST /api/v1/transaction (traceId
// allowed); an item without transactionId gets a derived one
// (pg.SinkTransactionID).
func (s *Server) streamCycle(ctx *fasthttp.RequestCtx) {
	m, ok := s.streamsBody(ctx)
	if !ok {
		return
	}
	var req pg.CycleRequest
	var msg string
	bad := func(m string) {
		writeErr(ctx, fasthttp.StatusBadRequest, m)
	}
	if req.QueryID, msg = requiredUUID(m, "query_id"); msg != "" {
		bad(msg)
		return
	}
	if req.PartitionID, msg = requiredUUID(m, "partition_id"); msg != "" {
		bad(msg)
		return
	}
	group, _, msg := fieldString(m, "consumer_group")
	if msg != "" {
		bad(msg)
		return
	}
	if group == "" {
		group = pg.QueueModeGroup
	}
	if err := ingest.ValidateName(group); err != nil {
		bad("consumer_group " + err.Error())
		return
	}
	req.Group = group
	if req.ReleaseLease, msg = optionalBool(m, "release_lease", true); msg != "" {
		bad(msg)
		return
	}
	if req.StateOps, msg = parseStateOps(m); msg != "" {
		bad(msg)
		return
	}
	if _, msg = rawArray(m, "push_items"); msg != "" {
		bad(msg)
		return
	}
	if raw, ok := m["push_items"]; ok && !isNull(raw) {
		items, err := ingest.ParseTransactionItems(raw, 0)
		if err != nil {
			bad("push_items: " + err.Error())
			return
		}
		// Their queues are created before the cycle's transaction, as a
		// transaction's: bounded alike (QUEEN_MAX_PUSH_PARTITIONS).
		if err := ingest.CheckPartitions(items, s.cfg.MaxPushPartitions); err != nil {
			bad("push_items: " + err.Error())
			return
		}
		if req.Pushes, err = inTxPushItems(items, time.Now().UnixMicro(), producerSub(ctx), false); err != nil {
			writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
			return
		}
	}
	if req.Ack, msg = parseCycleAck(m); msg != "" {
		bad(msg)
		return
	}
	c, cancel := s.dbCtx()
	defer cancel()
	res, err := s.deps.Streams.Cycle(c, req)
	out := map[string]any{"success": true, "query_id": req.QueryID.String(), "partition_id": req.PartitionID.String(),
		"queueName": nil, "state_ops_applied": 0, "push_results": []any{}, "ack_result": nil}
	var abort *pg.CycleAbort
	switch {
	case errors.As(err, &abort):
		out["success"], out["error"] = false, abort.Reason
		writeJSON(ctx, fasthttp.StatusOK, out)
		return
	case err != nil:
		s.dbFail(ctx, "streams cycle", err)
		return
	}
	if res.SourceQueue != "" {
		out["queueName"] = res.SourceQueue
	}
	out["state_ops_applied"] = res.StateOpsApplied
	pr := make([]map[string]any, len(res.Pushes))
	for i, o := range res.Pushes {
		p := req.Pushes[i]
		if o.Duplicate {
			pr[i] = map[string]any{"index": i, "transaction_id": p.Message.TransactionID, "status": "duplicate",
				"message_id": o.MessageID.String(), "queueName": p.Queue}
			continue
		}
		pr[i] = map[string]any{"index": i, "transaction_id": p.Message.TransactionID, "status": "queued",
			"message_id": o.MessageID.String(), "partition_id": res.PartitionIDs[i].String(),
			"trace_id": traceIDJSON(p.Message.TraceID), "queueName": p.Queue}
	}
	out["push_results"] = pr
	if res.Ack != nil {
		out["ack_result"] = map[string]any{"success": true, "count": res.Ack.Count,
			"lease_released": res.Ack.LeaseReleased, "dlq": res.Ack.DLQ}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// stateTimeLayout is PostgreSQL's JSON rendering of a timestamptz
// (2026-05-06T10:01:42.123456+00:00), which Queen's state/get returns.
const stateTimeLayout = "2006-01-02T15:04:05.999999-07:00"

// streamStateGet handles POST /streams/v1/state/get:
//
//	{"query_id","partition_id","keys"?:[str],"key_prefix"?:str,
//	 "ripe_at_or_before"?:number}
//
// 200 {"success":true,"rows":[{"key","value","updated_at"}]} ordered by key
// (bytewise); filters combine with AND; key_prefix matches literally;
// ripe_at_or_before (epoch ms) keeps rows whose value.windowEnd is a number
// at or before it. 400 naming the field of a malformed request, 400 for
// more than MaxStateOps keys, and 400 naming the limit when the rows asked
// for hold more than
// pg.MaxShardStateBytes (then none is read); 503 when PostgreSQL failed. No
// lease check (reads are not fenced).
func (s *Server) streamStateGet(ctx *fasthttp.RequestCtx) {
	m, ok := s.streamsBody(ctx)
	if !ok {
		return
	}
	var q pg.StateQuery
	var msg string
	bad := func(m string) { writeErr(ctx, fasthttp.StatusBadRequest, m) }
	if q.QueryID, msg = requiredUUID(m, "query_id"); msg != "" {
		bad(msg)
		return
	}
	if q.PartitionID, msg = requiredUUID(m, "partition_id"); msg != "" {
		bad(msg)
		return
	}
	keys, msg := rawArray(m, "keys")
	if msg != "" {
		bad(msg + " of strings")
		return
	}
	if len(keys) > MaxStateOps {
		// As many keys as a cycle may touch: a longer list only makes the
		// key match slower (1,000,000 keys took 7-8 s and answered 503).
		bad(fmt.Sprintf("keys holds %d keys; at most %d are accepted (ask with key_prefix, or in parts)", len(keys), MaxStateOps))
		return
	}
	for i, raw := range keys {
		var k string
		if bytes.TrimSpace(raw)[0] != '"' || decodeSafe(raw, &k) != nil {
			bad(fmt.Sprintf("keys[%d] must be a string", i))
			return
		}
		if e := validKey(k); e != "" {
			bad(fmt.Sprintf("keys[%d] %s", i, e))
			return
		}
		q.Keys = append(q.Keys, k)
	}
	if q.KeyPrefix, _, msg = fieldString(m, "key_prefix"); msg != "" {
		bad(msg)
		return
	}
	if e := validKey(q.KeyPrefix); e != "" {
		bad("key_prefix " + e)
		return
	}
	if raw, ok := m["ripe_at_or_before"]; ok && !isNull(raw) {
		var f float64
		if decodeSafe(raw, &f) != nil {
			bad("ripe_at_or_before must be a number (epoch ms)")
			return
		}
		q.RipeAtOrBefore = &f
	}
	c, cancel := s.dbCtx()
	defer cancel()
	rows, err := s.deps.Streams.GetState(c, q)
	var big *pg.StateTooLargeError
	if errors.As(err, &big) {
		writeErr(ctx, fasthttp.StatusBadRequest, big.Error())
		return
	}
	if err != nil {
		s.dbFail(ctx, "streams state/get", err)
		return
	}
	writeJSONBytes(ctx, fasthttp.StatusOK, appendStateRows(ctx.Response.Body()[:0], rows))
}

// appendStateRows appends state/get's answer to b:
// {"success":true,"rows":[{"key","updated_at","value"}...]}, each value
// the stored JSON as it is (pg.Streams keeps the client's value, checked
// when it was put). Built directly: a map per row and encoding/json's
// check and compaction of every value made an 8 MB shard's answer cost
// more broker CPU than its read (a probe's ten at once took the victim's
// requests from 5,599 to 55 in 15 s).
func appendStateRows(b []byte, rows []pg.StateRow) []byte {
	b = append(b, `{"success":true,"rows":[`...)
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = appendJSONString(b, r.Key)
		b = append(b, `,"updated_at":"`...)
		b = r.UpdatedAt.UTC().AppendFormat(b, stateTimeLayout)
		b = append(b, `","value":`...)
		if len(r.Value) == 0 {
			b = append(b, "null"...) // never stored so; kept valid JSON all the same
		} else {
			b = append(b, r.Value...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// MessageDeleter deletes one message (Deps.MessageDeleter;
// pg.Tombstones implements it).
type MessageDeleter interface {
	// DeleteMessage marks the message deleted with its dead letters and
	// traces; false when there is no such message.
	DeleteMessage(ctx context.Context, partitionID uuid.UUID, transactionID string) (bool, error)
}

// deleteMessage handles DELETE /api/v1/messages/:partitionId/:transactionId
// (Queen's shape): 200 {"success","partitionId","transactionId","message":
// "Message deleted successfully" | "Message not found"}; a repeat is
// success:false. 400 for a partitionId that is not a UUID (Queen's
// accidental 200 with a PostgreSQL error); 503 when PostgreSQL failed. The
// transactionId segment is percent-decoded like every name in a path. See
// pg.Tombstones for what deleting means.
func (s *Server) deleteMessage(ctx *fasthttp.RequestCtx) {
	pid, txid, ok := messageKey(ctx)
	if !ok {
		return
	}
	c, cancel := s.adminCtx()
	defer cancel()
	deleted, err := s.deps.MessageDeleter.DeleteMessage(c, pid, txid)
	if err != nil {
		s.dbFail(ctx, "delete message", err)
		return
	}
	msg := "Message not found"
	if deleted {
		msg = "Message deleted successfully"
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": deleted, "partitionId": pid.String(),
		"transactionId": txid, "message": msg})
}
