package bench

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
)

// targetMetric is a figure of a scenario run that a target bounds.
type targetMetric struct {
	name  string
	value func(*ScenarioResult) float64
	// show formats a value of the figure (the target's bound too).
	show func(float64) string
	// measured, when set, reports whether a run measured the figure.
	measured func(*ScenarioResult) bool
	// queuedOnly: a push run with answers buffered does not meet a target
	// on the figure (a rate must hold with queued verdicts).
	queuedOnly bool
}

// known reports whether run r measured the figure.
func (m targetMetric) known(r *ScenarioResult) bool { return m.measured == nil || m.measured(r) }

var (
	metricMsgPerSec = targetMetric{name: "msg/s", value: func(r *ScenarioResult) float64 { return r.MsgPerSec },
		show: func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }, queuedOnly: true}
	metricP99 = targetMetric{name: "p99 ms", value: func(r *ScenarioResult) float64 { return r.Latency.P99ms },
		show: func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }}
	// Broker and PostgreSQL together: without PostgreSQL's CPU (an
	// external server without -pg-pid) the figure is not measured.
	metricCPU = targetMetric{name: "total CPU µs/msg", value: func(r *ScenarioResult) float64 { return r.CPUPerMsgUs },
		show:     func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		measured: func(r *ScenarioResult) bool { return r.PGCPUMeasured }}
	// The RSS target is in MB (10^6 bytes), the table's column in MiB:
	// both are shown.
	metricRSS = targetMetric{name: "broker peak RSS", value: func(r *ScenarioResult) float64 { return float64(r.BrokerPeakRSSBytes) },
		show: func(v float64) string { return fmt.Sprintf("%.1f MB (%.1f MiB)", v/1e6, v/(1<<20)) }}
	// metricRSSMiB is the peak RSS as the report's tables show it.
	metricRSSMiB = targetMetric{name: "broker RSS MiB", value: func(r *ScenarioResult) float64 { return float64(r.BrokerPeakRSSBytes) / (1 << 20) },
		show: func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }}
	metricBeyond = targetMetric{name: "beyond payload B/msg", value: func(r *ScenarioResult) float64 { return r.OverheadPerMsg },
		show: func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }}
)

// Target is one of the performance targets the project set for this
// broker on two cores, broker, PostgreSQL and load generator on one host,
// PostgreSQL durable: a bound on one figure of one scenario.
type Target struct {
	// Scenario is the scenario it holds for; for a push row, the name
	// without its ids suffix: every ids variant (minted, client, uuid7)
	// is held to it.
	Scenario string
	Metric   targetMetric
	// Max: the figure must be at most Value; otherwise at least Value.
	Max   bool
	Value float64
}

// Targets are the project's targets (docs/benchmarking.md, "Targets"): the
// push rows' rate, their p99 where one was set, CPU per message at 8 × 100
// and 64 × 1, PostgreSQL's bytes per message beyond the payload at 8 × 100
// (also with payloads that do not compress), the pop and fan-out rates,
// and the broker's peak RSS in every one of these rows. The fan-out target
// names five groups each reading everything, not how many consumers each
// group has nor how they confirm: it is checked with two consumers a
// group, with acks and with autoAck, and with ten a group with autoAck.
var Targets = func() []Target {
	rss := func(sc string) Target { return Target{Scenario: sc, Metric: metricRSS, Max: true, Value: 64e6} }
	atLeast := func(sc string, v float64) Target { return Target{Scenario: sc, Metric: metricMsgPerSec, Value: v} }
	atMost := func(sc string, m targetMetric, v float64) Target {
		return Target{Scenario: sc, Metric: m, Max: true, Value: v}
	}
	return []Target{
		atLeast("push-8x100-p10", 100_000), atMost("push-8x100-p10", metricP99, 100),
		atMost("push-8x100-p10", metricCPU, 8), atMost("push-8x100-p10", metricBeyond, 64), rss("push-8x100-p10"),
		// The bytes again with payloads that do not compress: with 'x'
		// pads the segments' compression leaves the figure below zero.
		atMost("push-8x100-p10-minted-random", metricBeyond, 64), atMost("push-8x100-p10-uuid7-random", metricBeyond, 64),
		atLeast("push-50x100-p1001", 100_000), atMost("push-50x100-p1001", metricP99, 200), rss("push-50x100-p1001"),
		atLeast("push-50x10-p1001", 80_000), rss("push-50x10-p1001"),
		atLeast("push-64x1-p10", 25_000), atMost("push-64x1-p10", metricP99, 30),
		atMost("push-64x1-p10", metricCPU, 40), rss("push-64x1-p10"),
		atLeast("push-16x100-p10000", 100_000), rss("push-16x100-p10000"),
		atLeast("pop-c10-b100", 150_000), rss("pop-c10-b100"),
		atLeast("fanout-g5-c2-b100", 250_000), rss("fanout-g5-c2-b100"),
		atLeast("fanout-g5-c2-b100-autoack", 250_000), rss("fanout-g5-c2-b100-autoack"),
		atLeast("fanout-g5-c10-b100-autoack", 250_000), rss("fanout-g5-c10-b100-autoack"),
	}
}()

