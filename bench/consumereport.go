package bench

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConsumeReport is what the consumers of a run received.
type ConsumeReport struct {
	ConsumersPerGroup int     `json:"consumers_per_group"`
	QueueMode         bool    `json:"queue_mode"`
	PopBatch          int     `json:"pop_batch"`
	AutoAck           bool    `json:"auto_ack"`
	DrainTimeoutSec   float64 `json:"drain_timeout_s"`
	// DrainSec is from the producers' end to the last consumer's stop.
	DrainSec float64 `json:"drain_s"`
	// Drained: every group had every item answered queued or buffered
	// when the consumers stopped.
	Drained bool `json:"drained"`
	// ConsumeSec is from the run's start to the last delivery of any group.
	ConsumeSec float64 `json:"consume_s"`
	// Delivered is the deliveries of the run's messages, all groups,
	// repeats included.
	Delivered int64   `json:"delivered"`
	MsgPerSec float64 `json:"msg_per_s"` // Delivered / ConsumeSec

	Pops      int64 `json:"pops"`       // pop requests
	PopEmpty  int64 `json:"pop_empty"`  // answered 204
	PopErrors int64 `json:"pop_errors"` // without a usable answer
	Acks      int64 `json:"acks"`       // ack/batch requests
	AckErrors int64 `json:"ack_errors"` // ack requests without a usable answer
	AckFailed int64 `json:"ack_failed"` // messages whose ack was not confirmed
	// Foreign is the messages of other runs received (and acked).
	Foreign int64 `json:"foreign,omitempty"`

	// PopLatency is of pops that delivered messages (request written →
	// response read, long-poll wait included).
	PopLatency LatencySummary `json:"pop_latency"`
	// E2ELatency is per delivered message of all groups: the time its pop
	// answer was read minus the time its push was sent (same host clock).
	E2ELatency LatencySummary `json:"e2e_latency"`

	Groups       []GroupReport    `json:"groups"`
	ErrorSamples map[string]int64 `json:"error_samples,omitempty"`
}

// GroupReport is one consumer group's share of a ConsumeReport.
type GroupReport struct {
	Name      string `json:"name"`
	Delivered int64  `json:"delivered"`
	// ConsumeSec is from the run's start to the group's last delivery.
	ConsumeSec float64        `json:"consume_s"`
	MsgPerSec  float64        `json:"msg_per_s"`
	E2ELatency LatencySummary `json:"e2e_latency"`
	Check      *GroupCheck    `json:"check"`
}

// OK reports whether every group's check found no problem.
func (c *ConsumeReport) OK() bool {
	for _, g := range c.Groups {
		if !g.Check.OK() {
			return false
		}
	}
	return true
}

// report checks every group against the final ledger and sums up; call
// after producersDone.
func (cr *consumeRun) report(l *Ledger) *ConsumeReport {
	cfg := cr.cfg
	r := &ConsumeReport{
		ConsumersPerGroup: cfg.Consumers, QueueMode: cfg.QueueMode, PopBatch: cfg.PopBatch, AutoAck: cfg.AutoAck,
		DrainTimeoutSec: cfg.DrainTimeout.Seconds(), DrainSec: time.Since(cr.doneAt).Seconds(), Drained: true,
	}
	// With autoAck nothing holds a partition between two pops of one group,
	// so two consumers' answers may arrive in either order.
	byOffset := cfg.AutoAck && cfg.Consumers > 1
	var all consumeCounts
	var pop, e2e Latency
	var last time.Time
	for _, g := range cr.groups {
		var gc consumeCounts
		var ge Latency
		for _, c := range cr.consumers {
			if c.g == g {
				gc.merge(&c.counts)
				ge.Merge(&c.e2e)
				pop.Merge(&c.popLat)
			}
		}
		all.merge(&gc)
		e2e.Merge(&ge)
		check := checkGroup(g.label, l, g.all(), byOffset)
		check.AckFailed = int(gc.ackFailed)
		if !g.complete() {
			r.Drained = false
		}
		gr := GroupReport{Name: g.label, Delivered: gc.delivered, E2ELatency: ge.Summary(), Check: check}
		if !g.last.IsZero() {
			gr.ConsumeSec = g.last.Sub(cr.start).Seconds()
			gr.MsgPerSec = float64(gr.Delivered) / gr.ConsumeSec
			if g.last.After(last) {
				last = g.last
			}
		}
		r.Groups = append(r.Groups, gr)
	}
	r.Delivered = all.delivered
	if !last.IsZero() {
		r.ConsumeSec = last.Sub(cr.start).Seconds()
		r.MsgPerSec = float64(r.Delivered) / r.ConsumeSec
	}
	r.Pops, r.PopEmpty, r.PopErrors = all.pops, all.popEmpty, all.popErrors
	r.Acks, r.AckErrors, r.AckFailed = all.acks, all.ackErrors, all.ackFailed
	r.Foreign = all.foreign
	r.ErrorSamples = all.errSamples
	r.PopLatency = pop.Summary()
	r.E2ELatency = e2e.Summary()
	return r
}

