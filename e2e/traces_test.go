package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// Message traces (docs/api.md, "Messages and traces"; fastapi/traces.go,
// pg/traces.go).

type traceRow struct {
	ID            string          `json:"id"`
	EventType     string          `json:"event_type"`
	Data          json.RawMessage `json:"data"`
	ConsumerGroup string          `json:"consumer_group"`
	WorkerID      *string         `json:"worker_id"`
	CreatedAt     string          `json:"created_at"`
	TraceNames    []string        `json:"trace_names"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	TxSnake       string          `json:"transaction_id"`
	PidSnake      string          `json:"partition_id"`
	QueueName     string          `json:"queue_name"`
	PartitionName string          `json:"partition_name"`
}

type tracesResp struct {
	Traces     []traceRow `json:"traces"`
	Total      *int64     `json:"total"`
	Pagination *struct {
		Limit  int `json:"limit"`
		Offset int `json:"offset"`
	} `json:"pagination"`
}

type traceNamesResp struct {
	TraceNames []struct {
		TraceName    string `json:"trace_name"`
		TraceCount   int64  `json:"trace_count"`
		MessageCount int64  `json:"message_count"`
		LastSeen     string `json:"last_seen"`
	} `json:"trace_names"`
	Total      int64 `json:"total"`
	Pagination struct {
		Limit  int `json:"limit"`
		Offset int `json:"offset"`
	} `json:"pagination"`
}

// recordTrace posts a trace body and returns the status and response body.
func recordTrace(t testing.TB, base string, fields map[string]any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return post(t, base, "/api/v1/traces", b)
}

// mustTrace records a trace and requires 201; it returns the traceId.
func mustTrace(t testing.TB, base string, fields map[string]any) string {
	t.Helper()
	code, rb := recordTrace(t, base, fields)
	var res struct {
		Success bool   `json:"success"`
		TraceID string `json:"traceId"`
	}
	if code != http.StatusCreated || json.Unmarshal(rb, &res) != nil || !res.Success || res.TraceID == "" {
		t.Fatalf("record trace: %d %s", code, rb)
	}
	return res.TraceID
}

func messageTraces(t testing.TB, base, pid, txid string) []traceRow {
	t.Helper()
	var r tracesResp
	u := base + "/api/v1/traces/" + pid + "/" + url.PathEscape(txid)
	if code := getJSON(t, u, &r); code != http.StatusOK {
		t.Fatalf("GET %s: %d", u, code)
	}
	if r.Traces == nil {
		t.Fatalf("GET %s: no traces array", u)
	}
	return r.Traces
}

func tracesByName(t testing.TB, base, name, query string) tracesResp {
	t.Helper()
	var r tracesResp
	u := base + "/api/v1/traces/by-name/" + url.PathEscape(name) + query
	if code := getJSON(t, u, &r); code != http.StatusOK || r.Traces == nil || r.Total == nil || r.Pagination == nil {
		t.Fatalf("GET %s: %d %+v", u, code, r)
	}
	return r
}

func traceNamesOf(t testing.TB, base, query string) traceNamesResp {
	t.Helper()
	var r traceNamesResp
	if code := getJSON(t, base+"/api/v1/traces/names"+query, &r); code != http.StatusOK || r.TraceNames == nil {
		t.Fatalf("GET trace names: %d %+v", code, r)
	}
	return r
}

// popTwo pushes m-1, m-2 to queue/P and pops both under one lease.
func popTwo(t *testing.T, base, queue string) (popMsg, popMsg) {
	t.Helper()
	pushN(t, base, queue, "P", 1, 2)
	code, r := pop(t, base, popPath(queue, "P"), "batch=2")
	if code != http.StatusOK || len(r.Messages) != 2 {
		t.Fatalf("pop: %d %s", code, r.raw)
	}
	return r.Messages[0], r.Messages[1]
}

// TestTracesRecordReadAndSurviveAck records traces on popped messages and
// reads them back by message, by name (with paging) and in the names
// summary, before and after the messages are acked.
func TestTracesRecordReadAndSurviveAck(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, m2 := popTwo(t, s.base, "tq")

	// data is kept as the same JSON value: key order and number spelling.
	id1 := mustTrace(t, s.base, map[string]any{"transactionId": m1.TransactionID, "partitionId": m1.PartitionID,
		"data": json.RawMessage(`{"z":1.50,"a":[true,null],"s":"<é>"}`), "eventType": "processing", "traceNames": "tenant-a"})
	id2 := mustTrace(t, s.base, map[string]any{"transactionId": m1.TransactionID, "partitionId": m1.PartitionID,
		"data": "step two", "consumerGroup": "workers", "traceNames": []string{"tenant-a", "order-7", "tenant-a"}})
	id3 := mustTrace(t, s.base, map[string]any{"transactionId": m2.TransactionID, "partitionId": m2.PartitionID,
		"data": nil, "traceNames": []string{"order-7"}})
	mustTrace(t, s.base, map[string]any{"transactionId": m2.TransactionID, "partitionId": m2.PartitionID, "data": 0})

	check := func(when string) {
		t.Helper()
		got := messageTraces(t, s.base, m1.PartitionID, m1.TransactionID)
		if len(got) != 2 || got[0].ID != id1 || got[1].ID != id2 {
			t.Fatalf("%s: traces of m-1 = %+v, want ids %s, %s oldest first", when, got, id1, id2)
		}
		a, b := got[0], got[1]
		if string(a.Data) != `{"z":1.50,"a":[true,null],"s":"\u003cé\u003e"}` && string(a.Data) != `{"z":1.50,"a":[true,null],"s":"<é>"}` {
			t.Errorf("%s: data = %s", when, a.Data)
		}
		if a.EventType != "processing" || a.ConsumerGroup != "__QUEUE_MODE__" || a.WorkerID != nil ||
			fmt.Sprint(a.TraceNames) != "[tenant-a]" {
			t.Errorf("%s: first trace = %+v", when, a)
		}
		if string(b.Data) != `"step two"` || b.EventType != "info" || b.ConsumerGroup != "workers" ||
			fmt.Sprint(b.TraceNames) != "[order-7 tenant-a]" {
			t.Errorf("%s: second trace = %+v", when, b)
		}
		ca, err1 := time.Parse(time.RFC3339Nano, a.CreatedAt)
		cb, err2 := time.Parse(time.RFC3339Nano, b.CreatedAt)
		if err1 != nil || err2 != nil || cb.Before(ca) || time.Since(ca) > time.Minute {
			t.Errorf("%s: created_at %q, %q", when, a.CreatedAt, b.CreatedAt)
		}
		got2 := messageTraces(t, s.base, m2.PartitionID, m2.TransactionID)
		if len(got2) != 2 || got2[0].ID != id3 || string(got2[0].Data) != "null" || string(got2[1].Data) != "0" ||
			len(got2[1].TraceNames) != 0 {
			t.Errorf("%s: traces of m-2 = %+v", when, got2)
		}

		byName := tracesByName(t, s.base, "tenant-a", "")
		if *byName.Total != 2 || len(byName.Traces) != 2 || byName.Traces[0].ID != id1 || byName.Traces[1].ID != id2 ||
			byName.Pagination.Limit != 100 || byName.Pagination.Offset != 0 {
			t.Fatalf("%s: by-name tenant-a = %+v", when, byName)
		}
		for _, tr := range byName.Traces {
			if tr.TransactionID != m1.TransactionID || tr.PartitionID != m1.PartitionID || tr.TxSnake != m1.TransactionID ||
				tr.PidSnake != m1.PartitionID || tr.QueueName != "tq" || tr.PartitionName != "P" {
				t.Errorf("%s: by-name trace does not name its message: %+v", when, tr)
			}
		}
		page := tracesByName(t, s.base, "order-7", "?limit=1&offset=1")
		if *page.Total != 2 || len(page.Traces) != 1 || page.Traces[0].ID != id3 || page.Pagination.Limit != 1 ||
			page.Pagination.Offset != 1 {
			t.Errorf("%s: by-name order-7 page 2 = %+v", when, page)
		}
		if none := tracesByName(t, s.base, "nobody", ""); *none.Total != 0 || len(none.Traces) != 0 {
			t.Errorf("%s: by-name nobody = %+v", when, none)
		}

		names := traceNamesOf(t, s.base, "")
		got3 := fmt.Sprint(names.TraceNames)
		if names.Total != 2 || len(names.TraceNames) != 2 || names.Pagination.Limit != 50 {
			t.Fatalf("%s: names = %+v", when, names)
		}
		// order-7 was seen last (on m-2), so it comes first.
		o, ta := names.TraceNames[0], names.TraceNames[1]
		if o.TraceName != "order-7" || o.TraceCount != 2 || o.MessageCount != 2 ||
			ta.TraceName != "tenant-a" || ta.TraceCount != 2 || ta.MessageCount != 1 {
			t.Errorf("%s: names = %s", when, got3)
		}
		if _, err := time.Parse(time.RFC3339Nano, o.LastSeen); err != nil {
			t.Errorf("%s: last_seen %q", when, o.LastSeen)
		}
		if p := traceNamesOf(t, s.base, "?limit=1&offset=1"); p.Total != 2 || len(p.TraceNames) != 1 ||
			p.TraceNames[0].TraceName != "tenant-a" {
			t.Errorf("%s: names page 2 = %+v", when, p)
		}
	}
	check("before ack")
	for _, m := range []popMsg{m1, m2} {
		if a := ack(t, s.base, m, "completed", ""); !a.Success {
			t.Fatalf("ack %s", m.TransactionID)
		}
	}
	if code, _ := pop(t, s.base, popPath("tq", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("queue not drained: %d", code)
	}
	check("after ack")
	// A consumed message can still be traced (its segment is still stored).
	mustTrace(t, s.base, map[string]any{"transactionId": m1.TransactionID, "partitionId": m1.PartitionID, "data": 1})
}

// TestTraceUnknownMessage404: a trace for a message that is not stored is
// the client's mistake: 404 {"error":"Message not found"} (Queen: 500),
// and nothing is stored.
func TestTraceUnknownMessage404(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, _ := popTwo(t, s.base, "tu")
	for _, c := range []struct{ name, pid, txid string }{
		{"unknown transactionId", m1.PartitionID, "m-99"},
		{"unknown partition", "0190a4c2-0000-7000-8000-000000000001", m1.TransactionID},
		{"transactionId of another partition's message", "0190a4c2-0000-7000-8000-000000000002", "m-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, rb := recordTrace(t, s.base, map[string]any{"transactionId": c.txid, "partitionId": c.pid, "data": 1,
				"traceNames": "lost"})
			var e struct{ Error string }
			if code != http.StatusNotFound || json.Unmarshal(rb, &e) != nil || e.Error != "Message not found" {
				t.Fatalf("got %d %s, want 404 Message not found", code, rb)
			}
			if got := messageTraces(t, s.base, c.pid, c.txid); len(got) != 0 {
				t.Fatalf("stored: %+v", got)
			}
		})
	}
	if n := traceNamesOf(t, s.base, ""); n.Total != 0 {
		t.Fatalf("names after 404s: %+v", n)
	}
}

// TestTraceBadBodies400: every malformed body or field is 400 with an
// error text, and nothing is stored.
func TestTraceBadBodies400(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, _ := popTwo(t, s.base, "tb")
	tx, pid := m1.TransactionID, m1.PartitionID
	ok := func(extra string) string {
		return fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"data":{"k":1}%s}`, tx, pid, extra)
	}
	names33 := make([]string, 33)
	for i := range names33 {
		names33[i] = fmt.Sprintf("%q", fmt.Sprintf("n%d", i))
	}
	for _, c := range []struct{ name, body string }{
		{"empty body", ``},
		{"not JSON", `{"transactionId":`},
		{"array body", `[1]`},
		{"missing transactionId", fmt.Sprintf(`{"partitionId":%q,"data":1}`, pid)},
		{"null transactionId", fmt.Sprintf(`{"transactionId":null,"partitionId":%q,"data":1}`, pid)},
		{"empty transactionId", fmt.Sprintf(`{"transactionId":"","partitionId":%q,"data":1}`, pid)},
		{"numeric transactionId", fmt.Sprintf(`{"transactionId":1,"partitionId":%q,"data":1}`, pid)},
		{"transactionId over 1024 bytes", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"data":1}`, strings.Repeat("x", 1025), pid)},
		{"missing partitionId", fmt.Sprintf(`{"transactionId":%q,"data":1}`, tx)},
		{"partitionId not a UUID", fmt.Sprintf(`{"transactionId":%q,"partitionId":"P","data":1}`, tx)},
		{"missing data", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q}`, tx, pid)},
		{"data nested too deep", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"data":%s1%s}`, tx, pid,
			strings.Repeat("[", 600), strings.Repeat("]", 600))},
		{"consumerGroup not a string", ok(`,"consumerGroup":5`)},
		{"consumerGroup too long", ok(fmt.Sprintf(`,"consumerGroup":%q`, strings.Repeat("g", 256)))},
		{"eventType not a string", ok(`,"eventType":{}`)},
		{"eventType with a control character", ok(`,"eventType":"a\nb"`)},
		{"traceNames a number", ok(`,"traceNames":5`)},
		{"traceNames object", ok(`,"traceNames":{"a":1}`)},
		{"traceNames with a number", ok(`,"traceNames":["a",1]`)},
		{"traceNames with null", ok(`,"traceNames":["a",null]`)},
		{"traceNames empty string", ok(`,"traceNames":""`)},
		{"traceNames with an empty name", ok(`,"traceNames":["a",""]`)},
		{"traceName over 255 bytes", ok(fmt.Sprintf(`,"traceNames":[%q]`, strings.Repeat("n", 256)))},
		{"33 traceNames", ok(`,"traceNames":[` + strings.Join(names33, ",") + `]`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, rb := post(t, s.base, "/api/v1/traces", []byte(c.body))
			var e struct{ Error string }
			if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || e.Error == "" {
				t.Fatalf("got %d %s, want 400 with an error", code, rb)
			}
		})
	}
	if got := messageTraces(t, s.base, pid, tx); len(got) != 0 {
		t.Fatalf("stored after 400s: %+v", got)
	}
	if n := traceNamesOf(t, s.base, ""); n.Total != 0 {
		t.Fatalf("names after 400s: %+v", n)
	}
	// The limits themselves are accepted: 32 distinct names of 255 bytes
	// (33 entries with one repeat).
	names := []string{strings.Repeat("n", 255)}
	for i := range 31 {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	names = append(names, "n0")
	mustTrace(t, s.base, map[string]any{"transactionId": tx, "partitionId": pid, "data": 1, "traceNames": names})
	if got := messageTraces(t, s.base, pid, tx); len(got) != 1 || len(got[0].TraceNames) != 32 {
		t.Fatalf("32 names: %+v", got)
	}

	// GET routes: a partitionId that is not a UUID and a bad name are 400.
	for _, u := range []string{"/api/v1/traces/P/m-1", "/api/v1/traces/by-name/" + strings.Repeat("n", 256)} {
		if code, b := get(t, s.base+u); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", u, code, b)
		}
	}
}

// TestTraceRoutesStaticSegmentsWin: /traces/names and /traces/by-name/x
// reach their own handlers, not the {partitionId}/{transactionId} route;
// a transactionId "names" or with a "/" reaches the per-message route.
func TestTraceRoutesStaticSegmentsWin(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	push(t, s.base, body(item{"ts", "P", 1, "names"}, item{"ts", "P", 2, "a/b c"}))
	code, r := pop(t, s.base, popPath("ts", "P"), "batch=2")
	if code != http.StatusOK || len(r.Messages) != 2 {
		t.Fatalf("pop: %d", code)
	}
	pid := r.Messages[0].PartitionID
	idNames := mustTrace(t, s.base, map[string]any{"transactionId": "names", "partitionId": pid, "data": 1, "traceNames": "by-name"})
	idSlash := mustTrace(t, s.base, map[string]any{"transactionId": "a/b c", "partitionId": pid, "data": 2, "traceNames": "names"})

	if n := traceNamesOf(t, s.base, ""); n.Total != 2 {
		t.Errorf("/traces/names = %+v", n)
	}
	if b := tracesByName(t, s.base, "names", ""); *b.Total != 1 || b.Traces[0].ID != idSlash {
		t.Errorf("/traces/by-name/names = %+v", b)
	}
	if b := tracesByName(t, s.base, "by-name", ""); *b.Total != 1 || b.Traces[0].ID != idNames {
		t.Errorf("/traces/by-name/by-name = %+v", b)
	}
	if got := messageTraces(t, s.base, pid, "names"); len(got) != 1 || got[0].ID != idNames {
		t.Errorf("/traces/{pid}/names = %+v", got)
	}
	if got := messageTraces(t, s.base, pid, "a/b c"); len(got) != 1 || got[0].ID != idSlash {
		t.Errorf("/traces/{pid}/a%%2Fb%%20c = %+v", got)
	}
}

// TestTracesGoWithQueueDelete: deleting the queue deletes its partitions
// and, by cascade, their traces; names and by-name forget them.
func TestTracesGoWithQueueDelete(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, _ := popTwo(t, s.base, "td")
	k1, _ := popTwo(t, s.base, "keep")
	mustTrace(t, s.base, map[string]any{"transactionId": m1.TransactionID, "partitionId": m1.PartitionID, "data": 1, "traceNames": "gone"})
	mustTrace(t, s.base, map[string]any{"transactionId": k1.TransactionID, "partitionId": k1.PartitionID, "data": 2, "traceNames": "kept"})
	if code, b := del(t, s.base+"/api/v1/resources/queues/td"); code != http.StatusOK {
		t.Fatalf("delete queue: %d %s", code, b)
	}
	if got := messageTraces(t, s.base, m1.PartitionID, m1.TransactionID); len(got) != 0 {
		t.Errorf("traces of the deleted queue's message: %+v", got)
	}
	if b := tracesByName(t, s.base, "gone", ""); *b.Total != 0 || len(b.Traces) != 0 {
		t.Errorf("by-name gone = %+v", b)
	}
	n := traceNamesOf(t, s.base, "")
	if n.Total != 1 || n.TraceNames[0].TraceName != "kept" {
		t.Errorf("names = %+v", n)
	}
	if got := messageTraces(t, s.base, k1.PartitionID, k1.TransactionID); len(got) != 1 {
		t.Errorf("other queue's traces: %+v", got)
	}
}

// TestTraceFindsLeasedMessageAfterDedupSweep: once the dedup sidecar entry
// is gone (swept after the queue's dedup window), a message under a
// consumer's lease is still found; once acked and no longer leased, it is
// not (404).
func TestTraceFindsLeasedMessageAfterDedupSweep(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, m2 := popTwo(t, s.base, "tl")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.store.Pool().Exec(ctx, `DELETE FROM queen.dedup_batches`); err != nil { // what SweepDedup does later
		t.Fatal(err)
	}
	mustTrace(t, s.base, map[string]any{"transactionId": m2.TransactionID, "partitionId": m2.PartitionID, "data": 1})
	for _, m := range []popMsg{m1, m2} {
		if a := ack(t, s.base, m, "completed", ""); !a.Success {
			t.Fatal("ack")
		}
	}
	if code, rb := recordTrace(t, s.base, map[string]any{"transactionId": m2.TransactionID, "partitionId": m2.PartitionID,
		"data": 2}); code != http.StatusNotFound {
		t.Fatalf("unleased message without a dedup entry: %d %s, want 404", code, rb)
	}
	if got := messageTraces(t, s.base, m2.PartitionID, m2.TransactionID); len(got) != 1 {
		t.Fatalf("traces: %+v", got)
	}
}

// TestTracesGoWithRetention: a message's traces are deleted when retention
// deletes the message; the traces of a message still stored stay.
func TestTracesGoWithRetention(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.RetentionInterval = 200 * time.Millisecond })
	configure(t, s.base, "tret", map[string]any{"retentionEnabled": true, "retentionSeconds": 2})
	old, _ := popTwo(t, s.base, "tret")
	mustTrace(t, s.base, map[string]any{"transactionId": old.TransactionID, "partitionId": old.PartitionID, "data": "old"})
	time.Sleep(1500 * time.Millisecond)
	pushN(t, s.base, "tret", "P", 3, 3) // a younger segment, kept for now
	_, r := pop(t, s.base, popPath("tret", "P"), "consumerGroup=g&autoAck=true&batch=10")
	var young popMsg
	for _, m := range r.Messages {
		if m.TransactionID == "m-3" {
			young = m
		}
	}
	if young.TransactionID == "" {
		t.Fatalf("m-3 not popped: %s", r.raw)
	}
	mustTrace(t, s.base, map[string]any{"transactionId": young.TransactionID, "partitionId": young.PartitionID, "data": "young"})
	testenv.WaitFor(t, 10*time.Second, "retention of the old segment", func() bool {
		return len(readPartition(t, s.store, "tret", "P")) == 1
	})
	if got := messageTraces(t, s.base, old.PartitionID, old.TransactionID); len(got) != 0 {
		t.Fatalf("traces of a message retention deleted: %+v", got)
	}
	if got := messageTraces(t, s.base, young.PartitionID, young.TransactionID); len(got) != 1 {
		t.Fatalf("traces of a stored message: %+v", got)
	}
}

// TestTraceLimits: a trace's data is at most 64 KiB (400 naming the limit,
// nothing stored); a message's traces answer the newest that fit the 4 MiB
// budget, oldest first, with truncated; a by-name page ends at the budget
// and says so in pagination.limit, so offset + limit pages through every
// trace once. The row cap of the per-message listing is the store's.
func TestTraceLimits(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	m1, m2 := popTwo(t, s.base, "tlim")
	tx, pid := m1.TransactionID, m1.PartitionID
	str := func(n int) string { return `"` + strings.Repeat("d", n-2) + `"` } // n bytes of JSON
	code, rb := post(t, s.base, "/api/v1/traces", fmt.Appendf(nil,
		`{"transactionId":%q,"partitionId":%q,"data":%s}`, tx, pid, str(fastapi.MaxTraceDataBytes+1)))
	var e struct{ Error string }
	if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || !strings.Contains(e.Error, "65536") {
		t.Fatalf("data over 64 KiB: %d %s, want 400 naming the limit", code, rb)
	}
	if got := messageTraces(t, s.base, pid, tx); len(got) != 0 {
		t.Fatalf("stored after 400: %d traces", len(got))
	}
	// A body past the route's own 1 MiB limit is a 413 naming it.
	code, rb = post(t, s.base, "/api/v1/traces", fmt.Appendf(nil,
		`{"transactionId":%q,"partitionId":%q,"data":%s}`, tx, pid, str(2<<20)))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(rb), "the traces limit of 1 MiB") {
		t.Fatalf("a 2 MiB trace body: %d %s, want 413 naming the traces limit", code, rb)
	}

	// 70 traces of 64 KiB: 4.4 MiB, more than one listing carries.
	const n = 70
	ids := make([]string, n)
	for i := range ids {
		ids[i] = mustTrace(t, s.base, map[string]any{"transactionId": tx, "partitionId": pid,
			"data": json.RawMessage(str(fastapi.MaxTraceDataBytes)), "traceNames": "big"})
	}
	var r struct {
		Traces    []traceRow `json:"traces"`
		Truncated *bool      `json:"truncated"`
	}
	u := s.base + "/api/v1/traces/" + pid + "/" + url.PathEscape(tx)
	if code := getJSON(t, u, &r); code != http.StatusOK || r.Truncated == nil || !*r.Truncated {
		t.Fatalf("GET %s: %d, %d traces, truncated %v; want 200 truncated", u, code, len(r.Traces), r.Truncated)
	}
	k := len(r.Traces)
	if k == 0 || k >= n || k*fastapi.MaxTraceDataBytes > fastapi.MaxTraceAnswerBytes+fastapi.MaxTraceDataBytes {
		t.Fatalf("message traces: %d of %d, want the newest that fit %d bytes", k, n, fastapi.MaxTraceAnswerBytes)
	}
	for i, tr := range r.Traces { // the newest k, oldest first
		if tr.ID != ids[n-k+i] {
			t.Fatalf("trace %d is %s, want %s (the newest %d, oldest first)", i, tr.ID, ids[n-k+i], k)
		}
	}
	if got := messageTraces(t, s.base, m2.PartitionID, m2.TransactionID); len(got) != 0 {
		t.Fatalf("m-2 has traces: %d", len(got))
	}

	seen := map[string]bool{}
	for offset := 0; offset < n; {
		p := tracesByName(t, s.base, "big", fmt.Sprintf("?limit=1000&offset=%d", offset))
		if *p.Total != n || len(p.Traces) == 0 || len(p.Traces) >= n || p.Pagination.Limit != len(p.Traces) && offset+len(p.Traces) < n {
			t.Fatalf("by-name offset %d: total %d, %d traces, limit %d", offset, *p.Total, len(p.Traces), p.Pagination.Limit)
		}
		for i, tr := range p.Traces {
			if tr.ID != ids[offset+i] || seen[tr.ID] {
				t.Fatalf("by-name offset %d: trace %d is %s, want %s", offset, i, tr.ID, ids[offset+i])
			}
			seen[tr.ID] = true
		}
		offset += p.Pagination.Limit
	}
	if len(seen) != n {
		t.Fatalf("by-name pages held %d of %d traces", len(seen), n)
	}

	// The row cap: the newest Limit, oldest first.
	small := func(i int) string { return fmt.Sprint(i) }
	for i := range 4 {
		mustTrace(t, s.base, map[string]any{"transactionId": m2.TransactionID, "partitionId": m2.PartitionID, "data": i})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, more, err := s.store.MessageTraces(ctx, uuid.MustParse(m2.PartitionID), m2.TransactionID,
		pg.TraceListing{Limit: 3, Budget: 1 << 20})
	if err != nil || !more || len(got) != 3 || string(got[0].Data) != small(1) || string(got[2].Data) != small(3) {
		t.Fatalf("store listing of 4 with limit 3: %d traces, more %v, %v", len(got), more, err)
	}
	if got, more, err := s.store.MessageTraces(ctx, uuid.MustParse(m2.PartitionID), m2.TransactionID,
		pg.TraceListing{Limit: 4, Budget: 1 << 20}); err != nil || more || len(got) != 4 {
		t.Fatalf("store listing of 4 with limit 4: %d traces, more %v, %v", len(got), more, err)
	}
}