// matches reports whether the target holds for scenario sc.
func (t Target) matches(sc Scenario) bool {
	return sc.Name == t.Scenario || (sc.TxIDs != "" && sc.Name == t.Scenario+"-"+sc.TxIDs)
}

// met reports whether v meets the target.
func (t Target) met(v float64) bool {
	if t.Max {
		return v <= t.Value
	}
	return v >= t.Value
}

func (t Target) bound() string {
	if t.Max {
		return "≤ " + t.Metric.show(t.Value)
	}
	return "≥ " + t.Metric.show(t.Value)
}

// writeTargetsTable writes, for every target and every scenario it holds
// for (by scenario: the targets' scenarios in their order, each ids
// variant in the order it first ran, then its targets in their order),
// the representative run's figure, whether it meets the target, and in
// how many of the scenario's runs it did, with the range over the
// verified ones. A run that failed, or ran on a non-durable PostgreSQL,
// meets nothing. Nothing is written when no result matches a target.
func writeTargetsTable(b *bytes.Buffer, groups []*runGroup) {
	var rows [][]string
	met, checks := 0, 0
	var scenarios []string // the targets' scenarios, in order, once each
	for _, t := range Targets {
		if !slices.Contains(scenarios, t.Scenario) {
			scenarios = append(scenarios, t.Scenario)
		}
	}
	for _, sc := range scenarios {
		for _, g := range groups {
			for _, t := range Targets {
				if t.Scenario != sc || !t.matches(g.rep.Scenario) {
					continue
				}
				rows = append(rows, targetRow(t, g, &met))
				checks++
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Against the targets\n\n")
	fmt.Fprintf(b, "The project's targets for two cores (docs/benchmarking.md, \"Targets\"), checked against each row above "+
		"(with repeated runs, the run of the median msg/s; the range is over every verified run): "+
		"**%d of %d met**. A row that failed, or ran on a non-durable PostgreSQL, meets none; a push row's rate "+
		"counts only when every answer was queued (none buffered).\n\n", met, checks)
	writeTable(b, []string{"scenario", "ids", "figure", "target", "this row", "met", "runs meeting it", "range over runs"}, rows)
}

// targetRow is the targets table's row of target t for the scenario of
// group g; met is counted up when g's representative run meets it.
func targetRow(t Target, g *runGroup, met *int) []string {
	figure, ok, why := t.judge(g.rep)
	verdict := "yes"
	switch {
	case ok:
		*met++
	case why != "":
		verdict = "no (" + why + ")"
	default:
		verdict = "no"
	}
	meeting := 0
	for _, r := range g.runs {
		if _, ok, _ := t.judge(r); ok {
			meeting++
		}
	}
	rng := "–" // the row's figure already says n/a
	if len(g.runs) > 1 && t.Metric.known(g.rep) {
		rng = g.rangeOf(t.Metric)
	}
	return []string{g.name, g.rep.Scenario.TxIDs, t.Metric.name, t.bound(), figure, verdict,
		fmt.Sprintf("%d of %d", meeting, len(g.runs)), rng}
}

// rangeOf is the range of figure m over g's verified runs as the tables
// show it: "lo – hi", "n/a" when g's representative run did not measure
// m, "–" when no run verified.
func (g *runGroup) rangeOf(m targetMetric) string {
	if !m.known(g.rep) {
		return "n/a"
	}
	lo, hi, ok := spread(g.runs, m.value)
	if !ok {
		return "–"
	}
	return m.show(lo) + " – " + m.show(hi)
}

// judge is run r's figure for target t as the table shows it and whether
// r meets t; why says what, besides the figure, keeps it from meeting t:
// a run that failed, a figure not measured (PostgreSQL's CPU of a server
// whose postmaster is unknown), a non-durable PostgreSQL, or, for a push
// row's rate, answers `buffered` (the rate must hold with queued
// verdicts: a projector that fell behind does not count).
func (t Target) judge(r *ScenarioResult) (figure string, ok bool, why string) {
	if !r.OK() {
		return "failed", false, ""
	}
	if !t.Metric.known(r) {
		return "n/a", false, "not measured"
	}
	v := t.Metric.value(r)
	figure = t.Metric.show(v)
	switch {
	case !r.Durable:
		return figure, false, "non-durable"
	case t.Metric.queuedOnly && r.Scenario.Kind == KindPush && r.Status.Buffered > 0:
		return figure, false, strconv.FormatInt(r.Status.Buffered, 10) + " buffered"
	}
	return figure, t.met(v), ""
}
