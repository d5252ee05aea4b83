package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/testenv"
)

// --- a stream runtime as Queen's SDKs drive it (pop, state/get, cycle) ---

// tryPost is post without failing the test: network errors are returned
// (a broker killed mid-request).
func tryPost(base, path string, b []byte) (int, []byte, error) {
	resp, err := testenv.Client.Post(base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, rb, err
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type registerResp struct {
	Success    bool   `json:"success"`
	QueryID    string `json:"query_id"`
	Name       string `json:"name"`
	ConfigHash string `json:"config_hash"`
	Fresh      bool   `json:"fresh"`
	Reset      bool   `json:"reset"`
	Error      string `json:"error"`
}

func register(t testing.TB, base string, req map[string]any) (int, registerResp) {
	t.Helper()
	code, rb := post(t, base, "/streams/v1/queries", jsonBody(req))
	var r registerResp
	if err := json.Unmarshal(rb, &r); err != nil {
		t.Fatalf("register: %d %s", code, rb)
	}
	return code, r
}

type pushResult struct {
	Index         int    `json:"index"`
	TransactionID string `json:"transaction_id"`
	Status        string `json:"status"`
	MessageID     string `json:"message_id"`
	PartitionID   string `json:"partition_id"`
	QueueName     string `json:"queueName"`
}

type cycleResp struct {
	Success         bool         `json:"success"`
	Error           string       `json:"error"`
	QueryID         string       `json:"query_id"`
	PartitionID     string       `json:"partition_id"`
	QueueName       *string      `json:"queueName"`
	StateOpsApplied int          `json:"state_ops_applied"`
	PushResults     []pushResult `json:"push_results"`
	AckResult       *struct {
		Success       bool `json:"success"`
		Count         int  `json:"count"`
		LeaseReleased bool `json:"lease_released"`
		DLQ           bool `json:"dlq"`
	} `json:"ack_result"`
}

func cycle(t testing.TB, base string, req map[string]any) cycleResp {
	t.Helper()
	code, rb := post(t, base, "/streams/v1/cycle", jsonBody(req))
	var r cycleResp
	if code != http.StatusOK || json.Unmarshal(rb, &r) != nil {
		t.Fatalf("cycle: %d %s", code, rb)
	}
	return r
}

type stateRow struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	UpdatedAt string          `json:"updated_at"`
}

func stateGet(t testing.TB, base string, req map[string]any) []stateRow {
	t.Helper()
	code, rb := post(t, base, "/streams/v1/state/get", jsonBody(req))
	var r struct {
		Success bool       `json:"success"`
		Rows    []stateRow `json:"rows"`
	}
	if code != http.StatusOK || json.Unmarshal(rb, &r) != nil || !r.Success {
		t.Fatalf("state/get: %d %s", code, rb)
	}
	return r.Rows
}

// streamStep turns one popped batch of one partition and that shard's
// state into state ops and sink items (what the SDK's operators compute).
type streamStep func(msgs []popMsg, state map[string]json.RawMessage) (ops, items []map[string]any)

// streamJob is one worker of a stream query.
type streamJob struct {
	base    func() string
	name    string
	source  string
	group   string
	queryID string
	batch   int
	step    streamStep
	// release is release_lease of every cycle (false: a gate's partial ack).
	release bool
	// limit, when > 0, acks only the first limit messages of a batch (gate).
	limit int
}

func newJob(t testing.TB, base string, name, source, hash, sink string, step streamStep) *streamJob {
	t.Helper()
	req := map[string]any{"name": name, "source_queue": source, "config_hash": hash, "reset": false}
	if sink != "" {
		req["sink_queue"] = sink
	}
	code, r := register(t, base, req)
	if code != http.StatusOK || !r.Success {
		t.Fatalf("register %s: %d %+v", name, code, r)
	}
	return &streamJob{base: func() string { return base }, name: name, source: source, group: "streams." + name,
		queryID: r.QueryID, batch: 200, step: step, release: true}
}

// once pops one batch (waiting up to wait) and commits its cycle. It
// returns how many messages were committed; an error for a network
// failure or a refused cycle (the messages come back).
func (j *streamJob) once(wait time.Duration) (int, error) {
	q := url.Values{"batch": {fmt.Sprint(j.batch)}, "consumerGroup": {j.group}, "wait": {"true"},
		"timeout": {fmt.Sprint(wait.Milliseconds())}}
	resp, err := testenv.Client.Get(j.base() + popPath(j.source, "") + "?" + q.Encode())
	if err != nil {
		return 0, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return 0, nil
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("pop: %d %s", resp.StatusCode, b)
	}
	var pr popResp
	if err := json.Unmarshal(b, &pr); err != nil {
		return 0, err
	}
	msgs := pr.Messages
	if j.limit > 0 && len(msgs) > j.limit {
		msgs = msgs[:j.limit]
	}
	pid := msgs[0].PartitionID
	code, rb, err := tryPost(j.base(), "/streams/v1/state/get", jsonBody(map[string]any{"query_id": j.queryID, "partition_id": pid, "keys": nil}))
	if err != nil {
		return 0, err
	}
	var sr struct {
		Rows []stateRow `json:"rows"`
	}
	if code != http.StatusOK || json.Unmarshal(rb, &sr) != nil {
		return 0, fmt.Errorf("state/get: %d %s", code, rb)
	}
	state := map[string]json.RawMessage{}
	for _, r := range sr.Rows {
		state[r.Key] = r.Value
	}
	ops, items := j.step(msgs, state)
	if ops == nil {
		ops = []map[string]any{}
	}
	if items == nil {
		items = []map[string]any{}
	}
	last := msgs[len(msgs)-1]
	body := jsonBody(map[string]any{"query_id": j.queryID, "partition_id": pid, "consumer_group": j.group,
		"state_ops": ops, "push_items": items, "release_lease": j.release,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed", "count": len(msgs)}})
	// The SDK's HTTP client retries a network failure 3 times.
	var cr cycleResp
	for attempt := 0; ; attempt++ {
		code, rb, err = tryPost(j.base(), "/streams/v1/cycle", body)
		if err == nil {
			break
		}
		if attempt == 3 {
			return 0, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	if code != http.StatusOK || json.Unmarshal(rb, &cr) != nil {
		return 0, fmt.Errorf("cycle: %d %s", code, rb)
	}
	if !cr.Success {
		return 0, fmt.Errorf("cycle refused: %s", cr.Error)
	}
	return len(msgs), nil
}

// drain runs the job until want messages were committed.
func (j *streamJob) drain(t testing.TB, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := 0
	for got < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: committed %d of %d", j.name, got, want)
		}
		n, err := j.once(500 * time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", j.name, err)
		}
		got += n
	}
}

// sumStep keeps per shard "sum" and "count" of data.v and pushes one sink
// item {v2: v*2} per message: a map plus an aggregate.
func sumStep(sink string) streamStep {
	return func(msgs []popMsg, state map[string]json.RawMessage) (ops, items []map[string]any) {
		var agg struct{ Sum, Count int }
		if raw, ok := state["agg"]; ok {
			_ = json.Unmarshal(raw, &agg)
		}
		for _, m := range msgs {
			var d struct{ V int }
			_ = json.Unmarshal(m.Data, &d)
			agg.Sum += d.V
			agg.Count++
			if sink != "" {
				items = append(items, map[string]any{"queue": sink, "partition": m.Partition, "payload": map[string]int{"v2": d.V * 2}})
			}
		}
		return []map[string]any{{"type": "upsert", "key": "agg", "value": agg}}, items
	}
}

func pushValues(t testing.TB, base, queue string, partitions, perPartition int) (total int) {
	t.Helper()
	for p := 0; p < partitions; p++ {
		var items []item
		for i := 0; i < perPartition; i++ {
			v := p*1000 + i
			total += v
			items = append(items, item{Queue: queue, Partition: fmt.Sprintf("p%d", p), Payload: map[string]int{"v": v}})
		}
		for len(items) > 0 {
			n := min(len(items), 500)
			for _, r := range push(t, base, body(items[:n]...)) {
				if r.Status != Q {
					t.Fatalf("push: %s", r.Status)
				}
			}
			items = items[n:]
		}
	}
	return total
}

// shardAggs reads the "agg" row of every partition of queue for a query.
func shardAggs(t testing.TB, s *bundle, queryID, queue string) map[string][2]int {
	t.Helper()
	rows, err := s.store.Pool().Query(context.Background(), `SELECT p.name, st.value FROM queen.stream_state st
		JOIN queen.partitions p ON p.id = st.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE st.query_id = $1 AND q.name = $2 AND st.key = 'agg'`, queryID, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int{}
	for rows.Next() {
		var name string
		var v []byte
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		var agg struct{ Sum, Count int }
		_ = json.Unmarshal(v, &agg)
		out[name] = [2]int{agg.Sum, agg.Count}
	}
	return out
}

func noDuplicateSink(t testing.TB, s *bundle, sink string) int {
	t.Helper()
	seen := map[string]bool{}
	msgs := readQueue(t, s.store, sink)
	for _, m := range msgs {
		k := m.Partition + "\x00" + m.TransactionID
		if seen[k] {
			t.Fatalf("sink %s: duplicate (partition, transactionId) %q/%q", sink, m.Partition, m.TransactionID)
		}
		seen[k] = true
	}
	return len(msgs)
}

// --- routes ---

func TestStreamRegister(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	req := map[string]any{"name": "q1", "source_queue": "src", "config_hash": "h1", "reset": false}
	code, r := register(t, s.base, req)
	if code != 200 || !r.Success || !r.Fresh || r.Reset || r.Name != "q1" || r.ConfigHash != "h1" || r.QueryID == "" {
		t.Fatalf("fresh: %d %+v", code, r)
	}
	id := r.QueryID
	code, r = register(t, s.base, req)
	if code != 200 || r.Fresh || r.Reset || r.QueryID != id {
		t.Fatalf("same hash: %d %+v", code, r)
	}
	pushValues(t, s.base, "src", 1, 3)
	j := newJob(t, s.base, "q1", "src", "h1", "", sumStep(""))
	j.drain(t, 3, 10*time.Second)
	if n := len(shardAggs(t, s, id, "src")); n != 1 {
		t.Fatalf("state rows %d", n)
	}
	// Reset with the same hash wipes nothing.
	req["reset"] = true
	if code, r = register(t, s.base, req); code != 200 || r.Reset || len(shardAggs(t, s, id, "src")) != 1 {
		t.Fatalf("reset, same hash: %d %+v", code, r)
	}
	// A changed hash without reset: 409, nothing changes.
	req["config_hash"], req["reset"] = "h2", false
	code, r = register(t, s.base, req)
	if code != http.StatusConflict || r.Success || r.QueryID != id || !strings.Contains(r.Error, "config_hash mismatch") {
		t.Fatalf("mismatch: %d %+v", code, r)
	}
	if len(shardAggs(t, s, id, "src")) != 1 {
		t.Fatal("a refused registration touched the state")
	}
	// With reset: accepted, state wiped, same id.
	req["reset"] = true
	code, r = register(t, s.base, req)
	if code != 200 || !r.Reset || r.Fresh || r.QueryID != id || r.ConfigHash != "h2" {
		t.Fatalf("reset: %d %+v", code, r)
	}
	if n := len(shardAggs(t, s, id, "src")); n != 0 {
		t.Fatalf("state rows after reset %d", n)
	}

	for _, c := range []struct{ body, want string }{
		{``, "Empty request body"},
		{`{"name":`, "Invalid JSON"},
		{`[1]`, "request body must be a JSON object"},
		{`{"source_queue":"s","config_hash":"h"}`, "name is required"},
		{`{"name":"n","config_hash":"h"}`, "source_queue is required"},
		{`{"name":"n","source_queue":"s","config_hash":7}`, "config_hash must be a string"},
		{`{"name":"n","source_queue":"s","config_hash":"h","reset":"yes"}`, "reset must be a boolean"},
	} {
		code, rb := post(t, s.base, "/streams/v1/queries", []byte(c.body))
		if code != http.StatusBadRequest || !strings.Contains(string(rb), c.want) {
			t.Errorf("%s: %d %s, want 400 %q", c.body, code, rb, c.want)
		}
	}
}

// TestStreamCycleValidation: every malformed cycle or state/get is a 400
// naming the field, and applies nothing.
func TestStreamCycleValidation(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	_, r := register(t, s.base, map[string]any{"name": "v", "source_queue": "src", "config_hash": "h"})
	pushValues(t, s.base, "src", 1, 1)
	pid := readQueue(t, s.store, "src")[0].PartitionID.String()
	q := r.QueryID
	for _, c := range []struct{ path, body, want string }{
		{"cycle", `{"partition_id":"` + pid + `"}`, "query_id is required"},
		{"cycle", `{"query_id":"nope","partition_id":"` + pid + `"}`, "query_id must be a UUID"},
		{"cycle", `{"query_id":"` + q + `"}`, "partition_id is required"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","state_ops":{}}`, "state_ops must be an array"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","state_ops":[{"type":"put","key":"a"}]}`, "state_ops[0].type"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","state_ops":[{"type":"upsert"}]}`, "state_ops[0].key is required"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","push_items":[{"partition":"x","payload":1}]}`, "queue is required"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","release_lease":"no"}`, "release_lease must be a boolean"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","ack":{"leaseId":""}}`, "ack.transactionId is required"},
		{"cycle", `{"query_id":"` + q + `","partition_id":"` + pid + `","ack":{"transactionId":"t","status":"later"}}`, "ack.status"},
		{"state/get", `{"query_id":"` + q + `"}`, "partition_id is required"},
		{"state/get", `{"query_id":"` + q + `","partition_id":"` + pid + `","keys":"a"}`, "keys must be an array"},
		{"state/get", `{"query_id":"` + q + `","partition_id":"` + pid + `","ripe_at_or_before":"soon"}`, "ripe_at_or_before must be a number"},
	} {
		code, rb := post(t, s.base, "/streams/v1/"+c.path, []byte(c.body))
		if code != http.StatusBadRequest || !strings.Contains(string(rb), c.want) {
			t.Errorf("%s %s: %d %s, want 400 %q", c.path, c.body, code, rb, c.want)
		}
	}
	// A cycle of an unregistered query is refused (200 success:false).
	cr := cycle(t, s.base, map[string]any{"query_id": "00000000-0000-4000-8000-000000000000", "partition_id": pid,
		"state_ops": []any{map[string]any{"type": "delete", "key": "a"}}})
	if cr.Success || !strings.Contains(cr.Error, "not registered") {
		t.Fatalf("unknown query: %+v", cr)
	}
}

// TestStreamTumblingSum (SDK behaviour 5, 9): a tumbling window of 10
// time units over data.t sums data.v per window and partition; a window
// emits once when an event of a later window arrives, and the idle flush
// (state/get by prefix and ripe_at_or_before, then an ack-less cycle)
// closes the last ones.
func TestStreamTumblingSum(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const size = 10
	want := map[string]map[int]int{} // partition → window start → sum
	var items []item
	for p := 0; p < 2; p++ {
		part := fmt.Sprintf("p%d", p)
		want[part] = map[int]int{}
		for ts := 0; ts < 45; ts += 3 {
			v := ts + p*100
			want[part][ts/size*size] += v
			items = append(items, item{Queue: "tumb", Partition: part, Payload: map[string]int{"t": ts, "v": v}})
		}
	}
	push(t, s.base, body(items...))
	const tag = "tumb:10\x1f"
	step := func(msgs []popMsg, state map[string]json.RawMessage) (ops, sink []map[string]any) {
		type win struct {
			Acc         int `json:"acc"`
			WindowStart int `json:"windowStart"`
			WindowEnd   int `json:"windowEnd"`
		}
		open := map[string]*win{}
		for k, raw := range state {
			var w win
			_ = json.Unmarshal(raw, &w)
			open[k] = &w
		}
		for _, m := range msgs {
			var d struct{ T, V int }
			_ = json.Unmarshal(m.Data, &d)
			start := d.T / size * size
			for k, w := range open { // close windows before this event's
				if w.WindowEnd <= start {
					sink = append(sink, map[string]any{"queue": "tumb-out", "partition": m.Partition,
						"payload": map[string]int{"windowStart": w.WindowStart, "sum": w.Acc}})
					ops = append(ops, map[string]any{"type": "delete", "key": k})
					delete(open, k)
				}
			}
			k := fmt.Sprintf("%s%d\x1fall", tag, start)
			if open[k] == nil {
				open[k] = &win{WindowStart: start, WindowEnd: start + size}
			}
			open[k].Acc += d.V
		}
		keys := make([]string, 0, len(open))
		for k := range open {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ops = append(ops, map[string]any{"type": "upsert", "key": k, "value": open[k]})
		}
		return ops, sink
	}
	j := newJob(t, s.base, "tumbling", "tumb", "h", "tumb-out", step)
	j.batch = 4
	j.drain(t, len(items), 20*time.Second)
	// Idle flush: ripe rows of each partition's shard, closed by an
	// ack-less cycle.
	for _, part := range []string{"p0", "p1"} {
		pid := readPartition(t, s.store, "tumb", part)[0].PartitionID.String()
		rows := stateGet(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": pid, "keys": nil,
			"key_prefix": tag, "ripe_at_or_before": 1000})
		if len(rows) != 1 {
			t.Fatalf("%s: ripe rows %d", part, len(rows))
		}
		var w struct {
			Acc         int `json:"acc"`
			WindowStart int `json:"windowStart"`
		}
		_ = json.Unmarshal(rows[0].Value, &w)
		cr := cycle(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": pid, "consumer_group": j.group,
			"state_ops": []any{map[string]any{"type": "delete", "key": rows[0].Key}},
			"push_items": []any{map[string]any{"queue": "tumb-out", "partition": part,
				"payload": map[string]int{"windowStart": w.WindowStart, "sum": w.Acc}}},
			"ack": nil, "release_lease": true})
		if !cr.Success || len(cr.PushResults) != 1 || cr.PushResults[0].Status != "queued" {
			t.Fatalf("flush: %+v", cr)
		}
	}
	got := map[string]map[int]int{}
	for _, m := range readQueue(t, s.store, "tumb-out") {
		var w struct {
			WindowStart int `json:"windowStart"`
			Sum         int `json:"sum"`
		}
		_ = json.Unmarshal(m.Payload, &w)
		if got[m.Partition] == nil {
			got[m.Partition] = map[int]int{}
		}
		if _, dup := got[m.Partition][w.WindowStart]; dup {
			t.Fatalf("window %s/%d emitted twice", m.Partition, w.WindowStart)
		}
		got[m.Partition][w.WindowStart] = w.Sum
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("window sums %v, want %v", got, want)
	}
}

