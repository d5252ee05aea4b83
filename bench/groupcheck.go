package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// delivery is one message of the run as one consumer group received it.
type delivery struct {
	// producer is the producer of the message's transactionId, -1 when the
	// id carries the run's prefix but does not parse.
	producer int32
	// part is the index of the partition the broker delivered it from, -1
	// for a partition name the run does not use.
	part int32
	// badPayload: the data is not the payload the item was sent with.
	badPayload bool
	seq        int64
	offset     int64
}

// examine turns one popped message into a delivery for a run whose items
// ids identifies, with payloads made as shape says. sent is the send time the payload
// carries, noStamp when its payload is wrong; ours is false for a message
// of another run. scratch is reused between calls.
func examine(ids itemIDs, shape payloadShape, txid, partition string, offset int64, data []byte, scratch *[]byte) (d delivery, sent int64, ours bool) {
	p, seq, ours, ok := ids.identify(txid, data)
	if !ours {
		return delivery{}, noStamp, false
	}
	d = delivery{producer: -1, part: int32(parsePartition(partition)), seq: int64(seq), offset: offset}
	if !ok {
		d.badPayload = true
		return d, noStamp, true
	}
	d.producer = int32(p)
	// The stamp sits right after a prefix known from the item's id;
	// with it the whole payload can be rebuilt and compared.
	pre := appendPayloadPrefix((*scratch)[:0], p, seq, true)
	*scratch = pre
	sent = noStamp
	if bytes.HasPrefix(data, pre) && len(data) >= len(pre)+stampWidth {
		if t, ok := parseStamp(data[len(pre) : len(pre)+stampWidth]); ok {
			sent = t
		}
	}
	if sent == noStamp {
		d.badPayload = true
		return d, noStamp, true
	}
	want := appendPayload((*scratch)[:0], p, seq, shape, sent)
	*scratch = want
	if !bytes.Equal(data, want) {
		d.badPayload = true
		return d, noStamp, true
	}
	return d, sent, true
}

// group is one consumer group while the run goes on: what its consumers
// received, in the order they received it, and how much of what the
// producers had answered queued or buffered it still lacks.
type group struct {
	name  string          // consumerGroup parameter, "" in queue mode
	label string          // name in the report
	sent  []*atomic.Int64 // per producer: items it has started to send

	mu sync.Mutex
	// deliveries, in the order received, in chunks of deliveryChunk that
	// are never copied while the run goes on (all joins them).
	deliveries [][]delivery
	seen       [][]uint8 // [producer][seq] deliveries, saturating
	last       time.Time // latest delivery
	ledger     *Ledger   // set when the producers are done
	remaining  int       // expected items not yet delivered, once ledger is set
}

func newGroup(name string, sent []*atomic.Int64) *group {
	label := name
	if name == "" {
		label = queueModeLabel
	}
	return &group{name: name, label: label, sent: sent, seen: make([][]uint8, len(sent))}
}

// deliveryChunk is how many deliveries one chunk of group.deliveries
// holds (2 MiB). One growing slice copied everything received so far each
// time it doubled: a quarter of the bench's own CPU in a fan-out drain of
// 1.4 M deliveries a group, on the cores the broker and PostgreSQL share.
const deliveryChunk = 1 << 16

// record adds the deliveries of one pop, received at.
func (g *group) record(ds []delivery, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for rest := ds; len(rest) > 0; {
		n := len(g.deliveries)
		if n == 0 || len(g.deliveries[n-1]) == deliveryChunk {
			g.deliveries = append(g.deliveries, make([]delivery, 0, deliveryChunk))
			n++
		}
		last := g.deliveries[n-1]
		k := min(len(rest), deliveryChunk-len(last))
		g.deliveries[n-1] = append(last, rest[:k]...)
		rest = rest[k:]
	}
	if len(ds) > 0 && at.After(g.last) {
		g.last = at
	}
	for _, d := range ds {
		p := int(d.producer)
		// A seq the producer has not started to send is left to the check
		// (never sent); it must not size the table.
		if p < 0 || p >= len(g.seen) || d.seq >= g.sent[p].Load() {
			continue
		}
		s := g.seen[p]
		if int64(len(s)) <= d.seq {
			s = append(s, make([]uint8, int(d.seq)+1-len(s))...)
			g.seen[p] = s
		}
		if s[d.seq] == 0 && g.ledger != nil && g.ledger.expected(p, int(d.seq)) {
			g.remaining--
		}
		if s[d.seq] < 255 {
			s[d.seq]++
		}
	}
}

