package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/queen-go/pg"
)

// Scenario runner timings.
const (
	// DefaultCatchUpTimeout bounds the wait, after the last push answer,
	// for the projector to have every accepted item in PostgreSQL.
	DefaultCatchUpTimeout = 120 * time.Second
	// backlogPollEvery is how often the runner reads the broker's
	// projector backlog (GET /metrics) during and after the load.
	backlogPollEvery = 250 * time.Millisecond
	// catchUpPollEvery is how often it reads it while waiting to catch up.
	catchUpPollEvery = 20 * time.Millisecond
)

// ScenarioOptions apply to every scenario of a run.
type ScenarioOptions struct {
	// Stack says how each scenario's broker and database are made.
	Stack StackConfig
	// Duration is how long producers push (the prefill, for pop and
	// fan-out scenarios); default DefaultDuration.
	Duration time.Duration
	// PayloadBytes is each item's payload size (default DefaultPayloadBytes).
	PayloadBytes int
	// RequestTimeout, VerifyTimeout and CatchUpTimeout: defaults
	// DefaultRequestTimeout, DefaultVerifyTimeout, DefaultCatchUpTimeout.
	RequestTimeout, VerifyTimeout, CatchUpTimeout time.Duration
	// ProfileDir, when set, profiles each scenario's measured phase into
	// this directory (NAME.broker.pprof and NAME.pgss.txt: see profiler);
	// Stack.Profile must be set too. Not for stream scenarios.
	ProfileDir string
}

func (o ScenarioOptions) withDefaults() ScenarioOptions {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.VerifyTimeout == 0 {
		o.VerifyTimeout = DefaultVerifyTimeout
	}
	if o.CatchUpTimeout == 0 {
		o.CatchUpTimeout = DefaultCatchUpTimeout
	}
	return o
}

// ScenarioResult is what one scenario measured. Per-message figures
// divide by Messages: the items accepted by a push scenario, the
// deliveries (all groups) of a pop or fan-out scenario.
type ScenarioResult struct {
	Scenario Scenario  `json:"scenario"`
	Started  time.Time `json:"started"`
	// DurationSec is the configured push (or prefill) duration.
	DurationSec  float64 `json:"duration_s"`
	PayloadBytes int     `json:"payload_bytes"`
	// Durable: PostgreSQL ran with fsync, full_page_writes and
	// synchronous_commit on (read from the server, not assumed). A row
	// without it is labelled non-durable.
	Durable bool `json:"durable"`

	// MsgPerSec: accepted items per second of a push scenario; deliveries
	// per second (all groups) of the drain of a pop or fan-out scenario.
	MsgPerSec float64 `json:"msg_per_s"`
	Messages  int64   `json:"messages"`
	// Status counts the push answers (the prefill's, for pop and fan-out):
	// throughput that holds with queued answers is committed and visible;
	// buffered answers mean the projector fell behind the pushes.
	Status StatusCounts `json:"status"`
	// PushErrors is pushes without a usable answer.
	PushErrors int64 `json:"push_errors"`
	// Latency: of each push request (request written → answer read); of
	// each pop that delivered, for pop and fan-out.
	Latency LatencySummary `json:"latency"`
	// PeakBacklog is the largest projector backlog (WAL records not yet in
	// PostgreSQL) read from the broker's /metrics during the pushes, and
	// CatchUpSec how long after the last push answer the projector took to
	// reach zero: together with Status.Buffered, a projector falling
	// behind shows here.
	PeakBacklog int64   `json:"peak_backlog"`
	CatchUpSec  float64 `json:"catch_up_s"`

	// BrokerPeakRSSBytes is the broker's VmHWM at the end: its peak
	// resident set over the scenario (the broker is fresh).
	BrokerPeakRSSBytes int64 `json:"broker_peak_rss_bytes"`
	// CPU seconds (user + system) over the measured phase: the pushes and
	// the projector's catch-up, or the drain.
	BrokerCPUSec float64 `json:"broker_cpu_s"`
	PGCPUSec     float64 `json:"pg_cpu_s"`
	// PGCPUMeasured is false when PostgreSQL's postmaster is not known
	// (an external server without -pg-pid): PGCPUSec is then 0.
	PGCPUMeasured bool `json:"pg_cpu_measured"`
	// Per message, in microseconds.
	BrokerCPUPerMsgUs float64 `json:"broker_cpu_per_msg_us"`
	PGCPUPerMsgUs     float64 `json:"pg_cpu_per_msg_us"`
	CPUPerMsgUs       float64 `json:"cpu_per_msg_us"`
	// ClientCPUSec is the bench's own CPU over the phase (it shares the
	// machine).
	ClientCPUSec float64 `json:"client_cpu_s"`

	// Storage is measured after verification; StoredMessages is the
	// messages of the run found stored, and the per-message bytes divide
	// by it. OverheadPerMsg is segments plus dedup, less the payload.
	Storage        StorageSizes `json:"storage"`
	StoredMessages int64        `json:"stored_messages"`
	SegmentsPerMsg float64      `json:"segments_bytes_per_msg"`
	DedupPerMsg    float64      `json:"dedup_bytes_per_msg"`
	OverheadPerMsg float64      `json:"overhead_bytes_per_msg"`

	// VerifyOK: the stored queue passed Verify and, with consumers, every
	// group received every accepted item exactly once, in order.
	VerifyOK bool `json:"verify_ok"`
	// Problems summarises what verification found, when it failed.
	Problems []string `json:"problems,omitempty"`
	// Error is why the scenario could not run or measure; its figures are
	// then partial.
	Error string `json:"error,omitempty"`

	// Pipeline is a push scenario's split of a push's time and the
	// projector's load, from the broker's /metrics over the measured phase
	// (nil for other kinds, or when /metrics could not be read).
	Pipeline *PipelineFigures `json:"pipeline,omitempty"`

	// Push is the full report of the pushes and consumers.
	Push *Report `json:"push,omitempty"`
	// Stream is a stream scenario's figures and exactly-once check; its
	// Messages are the events committed, MsgPerSec events per second and
	// Latency that of the cycles.
	Stream *StreamReport `json:"stream,omitempty"`
	// Partitions is a many-partitions scenario's pre-build and partition
	// creation figures.
	Partitions *PartitionsReport `json:"partitions,omitempty"`

	Machine Machine `json:"machine"`
	Commit  Commit  `json:"commit"`
	PG      PGInfo  `json:"pg"`
}

