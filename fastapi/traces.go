package fastapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// Limits of the trace routes (docs/decisions.md, "Trace limits").
const (
	// MaxTraceDataBytes is the longest data one trace may carry, as sent
	// (JSON text after trimming white space). A trace records a processing
	// step (a status, a few ids, a timing); 64 KiB is generous for that and
	// keeps the listings below bounded: a 40 MiB trace took 7 s to store,
	// stalled other clients' pushes and made its message's traces
	// unreadable (the read timed out).
	MaxTraceDataBytes = 64 << 10
	// MaxTraceBodyBytes is POST /api/v1/traces' body limit (bodyLimit):
	// room for MaxTraceDataBytes of data and every other field escaped at
	// their longest, so that a body that could only be refused is refused
	// from its Content-Length or its first MiB, not read and parsed whole
	// (a 40 MiB one held another producer's pushes 1-1.5 s).
	MaxTraceBodyBytes = 1 << 20
	// tracesPath is the trace-recording route.
	tracesPath = "/api/v1/traces"
	// MaxTraceAnswerBytes is the byte budget of one trace listing (the
	// per-message traces and a by-name page), weighed as pg.TraceListing
	// says (data, ids and names as stored): a listing ends at the trace
	// that would pass it, so an answer holds at most this plus one trace.
	MaxTraceAnswerBytes = 4 << 20
	// MaxMessageTraces is the most traces GET
	// /api/v1/traces/:partitionId/:transactionId answers: the newest ones.
	MaxMessageTraces = 1000
	// MaxTraceNames is the most traceNames one trace may carry (after
	// duplicates are dropped). Queen has no limit; this one keeps a trace
	// row and the names summary bounded.
	MaxTraceNames = 32
	// DefaultTraceEventType is eventType when the body has none (Queen's
	// record_trace_v1).
	DefaultTraceEventType = "info"
)

// Tracer is what the trace routes need (Deps.Traces).
type Tracer interface {
	// RecordTrace returns the new trace's id, or pg.ErrTraceMessageNotFound.
	RecordTrace(ctx context.Context, in pg.TraceInput) (uuid.UUID, error)
	// MessageTraces returns the newest traces of a message that fit the
	// listing, oldest first, and whether older ones were left out.
	MessageTraces(ctx context.Context, partitionID uuid.UUID, transactionID string, l pg.TraceListing) ([]pg.Trace, bool, error)
	// TracesByName returns a page of the traces carrying name (from offset,
	// what fits the listing) and their total.
	TracesByName(ctx context.Context, name string, offset int, l pg.TraceListing) ([]pg.Trace, int64, error)
	// TraceNames returns a page of the names in use and how many there are.
	TraceNames(ctx context.Context, limit, offset int) ([]pg.TraceNameSummary, int64, error)
}

// traceRoutes serves the trace routes with Deps.Traces.
type traceRoutes struct {
	s *Server
	t Tracer
}

// routeTraces registers Queen's message-trace routes (docs/api.md, "Messages
// and traces"). The static segments "by-name" and "names" take priority over
// {partitionId} in fasthttp/router, so they never reach the per-message route
// (e2e TestTraceRoutesStaticSegmentsWin).
func (s *Server) routeTraces(r listingRoutes) {
	tr := &traceRoutes{s: s, t: s.deps.Traces}
	r.POST(tracesPath, tr.record)
	r.GET("/api/v1/traces/names", tr.names)
	r.GET("/api/v1/traces/by-name/{name}", tr.byName)
	r.GET("/api/v1/traces/{partitionId}/{transactionId}", tr.ofMessage)
}

// messageKey reads the {partitionId}/{transactionId} path segments of the
// per-message routes (traces, messages): a UUID and a percent-decoded
// transactionId valid as a push's. On a bad one it answers 400 and returns
// false.
func messageKey(ctx *fasthttp.RequestCtx) (uuid.UUID, string, bool) {
	rawPID, _ := ctx.UserValue("partitionId").(string)
	pid, err := uuid.Parse(rawPID)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "partitionId must be a UUID")
		return uuid.Nil, "", false
	}
	rawTx, _ := ctx.UserValue("transactionId").(string)
	txid, err := url.PathUnescape(rawTx)
	if err == nil {
		err = validateTransactionID(txid)
	}
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "invalid transactionId")
		return uuid.Nil, "", false
	}
	return pid, txid, true
}

