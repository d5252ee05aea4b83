package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// streamConfigHash is the config_hash the stream scenarios register their
// query with (a stand-in for an SDK's digest of its operator chain).
const streamConfigHash = "queen-bench:map-window-sink:v1"

// streamValue is the number the map step reads from event seq of
// producer p: small, and different per event, so that a lost, doubled or
// misplaced event changes the sums.
func streamValue(p, seq int) int64 { return int64((p*31+seq)%97 + 1) }

// windowAgg is a window's aggregate: the state value of an open window
// and the payload of a closed one pushed to the sink. windowEnd is the
// last offset of the window (stored numeric, as the stream routes expect
// of a window's state).
type windowAgg struct {
	Partition   string `json:"partition,omitempty"`
	Window      int64  `json:"window"`
	WindowStart int64  `json:"windowStart"`
	WindowEnd   int64  `json:"windowEnd"`
	Count       int64  `json:"count"`
	Sum         int64  `json:"sum"`
}

// StreamReport is what a stream scenario measured and checked.
type StreamReport struct {
	Queue, Sink, QueryID string
	Workers, PopBatch    int
	// Window is the tumbling window, in offsets of a source partition.
	Window int `json:"window"`
	// WallSec runs from the producers' start to the last committed cycle.
	WallSec      float64 `json:"wall_s"`
	Events       int64   `json:"events"` // committed by the cycles
	Cycles       int64   `json:"cycles"`
	EventsPerSec float64 `json:"events_per_s"`
	CyclesPerSec float64 `json:"cycles_per_s"`
	// CycleLatency is of POST /streams/v1/cycle alone; each cycle also
	// needs one pop and one state/get.
	CycleLatency LatencySummary `json:"cycle_latency"`
	Pops         int64          `json:"pops"`
	EmptyPops    int64          `json:"empty_pops"`
	// Errors is pops, state reads and cycles without a usable answer,
	// cycles refused, and sink items not answered queued.
	Errors       int64            `json:"errors"`
	ErrorSamples map[string]int64 `json:"error_samples,omitempty"`
	// WindowsClosed is the windows the workers closed and pushed.
	WindowsClosed int64 `json:"windows_closed"`

	// The exactly-once check, from PostgreSQL at the end: the events of
	// the open windows' state plus those of the closed windows in the sink
	// must be the events answered queued or buffered, and so must their
	// values' sum.
	ExpectedEvents int64 `json:"expected_events"`
	ExpectedSum    int64 `json:"expected_sum"`
	AggEvents      int64 `json:"agg_events"`
	AggSum         int64 `json:"agg_sum"`
	StateRows      int64 `json:"state_rows"`
	SinkMessages   int64 `json:"sink_messages"`
	// SinkDuplicates: sink messages whose (partition, transactionId) is
	// another's; DuplicateWindows: closed windows pushed more than once;
	// PartialWindows: closed windows whose count is not their width.
	SinkDuplicates   int64 `json:"sink_duplicates"`
	DuplicateWindows int64 `json:"duplicate_windows"`
	PartialWindows   int64 `json:"partial_windows"`
	// Per event, from the workers' own record of what each committed cycle
	// carried: CommittedTwice, NotCommitted (answered queued or buffered,
	// never committed) and CommittedUnsent (not an accepted event).
	CommittedTwice  int64 `json:"committed_twice"`
	NotCommitted    int64 `json:"not_committed"`
	CommittedUnsent int64 `json:"committed_unsent"`

	Problems []string `json:"problems,omitempty"`
}

// OK reports whether every event was counted exactly once and nothing
// failed.
func (s *StreamReport) OK() bool { return len(s.Problems) == 0 }

func (s *StreamReport) problem(format string, a ...any) {
	if len(s.Problems) < maxProblemLines {
		s.Problems = append(s.Problems, fmt.Sprintf(format, a...))
	}
}