// all is every delivery the group received, in order, in one slice.
func (g *group) all() []delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Concat(g.deliveries...)
}

// producersDone hands the group the final ledger, after which complete
// can become true.
func (g *group) producersDone(l *Ledger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ledger = l
	g.remaining = 0
	for p, outs := range l.Outcomes {
		for seq := range outs {
			if l.expected(p, seq) && (seq >= len(g.seen[p]) || g.seen[p][seq] == 0) {
				g.remaining++
			}
		}
	}
}

// complete reports whether the producers are done and the group has
// received every item they had answered queued or buffered.
func (g *group) complete() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ledger != nil && g.remaining == 0
}

// GroupCheck is what one consumer group received, checked against the
// ledger. The counts are of items of the run.
type GroupCheck struct {
	Group string `json:"group"`
	// Expected is the number of items answered queued or buffered.
	Expected int `json:"expected"`
	// Delivered is the number of deliveries of the run's messages,
	// repeats included; Distinct the items delivered at least once.
	Delivered int `json:"delivered"`
	Distinct  int `json:"distinct"`
	// UnknownConsumed is how many items without an answer (request
	// errors) or answered duplicate were delivered anyway; not a problem.
	UnknownConsumed int `json:"unknown_consumed"`
	// ByOffset: order was checked in offset order, not arrival order
	// (autoAck with several consumers in a group, where arrival order
	// across consumers is not defined).
	ByOffset bool `json:"by_offset,omitempty"`

	Missing         int `json:"missing"`          // answered queued/buffered, never delivered
	Duplicates      int `json:"duplicates"`       // delivered more than once
	OutOfOrder      int `json:"out_of_order"`     // producer order broken in a partition
	FailedConsumed  int `json:"failed_consumed"`  // answered failed, delivered
	WrongPartition  int `json:"wrong_partition"`  // delivered from another partition
	PayloadMismatch int `json:"payload_mismatch"` // data is not the payload sent
	NeverSent       int `json:"never_sent"`       // run's id, but no such item sent
	// AckFailed is the messages whose ack/batch was not confirmed (request
	// error or success false); filled in by Run.
	AckFailed int `json:"ack_failed"`

	// Problems describes up to maxProblemLines problems, one per line.
	Problems []string `json:"problems,omitempty"`
}

func (c *GroupCheck) problemCount() int {
	return c.Missing + c.Duplicates + c.OutOfOrder + c.FailedConsumed + c.WrongPartition +
		c.PayloadMismatch + c.NeverSent + c.AckFailed
}

// OK reports whether no problem was found.
func (c *GroupCheck) OK() bool { return c.problemCount() == 0 }

func (c *GroupCheck) problem(counter *int, format string, a ...any) {
	*counter++
	if len(c.Problems) < maxProblemLines {
		c.Problems = append(c.Problems, fmt.Sprintf(format, a...))
	}
}

