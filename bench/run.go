package bench

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// heapSampleEvery is how often Run samples the client's heap.
const heapSampleEvery = 100 * time.Millisecond

// maxErrBody is how much of an error response body goes into an error sample.
const maxErrBody = 200

// Run pushes load at the broker as cfg says and reports what happened.
// With cfg.Consumers, consumers pop alongside the producers and then drain
// the queue; Report.Consume says what every group received. It returns an
// error only for a bad config or a broker that is not healthy before the
// load starts; errors during the load are counted in the Report.
// Cancelling ctx ends the load early (the report covers what was sent).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults(time.Now())
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL) // validated
	hc := &fasthttp.HostClient{
		Addr:                      hostPort(u),
		IsTLS:                     u.Scheme == "https",
		Name:                      "queen-bench",
		MaxConns:                  cfg.Producers,
		MaxConnWaitTimeout:        cfg.RequestTimeout,
		ReadTimeout:               cfg.RequestTimeout,
		WriteTimeout:              cfg.RequestTimeout,
		MaxIdemponentCallAttempts: 1,
		// A push is not idempotent: never resend one.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}
	base := u.Scheme + "://" + u.Host + trimSlash(u.Path)
	if err := checkHealth(hc, base+"/health", cfg.RequestTimeout); err != nil {
		return nil, err
	}
	queueJSON, err := json.Marshal(cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("%w: queue name: %v", ErrConfig, err)
	}

	sampler := startHeapSampler()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	prods := make([]*producer, cfg.Producers)
	sent := make([]*atomic.Int64, cfg.Producers)
	for i := range prods {
		prods[i] = &producer{id: i, cfg: &cfg, hc: hc, pushURL: base + "/api/v1/push", queueJSON: queueJSON,
			stamped: cfg.Consumers > 0}
		sent[i] = &prods[i].sent
	}
	var cons *consumeRun
	if cfg.Consumers > 0 && !cfg.Prefill {
		cons = startConsumers(ctx, &cfg, u, base, sent, start)
	}
	var wg sync.WaitGroup
	for _, p := range prods {
		wg.Go(func() { p.run(ctx, deadline) })
	}
	wg.Wait()
	wall := time.Since(start)
	var peakHeap uint64
	if cfg.Consumers == 0 {
		peakHeap = sampler.stop()
	}

	var total counts
	var lat Latency
	ledger := &Ledger{RunID: cfg.RunID, Queue: cfg.Queue, Partitions: cfg.Partitions, MintedIDs: cfg.MintedIDs, UUID7IDs: cfg.UUID7IDs,
		PayloadBytes: cfg.PayloadBytes, RandomPayload: cfg.RandomPayload, Outcomes: make([][]Outcome, len(prods)), Batch: cfg.Batch,
		FreshPartitions: cfg.FreshPartitions}
	if cfg.Consumers > 0 {
		ledger.SentAt = make([][]int64, len(prods))
	}
	for i, p := range prods {
		total.merge(&p.counts)
		lat.Merge(&p.lat)
		ledger.Outcomes[i] = p.outcomes
		if ledger.SentAt != nil {
			ledger.SentAt[i] = p.sentAt
		}
	}
	if cfg.Consumers > 0 && cfg.Prefill {
		if cfg.AfterPrefill != nil {
			if err := cfg.AfterPrefill(ctx); err != nil {
				sampler.stop()
				return nil, err
			}
		}
		cons = startConsumers(ctx, &cfg, u, base, sent, time.Now())
	}
	var consume *ConsumeReport
	if cons != nil {
		cons.producersDone(ledger)
		peakHeap = sampler.stop() // before the checks' own allocations
		consume = cons.report(ledger)
	}
	r := newReport(cfg, wall, &total, &lat)
	r.Ledger = ledger
	r.Consume = consume
	r.ClientPeakHeapBytes = peakHeap
	if cfg.BrokerPID != 0 {
		r.BrokerPID = cfg.BrokerPID
		if n, err := readVmHWM(cfg.BrokerPID); err != nil {
			r.BrokerRSSError = err.Error()
		} else {
			r.BrokerPeakRSSBytes = n
		}
	}
	return r, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

func checkHealth(hc *fasthttp.HostClient, uri string, timeout time.Duration) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(uri)
	if err := hc.DoTimeout(req, resp, timeout); err != nil {
		return fmt.Errorf("%w: GET %s: %v", ErrBrokerUnhealthy, uri, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("%w: GET %s: %d %s", ErrBrokerUnhealthy, uri, resp.StatusCode(), clip(resp.Body()))
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > maxErrBody {
		return string(b[:maxErrBody]) + "…"
	}
	return string(b)
}

// pushResult is one element of the push response.
type pushResult struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        string `json:"status"`
}

type producer struct {
	id        int
	cfg       *Config
	hc        *fasthttp.HostClient
	pushURL   string
	queueJSON []byte

	// stamped: payloads carry their send time (runs with consumers).
	stamped bool
	// sent is the number of items this producer has started to send
	// (published before each request, for the consumers).
	sent atomic.Int64

	counts   counts
	lat      Latency
	outcomes []Outcome // by seq
	sentAt   []int64   // by request, unix ns; stamped runs only
}

func (p *producer) run(ctx context.Context, deadline time.Time) {
	cfg := p.cfg
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	var body []byte
	txids := make([][2]int, cfg.Batch) // each item's transactionId as body[a:b]
	stamps := make([]int, cfg.Batch)   // each item's send time as body[a:a+stampWidth]
	var res []pushResult
	seq := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		body = body[:0]
		body = append(body, `{"items":[`...)
		mintedAt := time.Now().UnixMilli() // UUIDv7 ids: minted as the request is built
		for i := range cfg.Batch {
			s := seq + i
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, `{"queue":`...)
			body = append(body, p.queueJSON...)
			body = append(body, `,"partition":"`...)
			if cfg.FreshPartitions {
				body = appendPartition(body, freshPartitionIndex(p.id, s, cfg.Producers, cfg.Partitions))
			} else {
				body = appendPartition(body, partitionIndex(p.id, s, cfg.Partitions))
			}
			if !cfg.MintedIDs {
				body = append(body, `","transactionId":"`...)
				txids[i][0] = len(body)
				if cfg.UUID7IDs {
					body = appendUUID7TxID(body, cfg.RunID, p.id, s, mintedAt)
				} else {
					body = appendTxID(body, cfg.RunID, p.id, s)
				}
				txids[i][1] = len(body)
			}
			body = append(body, `","payload":`...)
			if p.stamped {
				body, stamps[i] = appendPayloadAt(body, p.id, s, cfg.payloadShape(), 0)
			} else {
				body = appendPayload(body, p.id, s, cfg.payloadShape(), noStamp)
			}
			body = append(body, '}')
		}
		body = append(body, "]}"...)
		req.SetRequestURI(p.pushURL)
		if p.stamped {
			now := time.Now().UnixNano()
			for _, at := range stamps {
				putStamp(body[at:at+stampWidth], now)
			}
			p.sentAt = append(p.sentAt, now)
		}
		req.SetBodyRaw(body)
		p.sent.Store(int64(seq + cfg.Batch))

		t0 := time.Now()
		err := p.hc.DoTimeout(req, resp, cfg.RequestTimeout)
		elapsed := time.Since(t0)

		p.counts.requests++
		p.counts.items += int64(cfg.Batch)
		first := len(p.outcomes)
		for range cfg.Batch {
			p.outcomes = append(p.outcomes, Unknown) // until proven otherwise
		}
		outcomes := p.outcomes[first:]
		switch {
		case err != nil:
			p.counts.addError("transport: " + err.Error())
		case resp.StatusCode() != fasthttp.StatusCreated:
			p.counts.addError(fmt.Sprintf("HTTP %d: %s", resp.StatusCode(), clip(resp.Body())))
		default:
			res = res[:0]
			if err := json.Unmarshal(resp.Body(), &res); err != nil {
				p.counts.addError("bad response body: " + err.Error())
				break
			}
			if msg := p.match(res, body, txids); msg != "" {
				p.counts.addError("response does not match request: " + msg)
				break
			}
			p.lat.Record(elapsed)
			for i := range res {
				outcomes[i], _ = parseStatus(res[i].Status) // match checked it
			}
		}
		for _, o := range outcomes {
			p.counts.outcomes[o]++
		}
		seq += cfg.Batch
	}
}