// TestStreamStateIsolatedPerPartition (SDK behaviour 7): 5000 messages over
// 20 partitions; each shard's aggregate holds exactly its partition.
func TestStreamStateIsolatedPerPartition(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const parts, per = 20, 250
	pushValues(t, s.base, "iso", parts, per)
	j := newJob(t, s.base, "iso", "iso", "h", "", sumStep(""))
	j.drain(t, parts*per, 60*time.Second)
	aggs := shardAggs(t, s, j.queryID, "iso")
	if len(aggs) != parts {
		t.Fatalf("shards %d, want %d", len(aggs), parts)
	}
	for p := 0; p < parts; p++ {
		sum := 0
		for i := 0; i < per; i++ {
			sum += p*1000 + i
		}
		if got := aggs[fmt.Sprintf("p%d", p)]; got != [2]int{sum, per} {
			t.Errorf("p%d: (sum, count) %v, want (%d, %d)", p, got, sum, per)
		}
	}
}

// TestStreamRestartResumes (SDK behaviour 15): a worker stops half way; a
// new one registers the same query and hash (fresh false) and goes on from
// the cursor and the state, reprocessing nothing.
func TestStreamRestartResumes(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	total := pushValues(t, s.base, "rs", 2, 100)
	var mu sync.Mutex
	seen := map[string]int{}
	counting := func(inner streamStep) streamStep {
		return func(msgs []popMsg, st map[string]json.RawMessage) ([]map[string]any, []map[string]any) {
			mu.Lock()
			for _, m := range msgs {
				seen[m.TransactionID]++
			}
			mu.Unlock()
			return inner(msgs, st)
		}
	}
	j := newJob(t, s.base, "rs", "rs", "h", "", counting(sumStep("")))
	j.batch = 10
	j.drain(t, 100, 20*time.Second)
	code, r := register(t, s.base, map[string]any{"name": "rs", "source_queue": "rs", "config_hash": "h", "reset": false})
	if code != 200 || r.Fresh || r.QueryID != j.queryID {
		t.Fatalf("re-register: %d %+v", code, r)
	}
	j2 := newJob(t, s.base, "rs", "rs", "h", "", counting(sumStep("")))
	j2.batch = 10
	j2.drain(t, 100, 20*time.Second)
	if n, _ := j2.once(300 * time.Millisecond); n != 0 {
		t.Fatalf("%d messages beyond the 200 pushed", n)
	}
	for txid, n := range seen {
		if n != 1 {
			t.Fatalf("message %s processed %d times", txid, n)
		}
	}
	sum := 0
	for _, a := range shardAggs(t, s, j.queryID, "rs") {
		sum += a[0]
	}
	if sum != total || len(seen) != 200 {
		t.Fatalf("sum %d want %d; processed %d", sum, total, len(seen))
	}
}

