package fastapi

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// MicrosLayout is how message times are written (pop's createdAt, traces,
// the message routes): UTC with microseconds, the precision PostgreSQL
// keeps.
const MicrosLayout = "2006-01-02T15:04:05.000000Z"

// Pop defaults (Queen's DEFAULT_TIMEOUT and DEFAULT_BATCH_SIZE).
const (
	DefaultPopTimeout = 30 * time.Second
	// MaxPopBatch caps one pop's batch.
	MaxPopBatch = 10000
	// MaxAckBatch caps the acknowledgments of one ack/batch: the largest
	// pop's messages. MaxAckBatchBytes caps its body (within
	// QUEEN_MAX_BODY_BYTES): decoding an ack takes several times its bytes
	// in memory, and three 62 MB bodies of 780,000 acks took the broker
	// past 1 GB (a hostile-input probe, 2026-12-07); 10,000 acks of
	// Queen's SDKs are about 1.5 MB.
	MaxAckBatch      = MaxPopBatch
	MaxAckBatchBytes = 8 << 20
	// ackBatchPath is the ack/batch route.
	ackBatchPath = "/api/v1/ack/batch"
	// AutopilotBatch is the batch of a pop that sends autopilot=true and no
	// batch. Newer Queen SDKs consume that way by default and leave the
	// batch size to the broker; without a batch parameter the API default
	// (docs/api.md, "Consuming") is 1, one message per HTTP round trip.
	AutopilotBatch = 100
	// popRetryInterval is how long a waiting pop sleeps after a PostgreSQL
	// error before it tries again (within its timeout).
	popRetryInterval = 500 * time.Millisecond
	// popSafetyRecheck bounds how long a waiting pop goes without looking
	// again when neither a wake-up nor a known time (PopResult.NextCheck)
	// comes: a safety net for changes that send no wake-up (a seek, a
	// deleted group), not a polling loop.
	popSafetyRecheck = 30 * time.Second
)

// Consumer is what the consume routes need from the broker.
type Consumer interface {
	Pop(ctx context.Context, req pg.PopRequest) (*pg.PopResult, error)
	Ack(ctx context.Context, reqs []pg.AckRequest) ([]pg.AckResult, error)
	ExtendLease(ctx context.Context, leaseID uuid.UUID, seconds int) (time.Time, string, error)
	// ReleaseLease frees a lease whose messages never reached the consumer
	// (its client left before the pop's answer was written), without
	// counting a delivery attempt, and wakes pops waiting on queue.
	ReleaseLease(ctx context.Context, leaseID uuid.UUID, queue string) error
	// WaitChan returns a channel closed when queue may have news.
	WaitChan(queue string) <-chan struct{}
	// WakeGeneration counts queue's wake-ups so far (and maybe others'; ""
	// counts every queue's); a look at the queue that starts after
	// reading g sees every commit announced by the wake-ups up to g
	// (waker.Waker.Generation).
	WakeGeneration(queue string) uint64
	// WakeQueue wakes the pops waiting on queue, on every broker (after a
	// seek or a group delete changed what they may deliver).
	WakeQueue(ctx context.Context, queue string)
}

func boolArg(a *fasthttp.Args, name string) bool {
	v := string(a.Peek(name))
	return v == "true" || v == "1"
}

func intArg(a *fasthttp.Args, name string, def, lo, hi int) int {
	v := a.Peek(name)
	if len(v) == 0 {
		return def
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return def // Queen: a bad int falls back to the default
	}
	return min(max(n, lo), hi)
}

// pageArg reads the integer query parameter name of a paged listing
// whose parameters are this broker's own (no Queen client sends them, so
// none relies on a bad value falling back, as intArg's do): def when
// absent or empty; otherwise it must be an integer from lo to hi, else it
// answers 400 {"error": "<name> must be an integer from <lo> to <hi>"}
// and returns false. Clamping, as intArg does, would page wrongly without
// saying so where the answer has no pagination object to report the
// limit used: a client asking for 5000 rows a page and moving its offset
// by 5000 would skip 4000 rows a page.
func pageArg(ctx *fasthttp.RequestCtx, name string, def, lo, hi int) (int, bool) {
	v := ctx.QueryArgs().Peek(name)
	if len(v) == 0 {
		return def, true
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < lo || n > hi {
		writeErr(ctx, fasthttp.StatusBadRequest, name+" must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
		return 0, false
	}
	return n, true
}

// pathName decodes a percent-encoded path segment ("+" stays "+") and
// checks it as a name; a 400 says what is wrong with it.
func pathName(ctx *fasthttp.RequestCtx, key string) (string, bool) {
	raw, _ := ctx.UserValue(key).(string)
	s, err := url.PathUnescape(raw)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "invalid "+key+" name: a malformed percent escape")
		return "", false
	}
	if !validName(ctx, key, s) {
		return "", false
	}
	return s, true
}