func (c *GroupCheck) writeText(w io.Writer) {
	order := "arrival order"
	if c.ByOffset {
		order = "offset order"
	}
	if c.OK() {
		fmt.Fprintf(w, "consume verify %s: OK all %d expected delivered exactly once, producer order kept (%s); delivered %d (unanswered but delivered %d)\n",
			c.Group, c.Expected, order, c.Delivered, c.UnknownConsumed)
		return
	}
	fmt.Fprintf(w, "consume verify %s: FAILED expected=%d distinct=%d delivered=%d (order checked in %s)\n",
		c.Group, c.Expected, c.Distinct, c.Delivered, order)
	writeProblems(w, []problemKind{
		{c.Missing, "answered queued/buffered but never delivered"},
		{c.Duplicates, "delivered more than once"},
		{c.OutOfOrder, "delivered out of producer order"},
		{c.FailedConsumed, "answered failed but delivered"},
		{c.WrongPartition, "delivered from the wrong partition"},
		{c.PayloadMismatch, "delivered with a different payload"},
		{c.NeverSent, "delivered with this run's id but never sent"},
		{c.AckFailed, "popped but their ack was not confirmed"},
	}, c.Problems)
}

// checkGroup checks one group's deliveries, in the order the group
// received them, against the ledger: every item answered queued or
// buffered delivered exactly once, nothing answered failed or never sent
// delivered, each message from its partition with its payload, and within
// each partition each producer's sequence numbers increasing. With
// byOffset the order is taken from the partition offsets instead of the
// arrival order. A repeated delivery counts as a duplicate only, not also
// as out of order.
func checkGroup(name string, l *Ledger, ds []delivery, byOffset bool) *GroupCheck {
	c := &GroupCheck{Group: name, ByOffset: byOffset, Delivered: len(ds)}
	seen := make([][]uint8, len(l.Outcomes))
	for p := range l.Outcomes {
		seen[p] = make([]uint8, len(l.Outcomes[p]))
	}
	idx := make([]int, len(ds))
	for i := range idx {
		idx[i] = i
	}
	if byOffset {
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Or(cmp.Compare(ds[a].part, ds[b].part), cmp.Compare(ds[a].offset, ds[b].offset))
		})
	}
	type lastKey struct{ part, producer int32 }
	last := make(map[lastKey][2]int64) // → seq, offset of the producer's previous delivery there
	var part []byte
	for _, i := range idx {
		d := &ds[i]
		p, seq := int(d.producer), int(d.seq)
		if p < 0 || p >= len(l.Outcomes) || seq >= len(l.Outcomes[p]) {
			c.problem(&c.NeverSent, "p%d offset %d: producer %d seq %d was never sent", d.part, d.offset, d.producer, d.seq)
			continue
		}
		txid := txidString{l.RunID, p, seq}
		if seen[p][seq] < 255 {
			seen[p][seq]++
		}
		if seen[p][seq] > 1 {
			continue // a repeat: counted below, not an order problem
		}
		if want := l.partitionOf(p, seq); int(d.part) != want {
			part = appendPartition(part[:0], want)
			c.problem(&c.WrongPartition, "%s (sent to %s) delivered from partition index %d offset %d", txid, part, d.part, d.offset)
		}
		if d.badPayload {
			c.problem(&c.PayloadMismatch, "%s offset %d: data is not the payload sent", txid, d.offset)
		}
		k := lastKey{d.part, d.producer}
		if prev, ok := last[k]; ok && d.seq <= prev[0] {
			c.problem(&c.OutOfOrder, "p%d: producer %d seq %d (offset %d) delivered after seq %d (offset %d)",
				d.part, p, seq, d.offset, prev[0], prev[1])
		}
		last[k] = [2]int64{d.seq, d.offset}
	}
	for p, outs := range l.Outcomes {
		for seq, o := range outs {
			n := int(seen[p][seq])
			if n > 0 {
				c.Distinct++
			}
			txid := txidString{l.RunID, p, seq}
			if n > 1 {
				c.problem(&c.Duplicates, "%s (answered %s) delivered %d times", txid, o, n)
			}
			switch o {
			case Queued, Buffered:
				c.Expected++
				if n == 0 {
					c.problem(&c.Missing, "%s answered %s, never delivered", txid, o)
				}
			case Failed:
				if n > 0 {
					c.problem(&c.FailedConsumed, "%s answered failed, delivered", txid)
				}
			case Unknown, Duplicate:
				if n > 0 {
					c.UnknownConsumed++
				}
			}
		}
	}
	return c
}