// TestStreamTwoQueriesOneSource (SDK behaviour 17): two queries on one
// source each see every message.
func TestStreamTwoQueriesOneSource(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	total := pushValues(t, s.base, "two", 3, 50)
	a := newJob(t, s.base, "qa", "two", "h", "", sumStep(""))
	b := newJob(t, s.base, "qb", "two", "h", "", sumStep(""))
	a.drain(t, 150, 20*time.Second)
	b.drain(t, 150, 20*time.Second)
	for _, j := range []*streamJob{a, b} {
		sum, count := 0, 0
		for _, v := range shardAggs(t, s, j.queryID, "two") {
			sum, count = sum+v[0], count+v[1]
		}
		if sum != total || count != 150 {
			t.Errorf("%s: sum %d count %d, want %d 150", j.name, sum, count, total)
		}
	}
}

// TestStreamGatePartialAck (SDK behaviour 18): a gate lets 3 messages
// through per cycle and acks only those with release_lease=false; the rest
// of the lease comes back when it lapses. Everything is delivered, in
// order per partition, exactly once.
func TestStreamGatePartialAck(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "gate", map[string]any{"leaseTime": 1, "retryLimit": 100})
	pushValues(t, s.base, "gate", 2, 20)
	var order = map[string][]int{}
	step := func(msgs []popMsg, st map[string]json.RawMessage) ([]map[string]any, []map[string]any) {
		for _, m := range msgs {
			var d struct{ V int }
			_ = json.Unmarshal(m.Data, &d)
			order[m.Partition] = append(order[m.Partition], d.V)
		}
		return nil, []map[string]any{{"queue": "gate-out", "partition": msgs[0].Partition, "payload": len(msgs)}}
	}
	j := newJob(t, s.base, "gate", "gate", "h", "gate-out", step)
	j.release, j.limit, j.batch = false, 3, 10
	j.drain(t, 40, 60*time.Second)
	for p := 0; p < 2; p++ {
		part := fmt.Sprintf("p%d", p)
		var want []int
		for i := 0; i < 20; i++ {
			want = append(want, p*1000+i)
		}
		if fmt.Sprint(order[part]) != fmt.Sprint(want) {
			t.Errorf("%s: delivered %v, want %v", part, order[part], want)
		}
	}
	noDuplicateSink(t, s, "gate-out")
}