// OK reports whether the scenario ran and verified.
func (r *ScenarioResult) OK() bool { return r.Error == "" && r.VerifyOK }

// RunScenario runs one scenario on a fresh stack (StartStack) and
// measures it. It returns a result also when a step fails, with Error
// set; ctx ends the run early.
func RunScenario(ctx context.Context, sc Scenario, o ScenarioOptions) *ScenarioResult {
	o = o.withDefaults()
	res := &ScenarioResult{Scenario: sc, Started: nowUTC(), DurationSec: o.Duration.Seconds(),
		PayloadBytes: o.PayloadBytes, Machine: readMachine(), Commit: readCommit()}
	if err := runScenario(ctx, sc, o, res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func runScenario(ctx context.Context, sc Scenario, o ScenarioOptions, res *ScenarioResult) error {
	st, err := StartStack(ctx, o.Stack)
	if err != nil {
		return err
	}
	defer st.Stop()
	conn, err := pgx.Connect(ctx, st.PGURL)
	if err != nil {
		return err
	}
	res.PG, err = readPGInfo(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("bench: read PostgreSQL settings: %w", err)
	}
	res.Durable = res.PG.Durable()
	if sc.Kind == KindStream {
		return runStream(ctx, sc, o, st, res)
	}

	cfg := Config{
		URL: st.URL, Producers: sc.Producers, Batch: sc.Batch, Partitions: sc.Partitions,
		PayloadBytes: o.PayloadBytes, Duration: o.Duration, RequestTimeout: o.RequestTimeout,
		BrokerPID: st.BrokerPID, MintedIDs: sc.TxIDs == TxIDMinted, UUID7IDs: sc.TxIDs == TxIDUUID7, FreshPartitions: sc.FreshPartitions,
		RandomPayload: sc.RandomPayload,
	}
	pushes := sc.Kind == KindPush || sc.Kind == KindPartitions
	if sc.Kind == KindPartitions {
		cfg.RunID = "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
		cfg.Queue = "bench-" + cfg.RunID
		if res.Partitions, err = prebuildPartitions(ctx, st, cfg.Queue, sc.Prebuilt); err != nil {
			return err
		}
	}
	var before cpuSample
	var pipeBefore pipelineSample
	var pipeErr error
	backlog := startBacklogWatch(st.URL)
	stopBacklog := sync.OnceFunc(backlog.stop)
	defer stopBacklog()
	catchUp := func(ctx context.Context) error {
		stopBacklog()
		d, err := waitCaughtUp(ctx, st.URL, o.CatchUpTimeout)
		res.CatchUpSec = d.Seconds()
		res.PeakBacklog = backlog.peak()
		return err
	}
	var prof *profiler
	profile := func(ctx context.Context) error {
		if o.ProfileDir == "" {
			return nil
		}
		prof, err = startProfile(ctx, st, o.ProfileDir, sc.Name, o.Duration)
		return err
	}
	if pushes {
		if err := profile(ctx); err != nil {
			return err
		}
		if before, err = sampleCPU(st); err != nil {
			return err
		}
		pipeBefore, pipeErr = readPipeline(ctx, st.URL)
	} else {
		cfg.Consumers, cfg.Groups, cfg.QueueMode = sc.Consumers, sc.Groups, sc.Groups == 0
		cfg.PopBatch, cfg.AutoAck, cfg.Prefill = sc.PopBatch, sc.AutoAck, true
		cfg.DrainTimeout = DefaultDrainTimeout + 10*o.Duration
		cfg.AfterPrefill = func(ctx context.Context) error {
			if err := catchUp(ctx); err != nil {
				return err
			}
			if err := profile(ctx); err != nil {
				return err
			}
			before, err = sampleCPU(st)
			return err
		}
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Push = r
	res.Status, res.PushErrors = r.Status, r.Errors
	res.BrokerPeakRSSBytes = r.BrokerPeakRSSBytes
	if pushes {
		if err := catchUp(ctx); err != nil {
			return err
		}
		res.Messages, res.Latency = r.Accepted, r.Latency
		if r.WallSec > 0 {
			res.MsgPerSec = float64(r.Accepted) / r.WallSec
		}
		if pipeErr == nil {
			if after, err := readPipeline(ctx, st.URL); err == nil {
				f := pipelineFigures(pipeBefore, after)
				res.Pipeline = &f
			}
		}
	} else if r.Consume != nil {
		res.Messages, res.Latency, res.MsgPerSec = r.Consume.Delivered, r.Consume.PopLatency, r.Consume.MsgPerSec
	}
	after, err := sampleCPU(st)
	if err != nil {
		return err
	}
	if prof != nil {
		if err := prof.finish(ctx); err != nil {
			return err
		}
	}
	if n, err := readVmHWM(st.BrokerPID); err == nil {
		res.BrokerPeakRSSBytes = n
	}
	res.setCPU(before, after)

	store, err := pg.Open(pg.Config{URL: st.PGURL})
	if err != nil {
		return err
	}
	v, err := Verify(ctx, store, r.Ledger, o.VerifyTimeout)
	if err == nil && res.Partitions != nil {
		err = res.Partitions.count(ctx, store, cfg.Queue, r)
	}
	store.Close()
	if err != nil {
		return fmt.Errorf("bench: verify: %w", err)
	}
	r.Verify = v
	res.VerifyOK = v.OK() && (r.Consume == nil || r.Consume.OK()) && (res.Partitions == nil || res.Partitions.OK())
	if !res.VerifyOK {
		var b bytes.Buffer
		v.writeText(&b)
		if r.Consume != nil {
			r.Consume.writeVerify(&b)
		}
		if res.Partitions != nil && !res.Partitions.OK() {
			b.WriteString(res.Partitions.Problem + "\n")
		}
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if len(res.Problems) < 20 {
				res.Problems = append(res.Problems, strings.TrimSpace(line))
			}
		}
	}
	res.StoredMessages = int64(v.Stored)

	return measureStorage(ctx, st, res, o.PayloadBytes)
}

// measureStorage reads the storage sizes of st's database into res and
// divides them by res.StoredMessages (bytes per message, and beyond the
// payload of payloadBytes each), then stops the broker.
func measureStorage(ctx context.Context, st *Stack, res *ScenarioResult, payloadBytes int) error {
	conn, err := pgx.Connect(ctx, st.PGURL)
	if err != nil {
		return err
	}
	res.Storage, err = readSizes(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	if n := float64(res.StoredMessages); n > 0 {
		res.SegmentsPerMsg = float64(res.Storage.SegmentsBytes) / n
		res.DedupPerMsg = float64(res.Storage.DedupBytes) / n
		res.OverheadPerMsg = res.SegmentsPerMsg + res.DedupPerMsg - float64(payloadBytes)
	}
	return st.StopBroker()
}

// cpuSample is the CPU used so far by the broker, PostgreSQL and this
// process, in seconds.
type cpuSample struct {
	broker, pg, client float64
	pgOK               bool
}

func sampleCPU(st *Stack) (cpuSample, error) {
	var s cpuSample
	var err error
	if s.broker, err = processCPU(st.BrokerPID); err != nil {
		return s, fmt.Errorf("bench: broker CPU: %w", err)
	}
	if st.PostmasterPID != 0 {
		if s.pg, err = serverCPU(st.PostmasterPID); err != nil {
			return s, fmt.Errorf("bench: PostgreSQL CPU: %w", err)
		}
		s.pgOK = true
	}
	s.client = selfCPU()
	return s, nil
}

func (r *ScenarioResult) setCPU(before, after cpuSample) {
	r.BrokerCPUSec = after.broker - before.broker
	r.ClientCPUSec = after.client - before.client
	r.PGCPUMeasured = before.pgOK && after.pgOK
	if r.PGCPUMeasured {
		r.PGCPUSec = after.pg - before.pg
	}
	if n := float64(r.Messages); n > 0 {
		r.BrokerCPUPerMsgUs = r.BrokerCPUSec / n * 1e6
		r.PGCPUPerMsgUs = r.PGCPUSec / n * 1e6
		r.CPUPerMsgUs = r.BrokerCPUPerMsgUs + r.PGCPUPerMsgUs
	}
}

// errNoBacklog is returned by readBacklog when /metrics has no
// queen_projector_backlog gauge.
var errNoBacklog = errors.New("bench: no queen_projector_backlog in /metrics")

// readBacklog reads the broker's projector backlog (WAL records not yet
// in PostgreSQL) from GET /metrics.
func readBacklog(ctx context.Context, base string) (n int64, err error) {
	err = getMetrics(ctx, base, func(r io.Reader) error {
		n, err = parseBacklog(r)
		return err
	})
	return n, err
}

// getMetrics GETs base's /metrics and hands the body of a 200 answer to
// parse; parse's error, or the request's, is returned.
func getMetrics(ctx context.Context, base string, parse func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: GET /metrics: %s", resp.Status)
	}
	return parse(resp.Body)
}

func parseBacklog(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "queen_projector_backlog ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("bench: queen_projector_backlog %q: %w", v, err)
		}
		return int64(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoBacklog
}

// waitCaughtUp polls the backlog until it is zero; it returns how long
// that took.
func waitCaughtUp(ctx context.Context, base string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := readBacklog(ctx, base)
		if err == nil && n == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			if err == nil {
				err = fmt.Errorf("bench: projector backlog still %d after %s", n, timeout)
			}
			return time.Since(start), err
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(catchUpPollEvery):
		}
	}
}

// backlogWatch samples the projector backlog while the load runs.
type backlogWatch struct {
	stopc chan struct{}
	done  chan struct{}
	max   int64
}

func startBacklogWatch(base string) *backlogWatch {
	w := &backlogWatch{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(backlogPollEvery)
		defer t.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if n, err := readBacklog(ctx, base); err == nil {
					w.max = max(w.max, n)
				}
				cancel()
			}
		}
	}()
	return w
}

func (w *backlogWatch) stop() {
	close(w.stopc)
	<-w.done
}

// peak is the largest backlog seen; call after stop.
func (w *backlogWatch) peak() int64 { return w.max }