func msCell(v float64) string { return fmt.Sprintf("%.3f ms", v) }

func (c *ConsumeReport) writeTables(b *bytes.Buffer) {
	names := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		names[i] = g.Name
	}
	ack := "ack/batch"
	if c.AutoAck {
		ack = "autoAck"
	}
	fmt.Fprintf(b, "consumers: %d per group × %d group(s) [%s], pop batch %d, %s, drain timeout %s\n\n",
		c.ConsumersPerGroup, len(c.Groups), strings.Join(names, ", "), c.PopBatch, ack,
		time.Duration(c.DrainTimeoutSec*float64(time.Second)))
	drained := "everything"
	if !c.Drained {
		drained = "INCOMPLETE"
	}
	rows := [][]string{
		{"consumed (all groups)", strconv.FormatInt(c.Delivered, 10)},
		{"consume msg/s (all groups)", fmt.Sprintf("%.0f", c.MsgPerSec)},
		{"consume time", fmt.Sprintf("%.2f s", c.ConsumeSec)},
		{"drain time", fmt.Sprintf("%.2f s (%s)", c.DrainSec, drained)},
		{"pops (total / empty / errors)", fmt.Sprintf("%d / %d / %d", c.Pops, c.PopEmpty, c.PopErrors)},
		{"acks (requests / errors / msgs unconfirmed)", fmt.Sprintf("%d / %d / %d", c.Acks, c.AckErrors, c.AckFailed)},
		{"pop latency p50", msCell(c.PopLatency.P50ms)},
		{"pop latency p90", msCell(c.PopLatency.P90ms)},
		{"pop latency p99", msCell(c.PopLatency.P99ms)},
		{"pop latency p99.9", msCell(c.PopLatency.P999ms)},
		{"pop latency max", msCell(c.PopLatency.MaxMs)},
		{"e2e latency p50", msCell(c.E2ELatency.P50ms)},
		{"e2e latency p90", msCell(c.E2ELatency.P90ms)},
		{"e2e latency p99", msCell(c.E2ELatency.P99ms)},
		{"e2e latency p99.9", msCell(c.E2ELatency.P999ms)},
		{"e2e latency max", msCell(c.E2ELatency.MaxMs)},
	}
	if c.Foreign > 0 {
		rows = append(rows, []string{"other runs' messages (acked)", strconv.FormatInt(c.Foreign, 10)})
	}
	writeTable(b, []string{"consumer metric", "value"}, rows)

	b.WriteByte('\n')
	rows = rows[:0]
	for _, g := range c.Groups {
		verdict := "OK"
		if !g.Check.OK() {
			verdict = fmt.Sprintf("FAILED (%d)", g.Check.problemCount())
		}
		rows = append(rows, []string{g.Name, strconv.FormatInt(g.Delivered, 10), strconv.Itoa(g.Check.Distinct),
			strconv.Itoa(g.Check.Expected), fmt.Sprintf("%.0f", g.MsgPerSec),
			msCell(g.E2ELatency.P50ms), msCell(g.E2ELatency.P99ms), msCell(g.E2ELatency.MaxMs), verdict})
	}
	writeTable(b, []string{"group", "consumed", "distinct", "expected", "msg/s", "e2e p50", "e2e p99", "e2e max", "check"}, rows)
}

func (c *ConsumeReport) writeVerify(b *bytes.Buffer) {
	for _, g := range c.Groups {
		g.Check.writeText(b)
	}
}