// validName checks v as a name (ingest.ValidateName); when it is not one it
// answers 400 "invalid <what> name: <why>" and returns false.
func validName(ctx *fasthttp.RequestCtx, what, v string) bool {
	if err := ingest.ValidateName(v); err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "invalid "+what+" name: "+err.Error())
		return false
	}
	return true
}

// optionalPathName is pathName for a segment a route may lack ("" then).
func optionalPathName(ctx *fasthttp.RequestCtx, key string) (string, bool) {
	if ctx.UserValue(key) == nil {
		return "", true
	}
	return pathName(ctx, key)
}

func (s *Server) pop(ctx *fasthttp.RequestCtx) { s.popWith(ctx, nil) }

// popWith serves a pop of the path's queue (f nil) or one filtered by
// namespace/task (f set: GET /api/v1/pop, see popFiltered); the query
// parameters, the wait loop and the answer are the same.
func (s *Server) popWith(ctx *fasthttp.RequestCtx, f *popFilter) {
	queue, partition, ok := popTarget(ctx, f)
	if !ok {
		return
	}
	a := ctx.QueryArgs()
	group := string(a.Peek("consumerGroup"))
	if group == "" {
		group = pg.QueueModeGroup
	} else if !validName(ctx, "consumerGroup", group) {
		return
	}
	defBatch := 1
	if boolArg(a, "autopilot") {
		defBatch = AutopilotBatch
	}
	req := pg.PopRequest{Queue: queue, Partition: partition, Group: group,
		Batch:      intArg(a, "batch", defBatch, 1, MaxPopBatch),
		Partitions: intArg(a, "partitions", 1, 1, 1000),
		AutoAck:    boolArg(a, "autoAck")}
	switch mode := string(a.Peek("subscriptionMode")); mode {
	case "new", "new-only":
		req.SubscriptionMode = pg.SubscribeNew
	}
	if from := string(a.Peek("subscriptionFrom")); from == "now" {
		req.SubscriptionMode = pg.SubscribeNew
	} else if from != "" {
		t, err := parseTimestamp(from)
		if err != nil {
			writeErr(ctx, fasthttp.StatusBadRequest, "subscriptionFrom must be \"now\" or "+strings.TrimPrefix(err.Error(), "must be "))
			return
		}
		req.SubscriptionFrom = &t
	}
	wait := boolArg(a, "wait")
	timeout := time.Duration(intArg(a, "timeout", int(DefaultPopTimeout/time.Millisecond), 0, 3600_000)) * time.Millisecond
	start := time.Now()
	deadline := start.Add(timeout)
	var sleepTimer *time.Timer      // the waits' timer (below)
	joined, watcher := false, false // the wake gate's role of a waiting pop (wakeGate.join)
	passOn := false                 // it answers without the claim its wake-up was for (wakeGate.leave)
	var expired <-chan time.Time    // fires at the deadline: a turn waited for in the wake gate ends then
	for waited := false; ; waited = true {
		if s.deps.Maintenance.PopMaintenance() {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		if waited && req.SubscriptionMode == pg.SubscribeNew && req.SubscriptionFrom == nil {
			// A claim after a wait records a new group (if none did: the
			// queue may not have existed) from when this pop began, not
			// from now: what woke it is for it.
			req.NewFrom = &start
		}
		// The wake channel is taken before the pop, so that no wake-up is
		// missed; a parked pop takes none (the watchers of its key look
		// for it: wakeGate.join), which for a pop by namespace or task
		// saves the look-up of the queues it matches.
		var ch <-chan struct{}
		if wait && (!joined || watcher) {
			ch = s.popWaitChan(f, queue)
		}
		if wait && clientGone(ctx) {
			// A long-poll whose client left (a consumer cancelled while it
			// waited) claims nothing: a lease on a request nobody reads
			// would hold the messages until it lapsed and count a retry.
			// What woke it passes on to the next parked pop of its key.
			passOn = true
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		// A waiting pop claims through the wake gate: not at all when a
		// claim since its last wake-up found nothing, and after a wait at
		// most maxWokenClaims of its queue (or namespace and task), group
		// and partition at once (a turn waited for ends with the timeout).
		// A pop by namespace or task waits on several queues: its
		// generation is that of any queue (waker.Generation("")).
		gated := wait
		key := wakeKey{queue: queue, group: group, partition: partition, filtered: f != nil}
		var res *pg.PopResult
		var err error
		var grant popGrant // the attempt's bound, from the answer budget (answerbudget.go)
		outcome, until, gen := gateClaim, time.Time{}, uint64(0)
		if gated {
			// Read after ch was taken: a wake-up after this reading closes
			// ch, and the claim below sees what wake-ups up to gen announced.
			genOf := queue
			if f != nil {
				genOf = ""
			}
			gen = s.deps.Consumer.WakeGeneration(genOf)
			if waited && expired == nil { // made once, when a wait may need it
				dt := time.NewTimer(time.Until(deadline))
				defer dt.Stop()
				expired = dt.C
			}
			outcome, until = s.wakes.enter(key, gen, waited, expired, ctx.Done())
		}
		if outcome == gateTimeout {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		if outcome == gateSkip {
			res = &pg.PopResult{NextCheck: until}
		} else {
			// One attempt gets Config.DBTimeout; an attempt of a waiting pop
			// also ends with the pop's timeout (taken after its turn came),
			// but gets popMinAttempt at least.
			limit := s.cfg.DBTimeout
			if wait {
				limit = min(limit, max(time.Until(deadline), popMinAttempt))
			}
			pctx, cancel := context.WithTimeout(context.Background(), limit)
			grant = s.answers.grant()
			r := req
			r.MaxBytes = grant.maxBytes
			if grant.one {
				r.Batch = 1
				s.failLog.Warn("pop: answers not yet written hold QUEEN_MAX_PENDING_ANSWER_BYTES; pops deliver one message each until they are written or dropped")
			}
			res, err = s.popOnce(pctx, f, r)
			cancel()
			if gated {
				empty := err == nil && len(res.Messages) == 0
				var next time.Time
				if empty {
					next = res.NextCheck
				}
				s.wakes.exit(key, gen, empty, err == nil && !empty, next)
			}
		}
		if err != nil {
			// By pg.Classify: a queue deleted under the pop (vanished) is a
			// pop of an unknown queue, 204 (pg.Store.Pop reruns such a pop
			// itself; this is the backstop). An internal error is a bug or a
			// damaged database: 500 at once, never "database unavailable".
			// An outage or a conflict: a waiting pop rides it out inside its
			// timeout and then answers 204, as an empty long-poll does, so
			// consumers that stop on a 5xx (Queen's JS SDK does, after its
			// retries) keep running through a database restart; a pop
			// without wait answers 503 at once.
			switch pg.Classify(err) {
			case pg.ClassVanished:
				s.log.Info("pop: the queue was deleted while the pop ran", "queue", queue, "err", err)
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			case pg.ClassInternal, pg.ClassInvalidText:
				s.dbFail(ctx, "pop", err)
				return
			}
			if !wait {
				s.dbFail(ctx, "pop of queue "+strconv.Quote(queue), err)
				return
			}
			left := time.Until(deadline)
			// An outage is logged once (unavailableLog), not at every
			// retry of every waiting consumer.
			if pg.IsUnavailable(err) {
				s.unavailable.met("waiting pop of queue "+strconv.Quote(queue), err)
			} else if left <= 0 {
				s.log.Error("pop failed", "queue", queue, "err", err)
			} else {
				s.log.Warn("pop failed; retrying within its timeout", "queue", queue, "err", err)
			}
			if left <= 0 {
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
			t := time.NewTimer(min(left, popRetryInterval))
			select {
			case <-t.C:
			case <-ctx.Done(): // server shutdown
				t.Stop()
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
			continue
		}
		if len(res.Messages) > 0 {
			if wait && clientGone(ctx) {
				// Left between the check above and the claim: give the lease
				// back. (An autoAck pop has moved its cursor already: those
				// messages are gone, as autoAck's at-most-once allows.)
				if res.LeaseID != uuid.Nil {
					rctx, cancel := s.dbCtx()
					if err := s.deps.Consumer.ReleaseLease(rctx, res.LeaseID, queue); err != nil {
						s.log.Warn("pop: could not release the lease of a departed client; it lapses by itself",
							"queue", queue, "err", err)
					}
					cancel()
				}
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
			res, n, err := s.fitAnswer(f, req, res, grant.maxBytes)
			if err != nil && !wait {
				s.dbFail(ctx, "pop of queue "+strconv.Quote(queue), err)
				return
			}
			if err != nil || res == nil {
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
			writePopTo(ctx, req, res, &answerOut{n: n, budget: s.answers,
				stall: s.cfg.WriteStallTimeout, total: s.cfg.WriteTimeout})
			return
		}
		left := time.Until(deadline)
		if !wait || left <= 0 {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		sleep := min(left, popSafetyRecheck)
		if !res.NextCheck.IsZero() {
			sleep = min(sleep, max(time.Until(res.NextCheck), 10*time.Millisecond))
		}
		// A waiting pop of one queue either watches the queue's wake
		// channel or is parked on a slot of its own, which a claim of its
		// key that delivered, or a watcher's leaving, wakes (wakeGate.join).
		var slot *parkSlot
		if gated {
			if !joined {
				joined, watcher = true, s.wakes.join(key)
				defer func() { s.wakes.leave(key, watcher, passOn) }()
			}
			if !watcher {
				slot = s.wakes.park(key)
				ch = slot.done
			}
		}
		// One timer a request, reset for each wait: every waiting pop of
		// a queue runs this at each wake-up, and with thousands of them a
		// timer allocated per wait was most of their CPU (allocation under
		// the collector's assist).
		if sleepTimer == nil {
			sleepTimer = time.NewTimer(sleep)
			defer sleepTimer.Stop()
		} else {
			sleepTimer.Reset(sleep)
		}
		done := false
		select {
		case <-ch:
		case <-sleepTimer.C:
			// The timeout, with no wake-up and no known time before it:
			// nothing is known to have changed since the claim that found
			// nothing, so it answers 204 without another. (Thousands of
			// long-polls that time out together each claimed once more, a
			// burst that held the pool and answered their 204 seconds
			// late.)
			done = sleep == left
		case <-ctx.Done(): // server shutdown
			done = true
		}
		sleepTimer.Stop()
		if slot != nil {
			if s.wakes.unpark(key, slot) {
				watcher = true
			} else if done {
				// Handed a wake-up as its own timer ended: it answers
				// without the claim the wake-up was for, so it passes it
				// on. (After unpark the slot is out of the line: closed
				// now or never.)
				select {
				case <-slot.done:
					passOn = true
				default:
				}
			}
		}
		if done {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
	}
}

// fitAnswer counts the answer to res in the answer budget when it is
// streamed (over streamAnswerBytes), and returns the result to answer and
// its answer's length (popAnswerLen). An answer the budget cannot take
// (answerBudget.admit: answers not yet written hold it) is refitted when
// its pop is leased: the answer of the messages that fit is counted at
// once (so that pops refitted together do not each take the same room),
// the lease is given back (ReleaseLease: not counted as a delivery
// attempt; the messages never left) and the pop runs once more for those
// messages, at least one (when all fit after all, and so for a pop of one
// message, the answer is taken as it is); nil when that run delivers
// nothing (another consumer took them meanwhile), with its error if it or
// the lease's release failed (the messages then stay leased, and return
// when the lease lapses, as for a client that left). An autoAck pop's
// answer (its messages are consumed) is counted whole. See
// answerbudget.go.
func (s *Server) fitAnswer(f *popFilter, req pg.PopRequest, res *pg.PopResult, maxBytes int64) (*pg.PopResult, int, error) {
	lease, group := popAnswerParts(req, res)
	n := popAnswerLen(res, lease, group)
	if n <= streamAnswerBytes {
		return res, n, nil
	}
	ok, room := s.answers.admit(int64(n))
	if ok {
		return res, n, nil
	}
	if req.AutoAck || !oneLease(res) {
		s.answers.add(int64(n))
		return res, n, nil
	}
	for try := 1; ; try++ {
		kn, k := popAnswerFit(res, lease, group, int(room))
		if k == len(res.Messages) {
			// Answers were given back meanwhile: it fits.
			s.answers.add(int64(n))
			return res, n, nil
		}
		// One message is taken whatever its size; and the room is not
		// chased past a few tries (answers come and go meanwhile).
		if k > 1 && try < 3 {
			if ok, room = s.answers.admit(int64(kn)); !ok {
				continue
			}
		} else {
			s.answers.add(int64(kn))
		}
		// res is not used past here: pops refitted at once do not each
		// keep a whole answer's messages through the round trips below.
		return s.refit(f, req, res.Messages[0].Queue, res.LeaseID, k, maxBytes, int64(kn))
	}
}

// refit is fitAnswer's second try: it gives back the lease leaseID of
// queue and pops k messages under the bound maxBytes. counted is what
// fitAnswer counted for their answer: refit corrects it to the answer's
// length, or gives it back when there is no streamed answer.
func (s *Server) refit(f *popFilter, req pg.PopRequest, queue string, leaseID uuid.UUID, k int, maxBytes, counted int64) (*pg.PopResult, int, error) {
	rctx, cancel := s.dbCtx()
	err := s.deps.Consumer.ReleaseLease(rctx, leaseID, queue)
	cancel()
	if err != nil {
		// The messages stay leased; they are not in memory any more.
		s.answers.release(counted)
		return nil, 0, err
	}
	r := req
	r.Batch, r.MaxBytes = k, maxBytes
	pctx, cancel := s.dbCtx()
	res, err := s.popOnce(pctx, f, r)
	cancel()
	if err != nil || len(res.Messages) == 0 {
		s.answers.release(counted)
		return nil, 0, err
	}
	lease, group := popAnswerParts(req, res)
	n := popAnswerLen(res, lease, group)
	if n > streamAnswerBytes {
		s.answers.add(int64(n) - counted)
	} else {
		s.answers.release(counted)
	}
	return res, n, nil
}

// oneLease reports whether res's messages are all under its one lease
// (ReleaseLease gives them all back).
func oneLease(res *pg.PopResult) bool {
	if res.LeaseID == uuid.Nil {
		return false
	}
	for i := range res.Messages {
		if res.Messages[i].LeaseID != res.LeaseID {
			return false
		}
	}
	return true
}

type ackBody struct {
	TransactionID *string `json:"transactionId"`
	PartitionID   *string `json:"partitionId"`
	Status        string  `json:"status"`
	ConsumerGroup string  `json:"consumerGroup"`
	Error         string  `json:"error"`
	LeaseID       *string `json:"leaseId"`
}

type ackResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName,omitempty"`
	PartitionName string  `json:"partitionName,omitempty"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

// toAckRequest validates one ack item a of an ack for group (the body's
// consumerGroup; "" takes the item's, else queue mode) and returns the
// request, or a 400 error text ("" when valid). transactionId is
// required (absent and "" alike) and otherwise follows
// validateTransactionID.
func toAckRequest(a ackBody, group string) (pg.AckRequest, string) {
	return toAckRequestWith(a, group, nil, &ackParseCache{})
}

// ackParseCache remembers, while a batch's acks are validated in order,
// the last partitionId and leaseId parsed and the last consumer group
// found valid: a batch acks one pop's messages, which share all three, so
// each is parsed and checked once per batch rather than once per ack.
type ackParseCache struct {
	pid, lease parsedUUID
	group      string // the last group found valid ("" none)
}

// parsedUUID is the last text uuid.Parse accepted and what it gave.
type parsedUUID struct {
	text string
	id   uuid.UUID
	set  bool
}

// parse is uuid.Parse(s), remembered when s parses.
func (c *parsedUUID) parse(s string) (uuid.UUID, error) {
	if !c.set || s != c.text {
		id, err := uuid.Parse(s)
		if err != nil {
			return id, err
		}
		c.text, c.id, c.set = s, id, true
	}
	return c.id, nil
}

// validGroup is ingest.ValidateName(g) == nil, remembered in c.
func (c *ackParseCache) validGroup(g string) bool {
	if g != "" && g == c.group {
		return true
	}
	if ingest.ValidateName(g) != nil {
		return false
	}
	c.group = g
	return true
}

// toAckRequestWith is toAckRequest with lease, when not nil, the memory
// the request's LeaseID points to (a batch's acks share one array rather
// than allocating one UUID each), and c what the acks before it in its
// batch parsed (a fresh one for an ack alone).
func toAckRequestWith(a ackBody, group string, lease *uuid.UUID, c *ackParseCache) (pg.AckRequest, string) {
	if a.TransactionID == nil || *a.TransactionID == "" {
		return pg.AckRequest{}, "transactionId is required"
	}
	if err := validateTransactionID(*a.TransactionID); err != nil {
		// No stored message has such a one (push refuses it).
		return pg.AckRequest{}, "transactionId " + err.Error()
	}
	if a.PartitionID == nil {
		return pg.AckRequest{}, "partitionId is required"
	}
	pid, err := c.pid.parse(*a.PartitionID)
	if err != nil {
		return pg.AckRequest{}, "partitionId must be a UUID"
	}
	r := pg.AckRequest{TransactionID: *a.TransactionID, PartitionID: pid, Status: strings.ToLower(a.Status), Error: a.Error}
	switch r.Status {
	case "", pg.AckCompleted, pg.AckSuccess, pg.AckFailed, pg.AckDLQ, pg.AckRetry:
	default:
		return r, "status must be one of completed, success, failed, dlq, retry"
	}
	if a.LeaseID != nil && *a.LeaseID != "" {
		l, err := c.lease.parse(*a.LeaseID)
		if err != nil {
			return r, "leaseId must be a UUID"
		}
		if lease == nil {
			lease = new(uuid.UUID)
		}
		*lease = l
		r.LeaseID = lease
	}
	r.Group = group
	if r.Group == "" {
		r.Group = a.ConsumerGroup
	}
	if r.Group == "" {
		r.Group = pg.QueueModeGroup
	} else if !c.validGroup(r.Group) {
		return r, "consumerGroup must be 1..255 bytes of UTF-8 without control characters"
	}
	if strings.ContainsRune(r.Error, 0) || !utf8.ValidString(r.Error) {
		return r, "error must be valid UTF-8 without NUL characters"
	}
	return r, ""
}

func (s *Server) ack(ctx *fasthttp.RequestCtx) {
	var a ackBody
	if !s.readObject(ctx, &a) {
		return
	}
	r, msg := toAckRequest(a, "")
	if msg != "" {
		writeErr(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	s.runAcks(ctx, []pg.AckRequest{r})
}

// ackBatchItem is ackBody as ack/batch decodes it: transactionId,
// partitionId and leaseId as plain strings, which spares the decoder an
// allocation per item and member of a batch of hundreds. toAckRequest
// treats absent and empty alike for transactionId and leaseId; for
// partitionId they differ ("is required" against "must be a UUID"), so
// an item with an empty one is told apart by partitionIDPresent (only
// bodies answered 400 take that second decode).
type ackBatchItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	Status        string `json:"status"`
	ConsumerGroup string `json:"consumerGroup"`
	Error         string `json:"error"`
	LeaseID       string `json:"leaseId"`
}

// partitionIDPresent reports whether item i of the ack/batch body (one
// decodeAckBatch accepted) has a partitionId member that is not null.
func partitionIDPresent(body []byte, i int) bool {
	var a struct {
		Acknowledgments []struct {
			PartitionID *string `json:"partitionId"`
		} `json:"acknowledgments"`
	}
	if decodeObject(body, &a) != nil || i >= len(a.Acknowledgments) {
		return false
	}
	return a.Acknowledgments[i].PartitionID != nil
}

// ackBatchBody is the body of POST /api/v1/ack/batch.
type ackBatchBody struct {
	ConsumerGroup   string          `json:"consumerGroup"`
	Acknowledgments *[]ackBatchItem `json:"acknowledgments"`
}

// ackBatchBuf is the memory ack/batch reads and decodes a body into,
// reused from request to request (ackBatchBufs): a fan-out consumer sends
// one body of its whole batch per pop (100 acks, some 13 kB), and reading
// it into a fresh buffer and growing the decoded slice item by item was
// about a quarter of the bytes the broker allocated in a fan-out run.
// Buffers past maxKeptAckBody bytes or maxKeptAckItems items are not kept.
//
// reqs and leases are the requests the items become and the memory their
// LeaseIDs point to, kept the same way: they are handed to Consumer.Ack,
// which is done with them when it returns (nothing of a request is kept
// past the call), and they are put back only after a call that returned
// without error.
type ackBatchBuf struct {
	body   []byte
	items  []ackBatchItem
	reqs   []pg.AckRequest
	leases []uuid.UUID
}

var ackBatchBufs = sync.Pool{New: func() any { return new(ackBatchBuf) }}

const (
	maxKeptAckBody  = 256 << 10
	maxKeptAckItems = 1024
)

// decodeAckBatch decodes body as decodeObject does into a fresh
// ackBatchBody, with its items in buf's memory when there are any: an
// empty or absent array, and any error, are decoded again the plain way
// (a kept slice cannot tell "acknowledgments":[] from no member at all,
// and the error must be the one a fresh value gives). The items slice is
// buf's until the caller is done with it.
func decodeAckBatch(body []byte, buf *ackBatchBuf) (ackBatchBody, error) {
	items := buf.items[:cap(buf.items)]
	clear(items) // decoding fills elements in place: nothing of the last body may stay
	items = items[:0]
	a := ackBatchBody{Acknowledgments: &items}
	if err := decodeObject(body, &a); err == nil && a.Acknowledgments == &items && len(items) > 0 {
		if cap(items) <= maxKeptAckItems {
			buf.items = items[:0]
		}
		return a, nil
	}
	a = ackBatchBody{}
	err := decodeObject(body, &a)
	return a, err
}

func (s *Server) ackBatch(ctx *fasthttp.RequestCtx) {
	// A large body takes a heavy write's turn before it is read (its
	// decoding and acks cost some 17 times its size in memory: waiting
	// for the turn, it holds none of that).
	turn := largeBody(ctx)
	if turn {
		if !s.takeTurn(ctx, s.heavyWriteTurns, largeWrites) {
			return
		}
		defer func() { <-s.heavyWriteTurns }()
	}
	buf := ackBatchBufs.Get().(*ackBatchBuf)
	defer ackBatchBufs.Put(buf)
	body, ok := s.readBodyOrAnswerInto(ctx, buf.body) // the ack/batch limit (bodyLimit)
	if !ok {
		return
	}
	if ctx.RequestBodyStream() != nil && cap(body) <= maxKeptAckBody {
		buf.body = body[:0] // read into memory of ours (else it is fasthttp's)
	}
	a, err := decodeAckBatch(body, buf)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if a.Acknowledgments == nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "acknowledgments (array) is required")
		return
	}
	n := len(*a.Acknowledgments)
	if n > MaxAckBatch {
		writeErr(ctx, fasthttp.StatusBadRequest, "the batch has "+strconv.Itoa(n)+" acknowledgments; at most "+strconv.Itoa(MaxAckBatch)+" are accepted per request")
		return
	}
	reqs, leases := buf.reqs[:0], buf.leases
	if n > maxKeptAckItems {
		reqs, leases = nil, nil
	}
	reqs, leases = slices.Grow(reqs, n), slices.Grow(leases[:0], n)[:n]
	var cache ackParseCache
	for i := range *a.Acknowledgments {
		it := &(*a.Acknowledgments)[i]
		pid := &it.PartitionID
		if it.PartitionID == "" && !partitionIDPresent(body, i) {
			pid = nil
		}
		r, msg := toAckRequestWith(ackBody{TransactionID: &it.TransactionID, PartitionID: pid, Status: it.Status,
			ConsumerGroup: it.ConsumerGroup, Error: it.Error, LeaseID: &it.LeaseID}, a.ConsumerGroup, &leases[i], &cache)
		if msg != "" {
			writeErr(ctx, fasthttp.StatusBadRequest, "acknowledgments["+strconv.Itoa(i)+"]: "+msg)
			return
		}
		reqs = append(reqs, r)
	}
	if !turn && ackKeyRuns(reqs) > maxAckBatchRuns {
		// Acks of many cursors: a heavy write (largeWrites).
		if !s.takeTurn(ctx, s.heavyWriteTurns, largeWrites) {
			return
		}
		defer func() { <-s.heavyWriteTurns }()
	}
	if s.runAcks(ctx, reqs) && n <= maxKeptAckItems {
		clear(reqs) // no request's strings stay reachable from the pool
		buf.reqs, buf.leases = reqs[:0], leases
	}
}

// maxAckBatchRuns is the most runs of acks of one cursor (ackKeyRuns) an
// ack/batch may carry without taking one of the heavy writes' turns. The
// acks of one pop come in runs of one per partition it claimed (one,
// unless it asked for more with partitions=N); 10,000 acks of as many
// partitions (cursor rows to load and lock, 1.4 MB of body, about 24 MB
// of broker memory while they run) are another thing: four clients
// sending them in a loop cut another client's pushes and pops from 2,547
// to 289 in 15 s. (A body over largeWriteBodyBytes has taken its turn
// before it was read.)
const maxAckBatchRuns = 100

// ackKeyRuns is how many runs of consecutive acks of one (partition,
// group) reqs holds.
func ackKeyRuns(reqs []pg.AckRequest) int {
	runs := 0
	for i := range reqs {
		if i == 0 || reqs[i].PartitionID != reqs[i-1].PartitionID || reqs[i].Group != reqs[i-1].Group {
			runs++
		}
	}
	return runs
}

// runAcks answers the acks reqs; false when Consumer.Ack failed.
func (s *Server) runAcks(ctx *fasthttp.RequestCtx, reqs []pg.AckRequest) bool {
	c, cancel := s.dbCtx()
	defer cancel()
	res, err := s.deps.Consumer.Ack(c, reqs)
	if err != nil {
		s.dbFail(ctx, "ack", err)
		return false
	}
	writeJSONBytes(ctx, fasthttp.StatusOK, appendAckResults(ctx.Response.Body()[:0], reqs, res))
	return true
}

// appendAckResults appends the ack answer, a JSON array of ackResult (one
// per ack, in order), to b in one pass: the same bytes as json.Marshal of
// the []ackResult, without building it (an ack/batch of 100 messages
// answers 100 results). What follows a result's transactionId is the same
// for every result equal to the one before (a whole lease's acks: all
// succeed in one queue and partition), and is then copied from that one
// rather than encoded again.
func appendAckResults(b []byte, reqs []pg.AckRequest, res []pg.AckResult) []byte {
	b = append(b, '[')
	// b[tailFrom:tailTo] is the tail of the result before, res[i-1].
	tailFrom, tailTo := -1, -1
	for i, r := range res {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"transactionId":`...)
		b = appendJSONString(b, reqs[i].TransactionID)
		if tailFrom >= 0 && r == res[i-1] {
			from := len(b)
			b = append(b, b[tailFrom:tailTo]...)
			tailFrom, tailTo = from, len(b)
			continue
		}
		tailFrom = len(b)
		b = append(b, `,"success":`...)
		b = strconv.AppendBool(b, r.Success)
		b = append(b, `,"error":`...)
		if r.Error != "" {
			b = appendJSONString(b, r.Error)
		} else {
			b = append(b, "null"...)
		}
		if r.QueueName != "" {
			b = append(b, `,"queueName":`...)
			b = appendJSONString(b, r.QueueName)
		}
		if r.PartitionName != "" {
			b = append(b, `,"partitionName":`...)
			b = appendJSONString(b, r.PartitionName)
		}
		b = append(b, `,"leaseReleased":`...)
		b = strconv.AppendBool(b, r.LeaseReleased)
		b = append(b, `,"dlq":`...)
		b = strconv.AppendBool(b, r.DLQ)
		b = append(b, '}')
		tailTo = len(b)
	}
	return append(b, ']')
}

func (s *Server) extendLease(ctx *fasthttp.RequestCtx) {
	raw, _ := ctx.UserValue("leaseId").(string)
	id, err := uuid.Parse(raw)
	if err != nil {
		writeErr(ctx, fasthttp.StatusBadRequest, "leaseId must be a UUID")
		return
	}
	var a struct {
		Seconds *int `json:"seconds"`
	}
	if !s.readObject(ctx, &a) {
		return
	}
	secs := 60
	if a.Seconds != nil {
		if *a.Seconds < 1 || *a.Seconds > 86400 {
			writeErr(ctx, fasthttp.StatusBadRequest, "seconds must be 1..86400")
			return
		}
		secs = *a.Seconds
	}
	c, cancel := s.dbCtx()
	defer cancel()
	exp, msg, err := s.deps.Consumer.ExtendLease(c, id, secs)
	if err != nil {
		s.dbFail(ctx, "lease extend", err)
		return
	}
	r := map[string]any{"index": 0, "leaseId": id.String(), "success": msg == "", "error": nil, "expiresAt": nil}
	if msg != "" {
		r["error"] = msg
	} else {
		r["expiresAt"] = exp.UTC().Format(time.RFC3339Nano)
	}
	writeJSON(ctx, fasthttp.StatusOK, []any{r})
}

func (s *Server) getPopMaintenance(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"popMaintenanceMode": s.deps.Maintenance.PopMaintenance(),
		"message": popMaintenanceMessage(s.deps.Maintenance.PopMaintenance())})
}

func popMaintenanceMessage(on bool) string {
	if on {
		return "pop maintenance mode enabled: pops answer 204"
	}
	return "pop maintenance mode disabled"
}

func (s *Server) postPopMaintenance(ctx *fasthttp.RequestCtx) {
	enabled, ok := s.readEnabled(ctx)
	if !ok {
		return
	}
	c, cancel := s.dbCtx()
	defer cancel()
	if err := s.deps.Maintenance.SetPopMaintenance(c, enabled); err != nil {
		s.log.Warn("pop maintenance: could not persist the flag", "err", err)
	}
	s.getPopMaintenance(ctx)
}