// streamRun is the worker side of a stream scenario.
type streamRun struct {
	hc                   *fasthttp.HostClient
	base, popURI         string
	queryID, group, sink string
	window               int64
	start                time.Time

	committed  atomic.Int64
	target     atomic.Int64 // -1 while the producers run
	lastCommit atomic.Int64 // unix ns of the last committed cycle
	drainOver  chan struct{}
}

type streamWorker struct {
	run     *streamRun
	pops    int64
	empty   int64
	cycles  int64
	events  int64
	windows int64
	errors  int64
	samples map[string]int64
	lat     Latency
	// done holds p<<32 | seq of every event of a committed cycle.
	done []int64
}

func (w *streamWorker) fail(msg string) {
	w.errors++
	w.samples = addSample(w.samples, msg, 1)
}

// post sends a JSON body and returns the status and a copy of the body.
func (r *streamRun) post(req *fasthttp.Request, resp *fasthttp.Response, path string, body []byte) (int, []byte, error) {
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetRequestURI(r.base + path)
	req.SetBodyRaw(body)
	if err := r.hc.Do(req, resp); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), slices.Clone(resp.Body()), nil
}

type streamCycleResp struct {
	Success     bool   `json:"success"`
	Error       string `json:"error"`
	PushResults []struct {
		Status string `json:"status"`
	} `json:"push_results"`
	AckResult *struct {
		Success bool `json:"success"`
	} `json:"ack_result"`
}

type stateOp struct {
	Type  string     `json:"type"`
	Key   string     `json:"key"`
	Value *windowAgg `json:"value,omitempty"`
}

type sinkItem struct {
	Queue     string    `json:"queue"`
	Partition string    `json:"partition"`
	Payload   windowAgg `json:"payload"`
}

// loop pops, folds each batch into its partition's windows and commits
// one cycle per pop, until every accepted event is committed or the drain
// is over.
func (w *streamWorker) loop(ctx context.Context) {
	r := w.run
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-r.drainOver:
			return false
		case <-time.After(100 * time.Millisecond):
			return true
		}
	}
	for ctx.Err() == nil {
		if t := r.target.Load(); t >= 0 && r.committed.Load() >= t {
			return
		}
		select {
		case <-r.drainOver:
			return
		default:
		}
		req.Reset()
		req.SetRequestURI(r.popURI)
		err := r.hc.Do(req, resp)
		w.pops++
		switch {
		case err != nil:
			w.fail("pop: " + err.Error())
			if !pause() {
				return
			}
			continue
		case resp.StatusCode() == fasthttp.StatusNoContent:
			w.empty++
			continue
		case resp.StatusCode() != fasthttp.StatusOK:
			w.fail(fmt.Sprintf("pop: HTTP %d: %s", resp.StatusCode(), clip(resp.Body())))
			if !pause() {
				return
			}
			continue
		}
		var pr popResponse
		if err := json.Unmarshal(resp.Body(), &pr); err != nil {
			w.fail("pop: bad body: " + err.Error())
			continue
		}
		if len(pr.Messages) == 0 {
			w.empty++
			continue
		}
		// A pop of the queue leases one partition; group defensively.
		for len(pr.Messages) > 0 {
			pid := pr.Messages[0].PartitionID
			n := 1
			for n < len(pr.Messages) && pr.Messages[n].PartitionID == pid {
				n++
			}
			w.cycle(req, resp, pr.Messages[:n])
			pr.Messages = pr.Messages[n:]
		}
	}
}

