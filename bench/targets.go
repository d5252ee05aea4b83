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
}

var (
	metricMsgPerSec = targetMetric{"msg/s", func(r *ScenarioResult) float64 { return r.MsgPerSec },
		func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }}
	metricP99 = targetMetric{"p99 ms", func(r *ScenarioResult) float64 { return r.Latency.P99ms },
		func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }}
	metricCPU = targetMetric{"total CPU µs/msg", func(r *ScenarioResult) float64 { return r.CPUPerMsgUs },
		func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }}
	// The RSS target is in MB (10^6 bytes), the table's column in MiB:
	// both are shown.
	metricRSS = targetMetric{"broker peak RSS", func(r *ScenarioResult) float64 { return float64(r.BrokerPeakRSSBytes) },
		func(v float64) string { return fmt.Sprintf("%.1f MB (%.1f MiB)", v/1e6, v/(1<<20)) }}
	metricBeyond = targetMetric{"beyond payload B/msg", func(r *ScenarioResult) float64 { return r.OverheadPerMsg },
		func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }}
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
// and 64 × 1, PostgreSQL's bytes per message beyond the payload at 8 × 100,
// the pop and fan-out rates, and the broker's peak RSS in every one of
// these rows. The fan-out target names five groups each reading
// everything; it is checked with acks and with autoAck.
var Targets = func() []Target {
	rss := func(sc string) Target { return Target{Scenario: sc, Metric: metricRSS, Max: true, Value: 64e6} }
	atLeast := func(sc string, v float64) Target { return Target{Scenario: sc, Metric: metricMsgPerSec, Value: v} }
	atMost := func(sc string, m targetMetric, v float64) Target {
		return Target{Scenario: sc, Metric: m, Max: true, Value: v}
	}
	return []Target{
		atLeast("push-8x100-p10", 100_000), atMost("push-8x100-p10", metricP99, 100),
		atMost("push-8x100-p10", metricCPU, 8), atMost("push-8x100-p10", metricBeyond, 64), rss("push-8x100-p10"),
		atLeast("push-50x100-p1001", 100_000), atMost("push-50x100-p1001", metricP99, 200), rss("push-50x100-p1001"),
		atLeast("push-50x10-p1001", 80_000), rss("push-50x10-p1001"),
		atLeast("push-64x1-p10", 25_000), atMost("push-64x1-p10", metricP99, 30),
		atMost("push-64x1-p10", metricCPU, 40), rss("push-64x1-p10"),
		atLeast("push-16x100-p10000", 100_000), rss("push-16x100-p10000"),
		atLeast("pop-c10-b100", 150_000), rss("pop-c10-b100"),
		atLeast("fanout-g5-c2-b100", 250_000), rss("fanout-g5-c2-b100"),
		atLeast("fanout-g5-c2-b100-autoack", 250_000), rss("fanout-g5-c2-b100-autoack"),
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
		"**%d of %d met**. A row that failed, or ran on a non-durable PostgreSQL, meets none.\n\n", met, checks)
	writeTable(b, []string{"scenario", "ids", "figure", "target", "this row", "met", "runs meeting it", "range over runs"}, rows)
}

// targetRow is the targets table's row of target t for the scenario of
// group g; met is counted up when g's representative run meets it.
func targetRow(t Target, g *runGroup, met *int) []string {
	figure, verdict := "failed", "no"
	if g.rep.OK() {
		v := t.Metric.value(g.rep)
		figure = t.Metric.show(v)
		switch {
		case !g.rep.Durable:
			verdict = "no (non-durable)"
		case t.met(v):
			verdict = "yes"
			*met++
		}
	}
	meeting := 0
	for _, r := range g.runs {
		if r.OK() && r.Durable && t.met(t.Metric.value(r)) {
			meeting++
		}
	}
	rng := "–"
	if lo, hi, ok := spread(g.runs, t.Metric.value); ok && len(g.runs) > 1 {
		rng = t.Metric.show(lo) + " – " + t.Metric.show(hi)
	}
	return []string{g.name, g.rep.Scenario.TxIDs, t.Metric.name, t.bound(), figure, verdict,
		fmt.Sprintf("%d of %d", meeting, len(g.runs)), rng}
}