// TestStreamSinkWakesLongPoll (SDK behaviour 19): a pop waiting on the
// sink queue is answered as soon as a cycle commits its sink item.
func TestStreamSinkWakesLongPoll(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushValues(t, s.base, "wk", 1, 1)
	push(t, s.base, body(item{Queue: "wk-out", Payload: 0})) // the sink queue exists
	j := newJob(t, s.base, "wk", "wk", "h", "wk-out", sumStep("wk-out"))
	type answer struct {
		code int
		at   time.Time
	}
	got := make(chan answer, 1)
	if code, pr := pop(t, s.base, popPath("wk-out", ""), "autoAck=true"); code != 200 || len(pr.Messages) != 1 {
		t.Fatalf("pop first sink item: %d", code)
	}
	go func() {
		code, _ := pop(t, s.base, popPath("wk-out", ""), "wait=true&timeout=20000")
		got <- answer{code, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the long-poll is waiting
	committed := time.Now()
	j.drain(t, 1, 10*time.Second)
	select {
	case a := <-got:
		if a.code != 200 {
			t.Fatalf("long-poll answered %d", a.code)
		}
		if d := a.at.Sub(committed); d > 2*time.Second {
			t.Fatalf("long-poll woke %v after the cycle", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by the cycle's sink push")
	}
}

// --- Queen's exactly-once holes, closed ---

// TestStreamReplayNoDuplicateSink: a cycle replayed after its reply was
// lost never stores its sink items twice: a leased cycle's replay is
// refused (its lease was released), a flush's replay and an unleased
// replay are answered duplicate by the derived transactionIds.
func TestStreamReplayNoDuplicateSink(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushValues(t, s.base, "rp", 1, 3)
	j := newJob(t, s.base, "rp", "rp", "h", "rp-out", nil)
	// A leased cycle, replayed.
	code, pr := pop(t, s.base, popPath("rp", ""), "batch=1&consumerGroup="+j.group)
	if code != 200 {
		t.Fatalf("pop %d", code)
	}
	m := pr.Messages[0]
	req := map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID, "consumer_group": j.group,
		"state_ops":  []any{map[string]any{"type": "upsert", "key": "n", "value": 1}},
		"push_items": []any{map[string]any{"queue": "rp-out", "partition": "x", "payload": map[string]int{"a": 1}}},
		"ack":        map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID, "status": "completed", "count": 1}, "release_lease": true}
	first := cycle(t, s.base, req)
	if !first.Success || first.PushResults[0].Status != "queued" || !strings.HasPrefix(first.PushResults[0].TransactionID, "stream:") {
		t.Fatalf("first: %+v", first)
	}
	if again := cycle(t, s.base, req); again.Success || !strings.Contains(again.Error, "Invalid or expired lease") {
		t.Fatalf("replay of a leased cycle: %+v", again)
	}
	// The same cycle under a kept lease (release_lease=false, a gate's
	// partial ack of 1 of 2): the replay finds the message already
	// acknowledged and rolls back.
	code, pr = pop(t, s.base, popPath("rp", ""), "batch=2&consumerGroup="+j.group)
	if code != 200 || len(pr.Messages) != 2 {
		t.Fatalf("pop %d", code)
	}
	m, rest := pr.Messages[0], pr.Messages[1]
	req["ack"] = map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID, "count": 1}
	req["release_lease"] = false
	if c := cycle(t, s.base, req); !c.Success {
		t.Fatalf("kept-lease cycle: %+v", c)
	}
	if again := cycle(t, s.base, req); again.Success || !strings.Contains(again.Error, "already acknowledged") {
		t.Fatalf("replay under a kept lease: %+v", again)
	}
	if c := cycle(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID, "consumer_group": j.group,
		"ack": map[string]any{"transactionId": rest.TransactionID, "leaseId": rest.LeaseID}}); !c.Success || !c.AckResult.LeaseReleased {
		t.Fatalf("ack of the rest: %+v", c)
	}
	// A flush (no ack), replayed: duplicate.
	flush := map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID, "consumer_group": j.group,
		"state_ops":  []any{map[string]any{"type": "delete", "key": "win-1"}},
		"push_items": []any{map[string]any{"queue": "rp-out", "partition": "x", "payload": map[string]int{"w": 1}}}, "ack": nil}
	f1, f2 := cycle(t, s.base, flush), cycle(t, s.base, flush)
	if !f1.Success || !f2.Success || f1.PushResults[0].Status != "queued" || f2.PushResults[0].Status != "duplicate" ||
		f1.PushResults[0].TransactionID != f2.PushResults[0].TransactionID || f2.PushResults[0].MessageID != f1.PushResults[0].MessageID {
		t.Fatalf("flush replay: %+v / %+v", f1, f2)
	}
	// An unleased ack (autoAck pop, leaseId ""), replayed: a no-op ack, and
	// the sink item is a duplicate.
	pushValues(t, s.base, "rp", 1, 1)
	code, pr = pop(t, s.base, popPath("rp", ""), "batch=1&autoAck=true&consumerGroup="+j.group)
	if code != 200 || pr.Messages[0].LeaseID != "" {
		t.Fatalf("autoAck pop %d %+v", code, pr.Messages)
	}
	m = pr.Messages[0]
	req["ack"] = map[string]any{"transactionId": m.TransactionID, "leaseId": "", "count": 1}
	req["release_lease"] = true
	u1, u2 := cycle(t, s.base, req), cycle(t, s.base, req)
	if !u1.Success || !u2.Success || u1.PushResults[0].Status != "queued" || u2.PushResults[0].Status != "duplicate" {
		t.Fatalf("unleased replay: %+v / %+v", u1, u2)
	}
	if n := noDuplicateSink(t, s, "rp-out"); n != 4 {
		t.Fatalf("sink holds %d messages, want 4", n)
	}
}