// cycle reads the shard's open windows, folds msgs (one partition, offset
// order) into them, and commits state, closed windows and the ack.
func (w *streamWorker) cycle(req *fasthttp.Request, resp *fasthttp.Response, msgs []poppedMessage) {
	r := w.run
	pid := msgs[0].PartitionID
	body, _ := json.Marshal(map[string]any{"query_id": r.queryID, "partition_id": pid, "key_prefix": "w:"})
	code, rb, err := r.post(req, resp, "/streams/v1/state/get", body)
	if err != nil || code != fasthttp.StatusOK {
		w.fail(fmt.Sprintf("state/get: %v HTTP %d: %s", err, code, clip(rb)))
		return
	}
	var sr struct {
		Success bool `json:"success"`
		Rows    []struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(rb, &sr); err != nil || !sr.Success {
		w.fail(fmt.Sprintf("state/get: %v: %s", err, clip(rb)))
		return
	}
	open := map[int64]*windowAgg{}
	for _, row := range sr.Rows {
		var a windowAgg
		if err := json.Unmarshal(row.Value, &a); err != nil {
			w.fail("state/get: bad window " + row.Key)
			return
		}
		open[a.Window] = &a
	}

	// map: read the event's value; window: tumbling over offsets.
	var ops []stateOp
	var items []sinkItem
	var touched []int64
	done := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		p, seq, ok := parsePayloadID(m.Data)
		if !ok {
			w.fail("map: payload is not an event of the run")
			return
		}
		done = append(done, int64(p)<<32|int64(seq))
		k := m.Offset / r.window
		a := open[k]
		if a == nil {
			a = &windowAgg{Window: k, WindowStart: k * r.window, WindowEnd: (k+1)*r.window - 1}
			open[k] = a
			touched = append(touched, k)
		} else if !slices.Contains(touched, k) {
			touched = append(touched, k)
		}
		a.Count++
		a.Sum += streamValue(p, seq)
		if m.Offset == a.WindowEnd {
			closed := *a
			closed.Partition = m.Partition
			items = append(items, sinkItem{Queue: r.sink, Partition: m.Partition, Payload: closed})
			delete(open, k)
		}
	}
	for _, k := range touched {
		key := "w:" + strconv.FormatInt(k, 10)
		if a, ok := open[k]; ok {
			ops = append(ops, stateOp{Type: "upsert", Key: key, Value: a})
		} else {
			ops = append(ops, stateOp{Type: "delete", Key: key})
		}
	}
	if items == nil {
		items = []sinkItem{}
	}
	last := msgs[len(msgs)-1]
	body, _ = json.Marshal(map[string]any{"query_id": r.queryID, "partition_id": pid, "consumer_group": r.group,
		"state_ops": ops, "push_items": items, "release_lease": true,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed", "count": len(msgs)}})
	t0 := time.Now()
	code, rb, err = r.post(req, resp, "/streams/v1/cycle", body)
	elapsed := time.Since(t0)
	if err != nil || code != fasthttp.StatusOK {
		w.fail(fmt.Sprintf("cycle: %v HTTP %d: %s", err, code, clip(rb)))
		return
	}
	var cr streamCycleResp
	if err := json.Unmarshal(rb, &cr); err != nil {
		w.fail("cycle: bad body: " + err.Error())
		return
	}
	if !cr.Success || cr.AckResult == nil || !cr.AckResult.Success {
		w.fail("cycle refused: " + cr.Error)
		return
	}
	for _, pr := range cr.PushResults {
		if pr.Status != "queued" {
			w.fail("cycle: sink item answered " + pr.Status)
		}
	}
	w.lat.Record(elapsed)
	w.cycles++
	w.events += int64(len(msgs))
	w.windows += int64(len(items))
	w.done = append(w.done, done...)
	r.lastCommit.Store(time.Now().UnixNano())
	r.committed.Add(int64(len(msgs)))
}

// runStream is a stream scenario on its stack: configure the source and
// sink, register the query, start the workers, push for the duration,
// drain, then check exactly-once from PostgreSQL.
func runStream(ctx context.Context, sc Scenario, o ScenarioOptions, st *Stack, res *ScenarioResult) error {
	runID := "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	source, sink, name := "bench-"+runID, "bench-"+runID+"-sink", "bench-"+runID
	u, _ := url.Parse(st.URL)
	hc := &fasthttp.HostClient{
		Addr: hostPort(u), Name: "queen-bench", MaxConns: sc.Consumers + 1,
		ReadTimeout: o.RequestTimeout, WriteTimeout: o.RequestTimeout, MaxConnWaitTimeout: o.RequestTimeout,
		MaxIdemponentCallAttempts: 1,
		// A pop takes a lease and a cycle commits: never resend.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}
	sr := &StreamReport{Queue: source, Sink: sink, Workers: sc.Consumers, PopBatch: sc.PopBatch, Window: sc.Window}
	res.Stream = sr
	run := &streamRun{hc: hc, base: st.URL, group: "streams." + name, sink: sink, window: int64(sc.Window),
		drainOver: make(chan struct{})}
	run.popURI = popURI(st.URL, source, run.group, sc.PopBatch, false)
	run.target.Store(-1)

	for _, q := range []string{source, sink} {
		if err := configureQueue(ctx, st.URL, q); err != nil {
			return err
		}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	b, _ := json.Marshal(map[string]any{"name": name, "source_queue": source, "sink_queue": sink,
		"config_hash": streamConfigHash, "reset": false})
	code, rb, err := run.post(req, resp, "/streams/v1/queries", b)
	var reg struct {
		Success bool   `json:"success"`
		QueryID string `json:"query_id"`
	}
	if err != nil || code != fasthttp.StatusOK || json.Unmarshal(rb, &reg) != nil || !reg.Success {
		return fmt.Errorf("bench: register stream query: %v HTTP %d: %s", err, code, clip(rb))
	}
	run.queryID, sr.QueryID = reg.QueryID, reg.QueryID

	before, err := sampleCPU(st)
	if err != nil {
		return err
	}
	run.start = time.Now()
	workers := make([]*streamWorker, sc.Consumers)
	var wg sync.WaitGroup
	for i := range workers {
		workers[i] = &streamWorker{run: run}
		wg.Go(func() { workers[i].loop(ctx) })
	}
	cfg := Config{URL: st.URL, RunID: runID, Queue: source, Producers: sc.Producers, Batch: sc.Batch,
		Partitions: sc.Partitions, PayloadBytes: o.PayloadBytes, Duration: o.Duration, RequestTimeout: o.RequestTimeout,
		BrokerPID: st.BrokerPID, MintedIDs: true}
	r, err := Run(ctx, cfg)
	if err != nil {
		close(run.drainOver)
		wg.Wait()
		return err
	}
	res.Push = r
	res.Status, res.PushErrors = r.Status, r.Errors
	for p, outs := range r.Ledger.Outcomes {
		for seq := range outs {
			if r.Ledger.expected(p, seq) {
				sr.ExpectedEvents++
				sr.ExpectedSum += streamValue(p, seq)
			}
		}
	}
	run.target.Store(sr.ExpectedEvents)
	drain := time.AfterFunc(DefaultDrainTimeout+10*o.Duration, func() { close(run.drainOver) })
	wg.Wait()
	drain.Stop()
	if _, err := waitCaughtUp(ctx, st.URL, o.CatchUpTimeout); err != nil {
		return err
	}
	after, err := sampleCPU(st)
	if err != nil {
		return err
	}

	var lat Latency
	for _, w := range workers {
		lat.Merge(&w.lat)
		sr.Pops += w.pops
		sr.EmptyPops += w.empty
		sr.Cycles += w.cycles
		sr.Events += w.events
		sr.WindowsClosed += w.windows
		sr.Errors += w.errors
		for k, v := range w.samples {
			sr.ErrorSamples = addSample(sr.ErrorSamples, k, v)
		}
	}
	sr.CycleLatency = lat.Summary()
	if last := run.lastCommit.Load(); last > 0 {
		sr.WallSec = time.Unix(0, last).Sub(run.start).Seconds()
	}
	if sr.WallSec > 0 {
		sr.EventsPerSec = float64(sr.Events) / sr.WallSec
		sr.CyclesPerSec = float64(sr.Cycles) / sr.WallSec
	}
	res.Messages, res.MsgPerSec, res.Latency = sr.Events, sr.EventsPerSec, sr.CycleLatency
	res.BrokerPeakRSSBytes = r.BrokerPeakRSSBytes
	if n, err := readVmHWM(st.BrokerPID); err == nil {
		res.BrokerPeakRSSBytes = n
	}
	res.setCPU(before, after)
	checkCommitted(sr, r.Ledger, workers)

	store, err := pg.Open(pg.Config{URL: st.PGURL})
	if err != nil {
		return err
	}
	defer store.Close()
	v, err := Verify(ctx, store, r.Ledger, o.VerifyTimeout)
	if err != nil {
		return fmt.Errorf("bench: verify: %w", err)
	}
	r.Verify = v
	res.StoredMessages = int64(v.Stored)
	if err := checkAggregates(ctx, store, sr); err != nil {
		return err
	}
	if sr.Errors > 0 {
		sr.problem("%d stream errors (pop, state/get or cycle)", sr.Errors)
	}
	if r.Errors > 0 {
		sr.problem("%d pushes without a usable answer: the expected sums are not exact", r.Errors)
	}
	res.VerifyOK = v.OK() && sr.OK()
	if !res.VerifyOK {
		var pb bytes.Buffer
		v.writeText(&pb)
		for _, line := range bytes.Split(bytes.TrimSpace(pb.Bytes()), []byte("\n")) {
			if !v.OK() && len(res.Problems) < 20 {
				res.Problems = append(res.Problems, string(bytes.TrimSpace(line)))
			}
		}
		for _, p := range sr.Problems {
			if len(res.Problems) < 20 {
				res.Problems = append(res.Problems, p)
			}
		}
	}

	return measureStorage(ctx, st, res, o.PayloadBytes)
}

// checkCommitted checks the workers' own record: every accepted event
// committed by exactly one cycle, and nothing else.
func checkCommitted(sr *StreamReport, l *Ledger, workers []*streamWorker) {
	seen := make([][]uint8, len(l.Outcomes))
	for p := range seen {
		seen[p] = make([]uint8, len(l.Outcomes[p]))
	}
	for _, w := range workers {
		for _, e := range w.done {
			p, seq := int(e>>32), int(e&0xffffffff)
			if p >= len(seen) || seq >= len(seen[p]) || !l.expected(p, seq) {
				sr.CommittedUnsent++
				continue
			}
			if seen[p][seq] < 255 {
				seen[p][seq]++
			}
		}
	}
	for p := range seen {
		for seq, n := range seen[p] {
			switch {
			case n > 1:
				sr.CommittedTwice++
			case n == 0 && l.expected(p, seq):
				sr.NotCommitted++
			}
		}
	}
	if sr.CommittedTwice > 0 || sr.NotCommitted > 0 || sr.CommittedUnsent > 0 {
		sr.problem("cycles committed %d events twice, missed %d accepted events, committed %d events never accepted",
			sr.CommittedTwice, sr.NotCommitted, sr.CommittedUnsent)
	}
}

// checkAggregates reads the query's state and the sink queue from
// PostgreSQL and checks that every accepted event is counted exactly once
// in them, and that no sink message or window is there twice.
func checkAggregates(ctx context.Context, store *pg.Store, sr *StreamReport) error {
	rows, err := store.Pool().Query(ctx, `SELECT key, value FROM queen.stream_state WHERE query_id = $1`, sr.QueryID)
	if err != nil {
		return fmt.Errorf("bench: read stream state: %w", err)
	}
	for rows.Next() {
		var key string
		var value []byte
		if err := rows.Scan(&key, &value); err != nil {
			rows.Close()
			return err
		}
		var a windowAgg
		if err := json.Unmarshal(value, &a); err != nil {
			sr.problem("state %s: not a window: %.60q", key, value)
			continue
		}
		sr.StateRows++
		sr.AggEvents += a.Count
		sr.AggSum += a.Sum
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("bench: read stream state: %w", err)
	}
	msgs, err := store.ReadQueue(ctx, sr.Sink)
	if err != nil {
		return fmt.Errorf("bench: read sink: %w", err)
	}
	txids := map[[2]string]bool{}
	windows := map[string]bool{}
	for _, m := range msgs {
		sr.SinkMessages++
		k := [2]string{m.Partition, m.TransactionID}
		if txids[k] {
			sr.SinkDuplicates++
		}
		txids[k] = true
		var a windowAgg
		if err := json.Unmarshal(m.Payload, &a); err != nil {
			sr.problem("sink %s offset %d: not a window: %.60q", m.Partition, m.Offset, m.Payload)
			continue
		}
		wk := a.Partition + "/" + strconv.FormatInt(a.Window, 10)
		if windows[wk] {
			sr.DuplicateWindows++
		}
		windows[wk] = true
		if a.Count != a.WindowEnd-a.WindowStart+1 {
			sr.PartialWindows++
		}
		sr.AggEvents += a.Count
		sr.AggSum += a.Sum
	}
	if sr.AggEvents != sr.ExpectedEvents || sr.AggSum != sr.ExpectedSum {
		sr.problem("aggregates count %d events summing to %d; accepted %d events summing to %d",
			sr.AggEvents, sr.AggSum, sr.ExpectedEvents, sr.ExpectedSum)
	}
	if sr.SinkMessages != sr.WindowsClosed {
		sr.problem("sink holds %d windows; the cycles pushed %d", sr.SinkMessages, sr.WindowsClosed)
	}
	if sr.SinkDuplicates > 0 || sr.DuplicateWindows > 0 || sr.PartialWindows > 0 {
		sr.problem("sink: %d duplicate transactionIds, %d windows pushed twice, %d partial windows",
			sr.SinkDuplicates, sr.DuplicateWindows, sr.PartialWindows)
	}
	return nil
}

// writeText writes the stream figures and checks.
func (s *StreamReport) writeText(w io.Writer) {
	var b bytes.Buffer
	rows := [][]string{
		{"stream workers × pop batch", fmt.Sprintf("%d × %d", s.Workers, s.PopBatch)},
		{"tumbling window (offsets)", strconv.Itoa(s.Window)},
		{"events committed", strconv.FormatInt(s.Events, 10)},
		{"events/s", fmt.Sprintf("%.0f", s.EventsPerSec)},
		{"cycles", strconv.FormatInt(s.Cycles, 10)},
		{"cycles/s", fmt.Sprintf("%.0f", s.CyclesPerSec)},
		{"cycle p50 / p99 ms", fmt.Sprintf("%.2f / %.2f", s.CycleLatency.P50ms, s.CycleLatency.P99ms)},
		{"pops (empty)", fmt.Sprintf("%d (%d)", s.Pops, s.EmptyPops)},
		{"windows closed (sink messages)", fmt.Sprintf("%d (%d)", s.WindowsClosed, s.SinkMessages)},
		{"open windows (state rows)", strconv.FormatInt(s.StateRows, 10)},
		{"aggregated events / sum", fmt.Sprintf("%d / %d", s.AggEvents, s.AggSum)},
		{"accepted events / sum", fmt.Sprintf("%d / %d", s.ExpectedEvents, s.ExpectedSum)},
		{"stream errors", strconv.FormatInt(s.Errors, 10)},
	}
	writeTable(&b, []string{"stream", "value"}, rows)
	writeErrorSamples(&b, "stream errors by kind", s.ErrorSamples)
	_, _ = w.Write(b.Bytes())
}
