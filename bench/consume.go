package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// popWaitMillis is the long-poll timeout of each pop, in milliseconds.
const popWaitMillis = 1000

// consumeErrorBackoff is how long a consumer pauses after a pop or ack
// that got no usable answer, so that a broker refusing connections is not
// spun on.
const consumeErrorBackoff = 100 * time.Millisecond

// groupPrefix names the named consumer groups: bench-g0, bench-g1, …
const groupPrefix = "bench-g"

// queueModeLabel is the report's name for the queue-mode group.
const queueModeLabel = "(queue mode)"

// popResponse is the part of a 200 pop answer the consumers use.
type popResponse struct {
	Messages []poppedMessage `json:"messages"`
}

type poppedMessage struct {
	TransactionID string          `json:"transactionId"`
	Data          json.RawMessage `json:"data"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	Offset        int64           `json:"offset"`
	LeaseID       string          `json:"leaseId"`
}

type ackItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
}

type ackBatch struct {
	ConsumerGroup   string    `json:"consumerGroup,omitempty"`
	Acknowledgments []ackItem `json:"acknowledgments"`
}

// ackResult is the part of one ack answer's result the consumers check.
// TransactionID is the JSON text of the member as it came (its quotes
// included), decoded into memory the consumer reuses: sameID compares it
// with the id acked without making a string of each.
type ackResult struct {
	Index         int             `json:"index"`
	TransactionID json.RawMessage `json:"transactionId"`
	Success       bool            `json:"success"`
	Error         *string         `json:"error"`
}

// sameID reports whether raw, the JSON text of a string, is id: byte for
// byte when id is written without escapes (what the broker does for
// printable ASCII without '"', '\\' and the HTML characters), else by
// decoding raw.
func sameID(raw json.RawMessage, id string) bool {
	if len(raw) == len(id)+2 && raw[0] == '"' && raw[len(raw)-1] == '"' && string(raw[1:len(raw)-1]) == id {
		return true
	}
	var s string
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && s == id
}

// consumeCounts are one consumer's tallies.
type consumeCounts struct {
	pops       int64 // pop requests sent
	popEmpty   int64 // answered 204
	popErrors  int64 // without a usable answer
	delivered  int64 // messages of the run received
	foreign    int64 // messages of other runs received (and acked)
	acks       int64 // ack/batch requests sent
	ackErrors  int64 // ack requests without a usable answer
	ackFailed  int64 // messages whose ack was not confirmed
	errSamples map[string]int64
}

func (c *consumeCounts) merge(o *consumeCounts) {
	c.pops += o.pops
	c.popEmpty += o.popEmpty
	c.popErrors += o.popErrors
	c.delivered += o.delivered
	c.foreign += o.foreign
	c.acks += o.acks
	c.ackErrors += o.ackErrors
	c.ackFailed += o.ackFailed
	for k, v := range o.errSamples {
		c.errSamples = addSample(c.errSamples, k, v)
	}
}

// consumeRun is the consumer side of a run.
type consumeRun struct {
	cfg       *Config
	start     time.Time
	groups    []*group
	consumers []*consumer
	wg        sync.WaitGroup
	drainOver chan struct{} // closed DrainTimeout after the producers stop
	doneAt    time.Time     // when the producers stopped
}

// startConsumers starts cfg.Consumers consumers for each group. sent[p]
// is producer p's count of items it has started to send.
func startConsumers(ctx context.Context, cfg *Config, u *url.URL, base string, sent []*atomic.Int64, start time.Time) *consumeRun {
	names := cfg.groupNames()
	hc := &fasthttp.HostClient{
		Addr:                      hostPort(u),
		IsTLS:                     u.Scheme == "https",
		Name:                      "queen-bench",
		MaxConns:                  cfg.Consumers * len(names),
		MaxConnWaitTimeout:        cfg.RequestTimeout,
		ReadTimeout:               cfg.RequestTimeout,
		WriteTimeout:              cfg.RequestTimeout,
		MaxIdemponentCallAttempts: 1,
		// A pop takes a lease and an ack moves a cursor: never resend.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}
	cr := &consumeRun{cfg: cfg, start: start, drainOver: make(chan struct{})}
	for _, name := range names {
		g := newGroup(name, sent)
		cr.groups = append(cr.groups, g)
		popURI := popURI(base, cfg.Queue, name, cfg.PopBatch, cfg.AutoAck)
		for range cfg.Consumers {
			c := &consumer{cfg: cfg, g: g, hc: hc, popURI: popURI, ackURI: base + "/api/v1/ack/batch", drainOver: cr.drainOver}
			cr.consumers = append(cr.consumers, c)
			cr.wg.Go(func() { c.run(ctx) })
		}
	}
	return cr
}

// popURI is the wildcard long-poll pop of queue for group ("" for queue mode).
func popURI(base, queue, group string, batch int, autoAck bool) string {
	q := url.Values{}
	q.Set("batch", strconv.Itoa(batch))
	q.Set("wait", "true")
	q.Set("timeout", strconv.Itoa(popWaitMillis))
	if group != "" {
		q.Set("consumerGroup", group)
	}
	if autoAck {
		q.Set("autoAck", "true")
	}
	return base + "/api/v1/pop/queue/" + url.PathEscape(queue) + "?" + q.Encode()
}

// producersDone hands the groups the final ledger and lets the consumers
// drain for at most cfg.DrainTimeout; it returns once every consumer has
// stopped.
func (cr *consumeRun) producersDone(l *Ledger) {
	cr.doneAt = time.Now()
	for _, g := range cr.groups {
		g.producersDone(l)
	}
	t := time.AfterFunc(cr.cfg.DrainTimeout, func() { close(cr.drainOver) })
	cr.wg.Wait()
	t.Stop()
}

type consumer struct {
	cfg       *Config
	g         *group
	hc        *fasthttp.HostClient
	popURI    string
	ackURI    string
	drainOver <-chan struct{}

	counts consumeCounts
	popLat Latency // pops that delivered
	e2e    Latency // per message: popped − sent

	// Memory of the last ack, reused for the next: the items, the
	// encoded body and the decoded results.
	ackItems []ackItem
	ackBody  bytes.Buffer
	ackRes   []ackResult
}

func (c *consumer) addError(counter *int64, msg string) {
	*counter++
	c.counts.errSamples = addSample(c.counts.errSamples, msg, 1)
}

// pause waits consumeErrorBackoff; false when the consumer must stop.
func (c *consumer) pause(ctx context.Context) bool {
	t := time.NewTimer(consumeErrorBackoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c.drainOver:
		return false
	case <-t.C:
		return true
	}
}

// run pops until ctx ends, the drain time is over, or its group has
// every expected item and a pop finds nothing more.
func (c *consumer) run(ctx context.Context) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	var pr popResponse
	var ds []delivery
	var scratch []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.drainOver:
			return
		default:
		}
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodGet)
		req.SetRequestURI(c.popURI)
		t0 := time.Now()
		err := c.hc.DoTimeout(req, resp, c.cfg.RequestTimeout)
		now := time.Now()
		c.counts.pops++
		switch {
		case err != nil:
			c.addError(&c.counts.popErrors, "pop: transport: "+err.Error())
			if !c.pause(ctx) {
				return
			}
			continue
		case resp.StatusCode() == fasthttp.StatusNoContent:
			c.counts.popEmpty++
			if c.g.complete() {
				return
			}
			continue
		case resp.StatusCode() != fasthttp.StatusOK:
			c.addError(&c.counts.popErrors, fmt.Sprintf("pop: HTTP %d: %s", resp.StatusCode(), clip(resp.Body())))
			if !c.pause(ctx) {
				return
			}
			continue
		}
		pr.Messages = pr.Messages[:0]
		if err := json.Unmarshal(resp.Body(), &pr); err != nil {
			c.addError(&c.counts.popErrors, "pop: bad response body: "+err.Error())
			continue
		}
		if len(pr.Messages) == 0 {
			c.addError(&c.counts.popErrors, "pop: 200 without messages")
			continue
		}
		c.popLat.Record(now.Sub(t0))
		ds = ds[:0]
		for i := range pr.Messages {
			m := &pr.Messages[i]
			if m.Queue != c.cfg.Queue {
				c.addError(&c.counts.popErrors, fmt.Sprintf("pop: message of queue %q", m.Queue))
			}
			d, sent, ours := examine(itemIDs{run: c.cfg.RunID, minted: c.cfg.MintedIDs, uuid7: c.cfg.UUID7IDs}, c.cfg.payloadShape(), m.TransactionID, m.Partition, m.Offset, m.Data, &scratch)
			if !ours {
				c.counts.foreign++
				continue
			}
			c.counts.delivered++
			ds = append(ds, d)
			if sent != noStamp {
				c.e2e.Record(time.Duration(now.UnixNano() - sent))
			}
		}
		// Recorded before the ack: the partition's next batch for this
		// group cannot be popped before the ack, so arrival order is
		// delivery order.
		c.g.record(ds, now)
		if !c.cfg.AutoAck {
			c.ack(req, resp, pr.Messages)
		}
	}
}

// ack acknowledges msgs as completed with one ack/batch.
func (c *consumer) ack(req *fasthttp.Request, resp *fasthttp.Response, msgs []poppedMessage) {
	ab := ackBatch{ConsumerGroup: c.g.name, Acknowledgments: slices.Grow(c.ackItems[:0], len(msgs))[:len(msgs)]}
	c.ackItems = ab.Acknowledgments
	for i := range msgs {
		m := &msgs[i]
		ab.Acknowledgments[i] = ackItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: "completed"}
	}
	c.ackBody.Reset()
	err := json.NewEncoder(&c.ackBody).Encode(&ab)
	if err != nil {
		c.addError(&c.counts.ackErrors, "ack: encode: "+err.Error())
		c.counts.ackFailed += int64(len(msgs))
		return
	}
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetRequestURI(c.ackURI)
	req.SetBodyRaw(c.ackBody.Bytes())
	c.counts.acks++
	err = c.hc.DoTimeout(req, resp, c.cfg.RequestTimeout)
	// Decoding fills the kept elements in place: nothing of the last
	// answer may stay (a member missing now must not read as the last
	// one's); each transactionId keeps its memory, emptied.
	res := c.ackRes[:cap(c.ackRes)]
	for i := range res {
		res[i] = ackResult{TransactionID: res[i].TransactionID[:0]}
	}
	res = res[:0]
	defer func() {
		clear(ab.Acknowledgments) // the next pop's strings replace these
		c.ackRes = res
	}()
	switch {
	case err != nil:
		c.addError(&c.counts.ackErrors, "ack: transport: "+err.Error())
	case resp.StatusCode() != fasthttp.StatusOK:
		c.addError(&c.counts.ackErrors, fmt.Sprintf("ack: HTTP %d: %s", resp.StatusCode(), clip(resp.Body())))
	default:
		if err := json.Unmarshal(resp.Body(), &res); err != nil {
			c.addError(&c.counts.ackErrors, "ack: bad response body: "+err.Error())
			break
		}
		if len(res) != len(msgs) {
			c.addError(&c.counts.ackErrors, fmt.Sprintf("ack: %d results for %d acknowledgments", len(res), len(msgs)))
			break
		}
		for i := range res {
			r := &res[i]
			switch {
			case r.Index != i || !sameID(r.TransactionID, msgs[i].TransactionID):
				c.counts.ackFailed++
				c.counts.errSamples = addSample(c.counts.errSamples,
					fmt.Sprintf("ack: result %d is index %d transactionId %s", i, r.Index, r.TransactionID), 1)
			case !r.Success:
				c.counts.ackFailed++
				e := "<no error>"
				if r.Error != nil {
					e = *r.Error
				}
				c.counts.errSamples = addSample(c.counts.errSamples, "ack: success false: "+e, 1)
			}
		}
		return
	}
	c.counts.ackFailed += int64(len(msgs))
}