// traceBody is POST /api/v1/traces' body; every field is raw so that each
// gets its own 400 text.
type traceBody struct {
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	Data          json.RawMessage `json:"data"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
	EventType     json.RawMessage `json:"eventType"`
	TraceNames    json.RawMessage `json:"traceNames"`
}

// record handles POST /api/v1/traces (Queen SDKs' msg.trace(); docs/api.md,
// "Messages and traces"; Queen's record_trace_v1):
//
//	in:  {"transactionId": string (req, 1..1024 bytes), "partitionId": UUID string (req),
//	      "data": any JSON value (req; null included; ≤ MaxTraceDataBytes), "consumerGroup"?: name (default "__QUEUE_MODE__"),
//	      "eventType"?: name (default "info"), "traceNames"?: name | [name, ...] (≤ 32 distinct)}
//	out: 201 {"success":true,"traceId":"<uuid>"}
//
// Names are 1..255 bytes of UTF-8 without control characters
// (ingest.ValidateName); null or "" for consumerGroup/eventType, and null
// for traceNames, mean "absent". data is stored byte for byte (returned as
// the same JSON value, compacted). A malformed body or field is 400 and
// stores nothing. The message must exist (pg.Store.RecordTrace says where
// it is looked for): Queen answered 500 for an unknown message, here it is
// 404 {"error":"Message not found"}, because it is the client's mistake,
// and a client's mistake is 4xx, never 500 (docs/api.md, "Conventions").
// 503 when PostgreSQL fails.
func (tr *traceRoutes) record(ctx *fasthttp.RequestCtx) {
	var b traceBody
	if !tr.s.readObject(ctx, &b) {
		return
	}
	in, err := b.input()
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	c, cancel := tr.s.adminCtx()
	defer cancel()
	id, err := tr.t.RecordTrace(c, in)
	if errors.Is(err, pg.ErrTraceMessageNotFound) {
		writeErr(ctx, fasthttp.StatusNotFound, "Message not found")
		return
	}
	if err != nil {
		tr.s.dbFail(ctx, "record trace", err)
		return
	}
	writeJSON(ctx, fasthttp.StatusCreated, map[string]any{"success": true, "traceId": id.String()})
}

// input validates the body (see record).
func (b *traceBody) input() (pg.TraceInput, error) {
	var in pg.TraceInput
	txid, err := rawString(b.TransactionID, "transactionId", true)
	if err != nil {
		return in, err
	}
	if err := validateTransactionID(txid); err != nil {
		return in, fmt.Errorf("transactionId %w", err)
	}
	pid, err := rawString(b.PartitionID, "partitionId", true)
	if err != nil {
		return in, err
	}
	if in.PartitionID, err = uuid.Parse(pid); err != nil {
		return in, errors.New("partitionId must be a UUID")
	}
	in.TransactionID = txid
	data := bytes.TrimSpace(b.Data)
	if len(data) == 0 {
		return in, errors.New("data is required")
	}
	if len(data) > MaxTraceDataBytes {
		return in, fmt.Errorf("data is %d bytes, more than the %d (64 KiB) one trace may carry", len(data), MaxTraceDataBytes)
	}
	if !utf8.Valid(data) {
		return in, errors.New("data is not valid UTF-8")
	}
	if d, ok := ingest.JSONDepth(data); !ok || d > ingest.MaxDepth {
		return in, fmt.Errorf("data is malformed or nested deeper than %d levels", ingest.MaxDepth)
	}
	in.Data = bytes.Clone(data) // the request body is reused after the handler
	if in.ConsumerGroup, err = optionalName(b.ConsumerGroup, "consumerGroup", pg.QueueModeGroup); err != nil {
		return in, err
	}
	if in.EventType, err = optionalName(b.EventType, "eventType", DefaultTraceEventType); err != nil {
		return in, err
	}
	in.Names, err = traceNames(b.TraceNames)
	return in, err
}

// validateTransactionID applies push's transactionId rules (ingest) to s:
// at most ingest.MaxTransactionIDBytes of UTF-8, here also non-empty. It
// is the one rule of the routes naming a stored message by transactionId
// (acks, traces, message keys); the error, nil when s is valid, reads
// after the field's name ("transactionId " + err.Error()).
func validateTransactionID(s string) error {
	switch {
	case s == "":
		return errors.New("must be a non-empty string")
	case len(s) > ingest.MaxTransactionIDBytes:
		return fmt.Errorf("is longer than %d bytes", ingest.MaxTransactionIDBytes)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	return nil
}

// rawString decodes a JSON string field; absent or null is "" (an error
// when required).
func rawString(raw json.RawMessage, field string, required bool) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if required {
			return "", fmt.Errorf("%s is required", field)
		}
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%s must be a string", field)
	}
	return s, nil
}

// optionalName is an optional name field: def when absent, null or "".
func optionalName(raw json.RawMessage, field, def string) (string, error) {
	s, err := rawString(raw, field, false)
	if err != nil {
		return "", err
	}
	if s == "" {
		return def, nil
	}
	if err := ingest.ValidateName(s); err != nil {
		return "", fmt.Errorf("%s %w", field, err)
	}
	return s, nil
}

// traceNames reads traceNames: absent, null or [] is none; a string is one
// name; an array holds names. The result is sorted and distinct (Queen
// stored one row per distinct name and listed them sorted), at most
// MaxTraceNames.
func traceNames(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var names []string
	switch raw[0] {
	case '"':
		s, err := rawString(raw, "traceNames", false)
		if err != nil {
			return nil, err
		}
		names = []string{s}
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil, errors.New("traceNames must be a string or an array of strings")
		}
		for i, e := range elems {
			s, err := rawString(e, fmt.Sprintf("traceNames[%d]", i), true)
			if err != nil {
				return nil, err
			}
			names = append(names, s)
		}
	default:
		return nil, errors.New("traceNames must be a string or an array of strings")
	}
	for i, n := range names {
		if err := ingest.ValidateName(n); err != nil {
			return nil, fmt.Errorf("traceNames[%d] %w", i, err)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > MaxTraceNames {
		return nil, fmt.Errorf("traceNames holds more than %d distinct names", MaxTraceNames)
	}
	return names, nil
}

// traceJSON is one trace as Queen's get_message_traces_v1 shaped it.
// worker_id is always null: the broker has no worker identity to record.
func traceJSON(t *pg.Trace) map[string]any {
	return map[string]any{"id": t.ID.String(), "event_type": t.EventType, "data": json.RawMessage(t.Data),
		"consumer_group": t.ConsumerGroup, "worker_id": nil,
		"created_at": t.CreatedAt.UTC().Format(MicrosLayout), "trace_names": t.Names}
}

// ofMessage handles GET /api/v1/traces/{partitionId}/{transactionId}
// (docs/api.md, "Messages and traces"): 200
// {"traces":[{id,event_type,data,consumer_group,worker_id,created_at,
// trace_names}],"truncated":bool}, oldest first; [] for a message without
// traces or unknown (as Queen). The traces are the newest that fit: at most
// MaxMessageTraces and MaxTraceAnswerBytes; truncated says older ones were
// left out (Queen listed all; truncated is this broker's addition).
// transactionId is percent-decoded. 400 for a partitionId that is not a
// UUID or a bad transactionId.
func (tr *traceRoutes) ofMessage(ctx *fasthttp.RequestCtx) {
	pid, txid, ok := messageKey(ctx)
	if !ok {
		return
	}
	c, cancel := tr.s.adminCtx()
	defer cancel()
	ts, more, err := tr.t.MessageTraces(c, pid, txid, pg.TraceListing{Limit: MaxMessageTraces, Budget: MaxTraceAnswerBytes})
	if err != nil {
		tr.s.dbFail(ctx, "message traces", err)
		return
	}
	out := make([]map[string]any, len(ts))
	for i := range ts {
		out[i] = traceJSON(&ts[i])
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"traces": out, "truncated": more})
}

// byName handles GET /api/v1/traces/by-name/{name}?limit=100&offset=0
// (docs/api.md, "Messages and traces"): 200 {"traces":[...],"total":n,
// "pagination":{limit,offset}}, oldest first. Each trace is traceJSON plus
// where its message is: transaction_id, partition_id, queue_name,
// partition_name (Queen's get_traces_by_name_v1 names) and transactionId,
// partitionId (this API's spelling elsewhere). Queen's message_payload is not
// included. name is percent-decoded; 400 unless it is a valid name
// (ingest.ValidateName). limit is clamped to 1..1000, offset to ≥ 0; a
// non-number takes the default. A page also ends where the next trace would
// pass MaxTraceAnswerBytes; pagination.limit is then the number of traces
// it holds, so offset + limit is the next page either way.
func (tr *traceRoutes) byName(ctx *fasthttp.RequestCtx) {
	raw, _ := ctx.UserValue("name").(string)
	name, err := url.PathUnescape(raw)
	if err == nil {
		err = ingest.ValidateName(name)
	}
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "invalid trace name")
		return
	}
	a := ctx.QueryArgs()
	limit := intArg(a, "limit", 100, 1, 1000)
	offset := intArg(a, "offset", 0, 0, 1<<30)
	c, cancel := tr.s.adminCtx()
	defer cancel()
	ts, total, err := tr.t.TracesByName(c, name, offset, pg.TraceListing{Limit: limit, Budget: MaxTraceAnswerBytes})
	if err != nil {
		tr.s.dbFail(ctx, "traces by name", err)
		return
	}
	if n := len(ts); n > 0 && n < limit && int64(offset+n) < total {
		limit = n // the budget ended the page
	}
	out := make([]map[string]any, len(ts))
	for i := range ts {
		t := &ts[i]
		m := traceJSON(t)
		m["transaction_id"], m["transactionId"] = t.TransactionID, t.TransactionID
		m["partition_id"], m["partitionId"] = t.PartitionID.String(), t.PartitionID.String()
		m["queue_name"], m["partition_name"] = t.Queue, t.Partition
		out[i] = m
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"traces": out, "total": total,
		"pagination": map[string]int{"limit": limit, "offset": offset}})
}

// names handles GET /api/v1/traces/names?limit=50&offset=0 (docs/api.md,
// "Messages and traces"; Queen's get_available_trace_names_v1): 200
// {"trace_names":[{trace_name,trace_count,message_count,last_seen}],
// "total":n,"pagination":{limit,offset}}, most recently seen first; total
// counts distinct names. message_count counts distinct (partitionId,
// transactionId). limit is clamped to 1..1000, offset to ≥ 0.
func (tr *traceRoutes) names(ctx *fasthttp.RequestCtx) {
	a := ctx.QueryArgs()
	limit := intArg(a, "limit", 50, 1, 1000)
	offset := intArg(a, "offset", 0, 0, 1<<30)
	c, cancel := tr.s.adminCtx()
	defer cancel()
	ns, total, err := tr.t.TraceNames(c, limit, offset)
	if err != nil {
		tr.s.dbFail(ctx, "trace names", err)
		return
	}
	out := make([]map[string]any, len(ns))
	for i, n := range ns {
		out[i] = map[string]any{"trace_name": n.Name, "trace_count": n.TraceCount, "message_count": n.MessageCount,
			"last_seen": n.LastSeen.UTC().Format(MicrosLayout)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"trace_names": out, "total": total,
		"pagination": map[string]int{"limit": limit, "offset": offset}})
}