// TestStreamEmptyLeaseIsFenced: an empty leaseId does not skip the fence
// while the partition is leased, and a foreign lease is refused; neither
// applies anything.
func TestStreamEmptyLeaseIsFenced(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushValues(t, s.base, "el", 1, 2)
	j := newJob(t, s.base, "el", "el", "h", "", nil)
	code, pr := pop(t, s.base, popPath("el", ""), "batch=2&consumerGroup="+j.group)
	if code != 200 {
		t.Fatalf("pop %d", code)
	}
	m := pr.Messages[1]
	for _, lease := range []string{"", "00000000-0000-7000-8000-000000000000"} {
		cr := cycle(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID, "consumer_group": j.group,
			"state_ops":  []any{map[string]any{"type": "upsert", "key": "k", "value": 1}},
			"push_items": []any{map[string]any{"queue": "el-out", "payload": 1}},
			"ack":        map[string]any{"transactionId": m.TransactionID, "leaseId": lease}})
		if cr.Success || !strings.Contains(cr.Error, "Invalid or expired lease") {
			t.Fatalf("leaseId %q: %+v", lease, cr)
		}
	}
	if rows := stateGet(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID}); len(rows) != 0 {
		t.Fatalf("a refused cycle wrote state: %+v", rows)
	}
	if n := len(readQueue(t, s.store, "el-out")); n != 0 {
		t.Fatalf("a refused cycle pushed %d sink items", n)
	}
	// The pop's own lease passes, and the cumulative ack consumes both.
	cr := cycle(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": m.PartitionID, "consumer_group": j.group,
		"ack": map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID, "count": 2}})
	if !cr.Success || cr.AckResult == nil || cr.AckResult.Count != 2 || !cr.AckResult.LeaseReleased {
		t.Fatalf("own lease: %+v", cr)
	}
	if code, _ := pop(t, s.base, popPath("el", ""), "consumerGroup="+j.group); code != http.StatusNoContent {
		t.Fatalf("after the cycle's ack a pop answered %d", code)
	}
}