// match checks a 201 response item for item against the request; it
// returns "" when they match, else what is wrong.
func (p *producer) match(res []pushResult, body []byte, txids [][2]int) string {
	if len(res) != len(txids) {
		return fmt.Sprintf("%d results for %d items", len(res), len(txids))
	}
	for i := range res {
		r := &res[i]
		switch {
		case r.Index != i:
			return fmt.Sprintf("result %d has index %d", i, r.Index)
		case p.cfg.MintedIDs && r.TransactionID != r.MessageID:
			// The broker uses the id it minted as the transactionId.
			return fmt.Sprintf("result %d has transaction_id %q, not its message_id %q", i, r.TransactionID, r.MessageID)
		case !p.cfg.MintedIDs && r.TransactionID != string(body[txids[i][0]:txids[i][1]]):
			return fmt.Sprintf("result %d has transaction_id %q, sent %q", i, r.TransactionID, body[txids[i][0]:txids[i][1]])
		case r.QueueName != p.cfg.Queue:
			return fmt.Sprintf("result %d has queueName %q", i, r.QueueName)
		case r.MessageID == "":
			return fmt.Sprintf("result %d has no message_id", i)
		}
		if _, ok := parseStatus(r.Status); !ok {
			return fmt.Sprintf("result %d has status %q", i, r.Status)
		}
	}
	return ""
}

// heapSampler tracks the peak HeapAlloc of this process.
type heapSampler struct {
	stopc chan struct{}
	done  chan uint64
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{stopc: make(chan struct{}), done: make(chan uint64, 1)}
	go func() {
		var peak uint64
		var ms runtime.MemStats
		sample := func() {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		t := time.NewTicker(heapSampleEvery)
		defer t.Stop()
		sample()
		for {
			select {
			case <-t.C:
				sample()
			case <-s.stopc:
				sample()
				s.done <- peak
				return
			}
		}
	}()
	return s
}

func (s *heapSampler) stop() uint64 {
	close(s.stopc)
	return <-s.done
}