// TestStreamKeyPrefixIsLiteral: '%' and '_' in key_prefix match only
// themselves; keys, prefix and ripe filters combine.
func TestStreamKeyPrefixIsLiteral(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushValues(t, s.base, "kp", 1, 1)
	j := newJob(t, s.base, "kp", "kp", "h", "", nil)
	pid := readQueue(t, s.store, "kp")[0].PartitionID.String()
	var ops []any
	for _, k := range []string{"a%b", "a%bc", "axb", "a_1", "ab1", `a\z`, "b"} {
		ops = append(ops, map[string]any{"type": "upsert", "key": k, "value": map[string]any{"windowEnd": len(k)}})
	}
	if cr := cycle(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": pid, "state_ops": ops}); !cr.Success {
		t.Fatalf("cycle: %+v", cr)
	}
	keys := func(rows []stateRow) string {
		var out []string
		for _, r := range rows {
			out = append(out, r.Key)
		}
		return strings.Join(out, ",")
	}
	base := map[string]any{"query_id": j.queryID, "partition_id": pid}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		req  map[string]any
		want string
	}{
		{with("key_prefix", "a%"), "a%b,a%bc"},
		{with("key_prefix", "a_"), "a_1"},
		{with("key_prefix", `a\`), `a\z`},
		{with("key_prefix", "a%", "ripe_at_or_before", 3), "a%b"},
		{with("keys", []string{"b", "axb", "nope"}), "axb,b"},
		{with("keys", nil, "key_prefix", ""), `a%b,a%bc,a\z,a_1,ab1,axb,b`},
	} {
		if got := keys(stateGet(t, s.base, c.req)); got != c.want {
			t.Errorf("%v: keys %q, want %q", c.req, got, c.want)
		}
	}
	rows := stateGet(t, s.base, with("keys", []string{"b"}))
	if len(rows) != 1 || string(rows[0].Value) != `{"windowEnd":1}` || !strings.HasSuffix(rows[0].UpdatedAt, "+00:00") {
		t.Fatalf("row: %+v", rows)
	}
}

// TestStreamKill9MidStream (SDK behaviour 16): the broker process is
// killed with SIGKILL while a stream job runs (map to a sink plus a
// per-partition aggregate); after a restart the job finishes. The sink has
// no duplicate (partition, transactionId), one item per source message,
// and every aggregate counts each message exactly once.
func TestStreamKill9MidStream(t *testing.T) {
	t.Parallel()
	_, url := testenv.OwnCluster(t)
	walDir := t.TempDir()
	port := freePort(t)
	p := startProc(t, url, walDir, port)
	s := &bundle{url: url, base: p.base, store: openStore(t, url)}
	testenv.WaitFor(t, 30*time.Second, "health", func() bool { return healthCode(t, p.base) == http.StatusOK })
	// The lease must outlast one pop → cycle round under a loaded CI
	// machine (with 2 s, a run under load kept losing its lease before the
	// cycle and never finished); the dead broker's leases lapse after it.
	configure(t, p.base, "k9s", map[string]any{"leaseTime": 10})
	const parts, per = 4, 300
	total := pushValues(t, p.base, "k9s", parts, per)
	j := newJob(t, p.base, "k9", "k9s", "h", "k9s-out", sumStep("k9s-out"))
	j.batch = 20
	var mu sync.Mutex
	base := p.base
	j.base = func() string { mu.Lock(); defer mu.Unlock(); return base }

	done := make(chan struct{})
	var committed atomic.Int64
	var lastErr error
	// consumedAll reads the group's cursors: every partition of the source
	// consumed to its end. The job's own count can stay short for good: a
	// cycle the dead broker committed whose answer was lost is retried
	// against the new broker, which refuses it (its lease is released), and
	// its messages are never popped again (exactly once). So the loop ends
	// on what PostgreSQL holds, and the sink and aggregates below prove
	// that nothing was lost or applied twice.
	consumedAll := func() bool {
		var n int
		err := s.store.Pool().QueryRow(context.Background(), `
			SELECT count(*) FROM queen.partitions p
			JOIN queen.queues q ON q.id = p.queue_id
			JOIN queen.consumer_cursors c ON c.partition_id = p.id AND c.consumer_group = $2
			WHERE q.name = $1 AND c.cursor_offset >= p.next_offset AND p.next_offset > 0`, "k9s", j.group).Scan(&n)
		return err == nil && n == parts
	}
	go func() {
		defer close(done)
		// Progress, not a fixed total, bounds the loop: it fails only when
		// nothing was committed for a minute (six lease times), however
		// slowly a loaded machine runs the cycles.
		stallLimit := time.Minute
		lastProgress := time.Now()
		for time.Since(lastProgress) < stallLimit {
			if committed.Load() >= parts*per {
				return
			}
			n, err := j.once(500 * time.Millisecond)
			if err != nil {
				lastErr = err
				time.Sleep(200 * time.Millisecond) // refused or broker away: pop again
			}
			if n > 0 {
				committed.Add(int64(n))
				lastProgress = time.Now()
			} else if consumedAll() {
				return
			}
		}
	}()
	testenv.WaitFor(t, 30*time.Second, "the job under way", func() bool {
		var n int
		_ = s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.stream_state`).Scan(&n)
		return n >= 2
	})
	p.kill9(t)
	atKill := committed.Load()
	if atKill >= parts*per {
		t.Fatalf("the job had finished before the kill")
	}
	time.Sleep(500 * time.Millisecond)
	p2 := startProc(t, url, walDir, port)
	<-done
	if !consumedAll() {
		t.Fatalf("the job stalled: its cycles committed %d of %d (last error %v)\n%s", committed.Load(), parts*per, lastErr, p2.logs())
	}
	t.Logf("killed after %d of %d messages were committed; the job counted %d (a cycle whose answer the kill lost is not counted)",
		atKill, parts*per, committed.Load())
	if n := noDuplicateSink(t, s, "k9s-out"); n != parts*per {
		t.Fatalf("sink holds %d items, want %d", n, parts*per)
	}
	sum, count := 0, 0
	for _, a := range shardAggs(t, s, j.queryID, "k9s") {
		sum, count = sum+a[0], count+a[1]
	}
	if sum != total || count != parts*per {
		t.Fatalf("aggregate sum %d count %d, want %d %d", sum, count, total, parts*per)
	}
	t.Logf("last refused or failed cycle: %v", lastErr)
	p2.term(t)
}

// --- DELETE /api/v1/messages/:partitionId/:transactionId ---

// TestMessageDelete: a deleted message is never delivered, listed, counted
// or found again; its dead letters and traces go with it; a repeat answers
// success false; its transactionId stays a duplicate in its dedup window;
// a lease holding it is released by acks of the others, order kept.
func TestMessageDelete(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "md", "P", 1, 5)
	pid := readQueue(t, s.store, "md")[0].PartitionID.String()
	// Group g2 holds all five under a lease; group dl dead-letters m-3.
	code, held := pop(t, s.base, popPath("md", ""), "batch=5&consumerGroup=g2")
	if code != 200 || len(held.Messages) != 5 {
		t.Fatalf("pop g2: %d", code)
	}
	code, dlp := pop(t, s.base, popPath("md", ""), "batch=5&consumerGroup=dl")
	if code != 200 || !ack(t, s.base, dlp.Messages[2], "dlq", "dl").Success {
		t.Fatalf("dlq m-3: %d", code)
	}
	if code, b := post(t, s.base, "/api/v1/traces", jsonBody(map[string]any{"transactionId": "m-3", "partitionId": pid,
		"data": map[string]int{"x": 1}})); code != http.StatusCreated {
		t.Fatalf("trace: %d %s", code, b)
	}

	code, b := del(t, s.base+"/api/v1/messages/"+pid+"/m-3")
	var dr struct {
		Success       bool   `json:"success"`
		PartitionID   string `json:"partitionId"`
		TransactionID string `json:"transactionId"`
		Message       string `json:"message"`
	}
	if code != 200 || json.Unmarshal([]byte(b), &dr) != nil || !dr.Success || dr.PartitionID != pid ||
		dr.TransactionID != "m-3" || dr.Message != "Message deleted successfully" {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := del(t, s.base+"/api/v1/messages/"+pid+"/m-3"); code != 200 || !strings.Contains(b, `"success":false`) ||
		!strings.Contains(b, "Message not found") {
		t.Fatalf("repeat delete: %d %s", code, b)
	}
	if code, b := del(t, s.base+"/api/v1/messages/"+pid+"/nope"); code != 200 || !strings.Contains(b, `"success":false`) {
		t.Fatalf("delete of an unknown message: %d %s", code, b)
	}
	if code, _ := get(t, s.base+"/api/v1/messages/"+pid+"/m-3"); code != http.StatusNotFound {
		t.Fatalf("GET of the deleted message: %d", code)
	}
	var dls, traces int
	_ = s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.dead_letters`).Scan(&dls)
	_ = s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.message_traces`).Scan(&traces)
	if dls != 0 || traces != 0 {
		t.Fatalf("dead letters %d, traces %d left", dls, traces)
	}
	// Listed and counted: four.
	var listed []string
	for _, m := range listMessages(t, s.base, "queue=md").Messages {
		listed = append(listed, m.TransactionID)
	}
	sort.Strings(listed)
	if fmt.Sprint(listed) != "[m-1 m-2 m-4 m-5]" {
		t.Fatalf("listed %v", listed)
	}
	var qs struct {
		Queues []struct {
			Name     string           `json:"name"`
			Messages map[string]int64 `json:"messages"`
		} `json:"queues"`
	}
	if code := getJSON(t, s.base+"/api/v1/resources/queues", &qs); code != 200 || len(qs.Queues) != 1 ||
		qs.Queues[0].Messages["total"] != 4 || qs.Queues[0].Messages["pending"] != 4 {
		t.Fatalf("queue counts: %d %+v", code, qs)
	}
	// Queue mode gets the other four in order, in one lease.
	code, pr := pop(t, s.base, popPath("md", ""), "batch=10")
	var got []string
	for _, m := range pr.Messages {
		got = append(got, m.TransactionID)
	}
	if code != 200 || fmt.Sprint(got) != "[m-1 m-2 m-4 m-5]" {
		t.Fatalf("queue-mode pop: %d %v", code, got)
	}
	// g2's lease held m-3: acking the other four releases it.
	var last ackResp
	for _, i := range []int{0, 1, 3, 4} {
		if last = ack(t, s.base, held.Messages[i], "completed", "g2"); !last.Success {
			t.Fatalf("ack %s: %+v", held.Messages[i].TransactionID, last)
		}
	}
	if !last.LeaseReleased {
		t.Fatal("the lease holding the deleted message was not released")
	}
	if a := ack(t, s.base, held.Messages[2], "completed", "g2"); a.Success {
		t.Fatal("ack of the deleted message succeeded")
	}
	// The dedup window still knows m-3.
	wantStatuses(t, push(t, s.base, body(item{"md", "P", 3, "m-3"})), D)
}

// TestStreamStateLimits: a cycle carries at most 10,000 state ops, each
// value at most 1 MiB, and upserts of at most 8 MiB (400 naming the limit,
// nothing applied); a cycle that would leave its shard holding more than
// 8 MiB is refused (200 success:false, nothing applied), so the shard stays
// readable; a state/get whose rows hold more than 8 MiB (state stored
// before the limit) is 400 naming the limit, and a narrower one still reads.
func TestStreamStateLimits(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushValues(t, s.base, "sl", 1, 1)
	j := newJob(t, s.base, "sl", "sl", "h", "", nil)
	pid := readQueue(t, s.store, "sl")[0].PartitionID.String()
	str := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("v", n-2) + `"`) } // n bytes of JSON
	upserts := func(n, size int, prefix string) []any {
		ops := make([]any, n)
		for i := range ops {
			ops[i] = map[string]any{"type": "upsert", "key": fmt.Sprintf("%s%05d", prefix, i), "value": str(size)}
		}
		return ops
	}
	req := func(ops []any) map[string]any {
		return map[string]any{"query_id": j.queryID, "partition_id": pid, "state_ops": ops}
	}
	all := map[string]any{"query_id": j.queryID, "partition_id": pid}
	for _, c := range []struct {
		name string
		ops  []any
		want string
	}{
		{"10,001 ops", upserts(fastapi.MaxStateOps+1, 2, "k"), "10000"},
		{"a value of 1 MiB + 1", upserts(1, fastapi.MaxStateValueBytes+1, "k"), "1048576"},
		{"9 MiB of upserts", upserts(9, fastapi.MaxStateValueBytes, "k"), "8388608"},
	} {
		code, rb := post(t, s.base, "/streams/v1/cycle", jsonBody(req(c.ops)))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %.200s, want 400 naming %s", c.name, code, rb, c.want)
		}
	}
	if rows := stateGet(t, s.base, all); len(rows) != 0 {
		t.Fatalf("state after 400s: %d rows", len(rows))
	}
	// A cycle's push_items and a state/get's keys are bounded too.
	items := make([]map[string]any, ingest.MaxTransactionItems+1)
	for i := range items {
		items[i] = map[string]any{"queue": "sl-sink", "payload": i}
	}
	keys := make([]string, fastapi.MaxStateOps+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	for _, c := range []struct {
		name, path, want string
		body             map[string]any
	}{
		{"10,001 push_items", "/streams/v1/cycle", "10000", map[string]any{"query_id": j.queryID, "partition_id": pid, "push_items": items}},
		{"10,001 keys", "/streams/v1/state/get", "10000", map[string]any{"query_id": j.queryID, "partition_id": pid, "keys": keys}},
	} {
		code, rb := post(t, s.base, c.path, jsonBody(c.body))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %.200s, want 400 naming %s", c.name, code, rb, c.want)
		}
	}
	if rows := stateGet(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": pid, "keys": keys[:fastapi.MaxStateOps]}); len(rows) != 0 {
		t.Fatalf("state/get of 10,000 keys: %d rows", len(rows))
	}

	// At the limits: 10,000 ops, and 1 MiB values up to 8 MiB per shard.
	if cr := cycle(t, s.base, req(upserts(fastapi.MaxStateOps, 2, "s"))); !cr.Success || cr.StateOpsApplied != fastapi.MaxStateOps {
		t.Fatalf("10,000 ops: %+v", cr.Error)
	}
	dels := make([]any, fastapi.MaxStateOps)
	for i := range dels {
		dels[i] = map[string]any{"type": "delete", "key": fmt.Sprintf("s%05d", i)}
	}
	if cr := cycle(t, s.base, req(dels)); !cr.Success {
		t.Fatalf("10,000 deletes: %+v", cr.Error)
	}
	for i := range 7 {
		if cr := cycle(t, s.base, req(upserts(1, fastapi.MaxStateValueBytes, fmt.Sprintf("m%d-", i)))); !cr.Success {
			t.Fatalf("1 MiB value %d: %s", i, cr.Error)
		}
	}
	cr := cycle(t, s.base, req(upserts(1, fastapi.MaxStateValueBytes, "m7-")))
	if cr.Success || !strings.Contains(cr.Error, "8388608") {
		t.Fatalf("an 8th MiB in the shard: success %v %q, want refused naming the limit", cr.Success, cr.Error)
	}
	if rows := stateGet(t, s.base, all); len(rows) != 7 {
		t.Fatalf("state after the refused cycle: %d rows, want 7", len(rows))
	}

	// State stored before the limit: more than one state/get answers.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.store.Pool().Exec(ctx, `INSERT INTO queen.stream_state (query_id, partition_id, key, value, updated_at)
		VALUES ($1, $2, 'old', convert_to('"' || repeat('o', 2 << 20) || '"', 'UTF8'), now())`, j.queryID, pid); err != nil {
		t.Fatal(err)
	}
	code, rb := post(t, s.base, "/streams/v1/state/get", jsonBody(all))
	var e struct{ Error string }
	if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || !strings.Contains(e.Error, "8388608") {
		t.Fatalf("state/get of 9 MiB: %d %.200s, want 400 naming the limit", code, rb)
	}
	if rows := stateGet(t, s.base, map[string]any{"query_id": j.queryID, "partition_id": pid,
		"keys": []string{"old", "m0-00000"}}); len(rows) != 2 {
		t.Fatalf("state/get of two keys: %d rows", len(rows))
	}
}
