package bench

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MarkdownOptions shape the published report.
type MarkdownOptions struct {
	// Note, when set, is printed first, as a quoted warning (for example
	// that the figures come from a loaded machine).
	Note string
	// Command is how the report was made, printed with it.
	Command string
	// Plots are linked from the report, their paths relative to RelTo
	// (the report's directory).
	Plots []Plot
	RelTo string
}

// WriteMarkdown writes the report of a bench run: the machine, the
// commit, PostgreSQL's version and settings, one table with a row per
// scenario (a scenario that ran more than once shows its run of the
// median msg/s, and the range over its runs follows), the split of a
// push's time, the rows against the project's Targets, and the plots.
func WriteMarkdown(w io.Writer, results []*ScenarioResult, o MarkdownOptions) error {
	var b bytes.Buffer
	b.WriteString("# Benchmarks\n\n")
	if o.Note != "" {
		fmt.Fprintf(&b, "> **%s**\n\n", strings.TrimSpace(o.Note))
	}
	if len(results) == 0 {
		b.WriteString("No scenario ran.\n")
		_, err := w.Write(b.Bytes())
		return err
	}
	groups := groupRuns(results)
	first := results[0]
	durable := true
	for _, r := range results {
		durable = durable && r.Durable
	}
	fmt.Fprintf(&b, "Made with `%s`", o.Command)
	fmt.Fprintf(&b, ", started %s, %s of pushes per scenario (the prefill, for pop and fan-out), %d-byte payloads.\n\n",
		first.Started.Format("2006-01-02 15:04 UTC"), secs(first.DurationSec), first.PayloadBytes)
	b.WriteString("A payload is a JSON object padded with 'x' bytes, which compress about tenfold in a segment of many; rows " +
		"ending -random pad with random base64url characters instead, which do not compress, so PostgreSQL receives, logs " +
		"and stores nearly every byte: the cost for payloads that are already compressed (a lower bound for encrypted ones).\n\n")
	if !durable {
		b.WriteString("**Some rows ran on a non-durable PostgreSQL (fsync, full_page_writes or synchronous_commit off); they are marked non-durable and are not headline figures.**\n\n")
	}

	b.WriteString("## Setup\n\n")
	m := first.Machine
	commit := first.Commit.Hash
	if commit == "" {
		commit = "unknown"
	}
	if first.Commit.Dirty {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(&b, "- Commit: `%s`\n", commit)
	fmt.Fprintf(&b, "- CPU: %s, %d logical cores; memory %.1f GiB; kernel %s; %s\n", orUnknown(m.CPUModel), m.Cores,
		float64(m.MemBytes)/(1<<30), orUnknown(m.Kernel), m.GoVersion)
	if m.DataFS != "" {
		fmt.Fprintf(&b, "- PostgreSQL data and broker WAL on: `%s`\n", m.DataFS)
	}
	if m.Disks != "" {
		b.WriteString("- Block devices (lsblk NAME MODEL ROTA TYPE SIZE TRAN):\n\n")
		for _, line := range strings.Split(m.Disks, "\n") {
			fmt.Fprintf(&b, "      %s\n", line)
		}
		b.WriteString("\n")
	}
	lo, hi := m.LoadAvg, m.LoadAvg
	for _, r := range results {
		lo, hi = min(lo, r.Machine.LoadAvg), max(hi, r.Machine.LoadAvg)
	}
	fmt.Fprintf(&b, "- 1-minute load average at the start of each scenario: %.2f–%.2f\n", lo, hi)
	fmt.Fprintf(&b, "- PostgreSQL %s:", orUnknown(first.PG.Version))
	names := make([]string, 0, len(first.PG.Settings))
	for k := range first.PG.Settings {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return slices.Index(pgSettingNames, a) - slices.Index(pgSettingNames, b) })
	for i, k := range names {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s=%s", sep, k, first.PG.Settings[k])
	}
	b.WriteString("\n\n")
	b.WriteString(methodText)

	b.WriteString("\n## Results\n\n")
	header := []string{"scenario", "ids", "conns", "msg/s", "queued", "buffered", "dup/failed/err",
		"p50 ms", "p99 ms", "p99.9 ms", "peak backlog", "catch-up s", "broker RSS MiB",
		"broker µs/msg", "PG µs/msg", "total µs/msg", "segments B/msg", "dedup B/msg", "beyond payload B/msg", "verify"}
	var rows [][]string
	for _, g := range groups {
		rows = append(rows, markdownRow(g.rep))
	}
	writeTable(&b, header, rows)
	b.WriteString("\nPush rows: msg/s is accepted items per second; latency is per push request. " +
		"Pop and fan-out rows: msg/s is deliveries per second (all groups) while draining a pre-filled queue, " +
		"latency is per pop, CPU is per delivery, and the queued/buffered counts are of the prefill. " +
		"Stream rows: msg/s is source events per second through pop → state/get → map → tumbling window → cycle " +
		"(state upsert, sink push of closed windows, ack), latency is per cycle, CPU is per event and includes the pushes " +
		"of the events. Rows ending -new or -existing push to a queue pre-built with that many partitions, " +
		"to fresh partitions (every item creates one) or to the pre-built ones.\n")
	writeRepeatsTable(&b, groups)
	writePipelineTable(&b, representatives(groups))
	var failed []*ScenarioResult
	for _, r := range results {
		if !r.OK() {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		b.WriteString("\n### Failed scenarios\n\n")
		for _, r := range failed {
			fmt.Fprintf(&b, "- `%s`: %s\n", r.Scenario.Name, failure(r))
		}
	}
	writeTargetsTable(&b, groups)
	if len(o.Plots) > 0 {
		b.WriteString("\n## Plots\n\n")
		for _, p := range o.Plots {
			rel := p.Path
			if o.RelTo != "" {
				if r, err := filepath.Rel(o.RelTo, p.Path); err == nil {
					rel = r
				}
			}
			fmt.Fprintf(&b, "![%s](%s)\n\n", p.Title, filepath.ToSlash(rel))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

const methodText = `How each row is made (queen-bench, see README.md):

- Every scenario gets a fresh PostgreSQL cluster (initdb, durable settings unless marked otherwise) and a fresh
  broker with an empty WAL directory, run as a child process of the bench on the same host.
- Producers are closed-loop, one push in flight per connection; push rows run once with a client transactionId on
  every item ("client", "<run>-<producer>-<seq>") and once without, the broker minting the id ("minted"); rows
  ending -uuid7 send client transactionIds as Queen's SDKs mint them, the lowercase text of a UUIDv7 made as the
  push is built ("uuid7").
- CPU is user + system time from /proc/<pid>/stat, sampled before and after the measured phase: the broker process,
  and the postmaster plus all its children (backends that exit during the run are counted through the
  postmaster's cutime/cstime). For push rows the phase ends when the projector has every accepted item in
  PostgreSQL, so projection CPU is included.
- Broker RSS is VmHWM, the broker's peak resident set over the scenario.
- Bytes per message are pg_total_relation_size of queen.segments and the dedup sidecar (queen.dedup_batches and queen.dedup, with indexes and TOAST) divided
  by the messages stored; "beyond payload" subtracts the payload size (negative when compression saves more).
- Peak backlog is the largest projector backlog (WAL records not yet in PostgreSQL) sampled during the pushes;
  catch-up is how long the projector needed after the last answer. Together with the buffered count they show a
  projector falling behind.
- Every row is verified: each item answered queued or buffered is stored exactly once, in producer order, with its
  payload; with consumers, every group received every item exactly once.
`

func markdownRow(r *ScenarioResult) []string {
	s := r.Scenario
	name := s.Name
	if !r.Durable {
		name += " (non-durable)"
	}
	f0 := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	pgCPU, total := f1(r.PGCPUPerMsgUs), f1(r.CPUPerMsgUs)
	if !r.PGCPUMeasured {
		pgCPU, total = "n/a", "n/a"
	}
	verdict := "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	return []string{
		name, s.TxIDs, strconv.Itoa(s.Connections()), f0(r.MsgPerSec),
		strconv.FormatInt(r.Status.Queued, 10), strconv.FormatInt(r.Status.Buffered, 10),
		fmt.Sprintf("%d/%d/%d", r.Status.Duplicate, r.Status.Failed, r.PushErrors),
		f1(r.Latency.P50ms), f1(r.Latency.P99ms), f1(r.Latency.P999ms),
		strconv.FormatInt(r.PeakBacklog, 10), f2(r.CatchUpSec), f1(float64(r.BrokerPeakRSSBytes) / (1 << 20)),
		f1(r.BrokerCPUPerMsgUs), pgCPU, total,
		f0(r.SegmentsPerMsg), f0(r.DedupPerMsg), f0(r.OverheadPerMsg), verdict,
	}
}

// writeRepeatsTable writes, when a scenario ran more than once (queen-bench
// -repeat), each such scenario's runs: how many verified, and the range of
// msg/s, total CPU per message, p99 and peak RSS over the verified ones.
// The table above shows one whole run of each (runGroup.rep).
func writeRepeatsTable(b *bytes.Buffer, groups []*runGroup) {
	var rows [][]string
	for _, g := range groups {
		if len(g.runs) < 2 {
			continue
		}
		row := []string{g.name, g.rep.Scenario.TxIDs, fmt.Sprintf("%d of %d", g.okRuns(), len(g.runs))}
		for _, m := range repeatedFigures {
			row = append(row, g.rangeOf(m))
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### Repeated runs\n\n" +
		"Scenarios run more than once (`queen-bench -repeat`, in rounds: every scenario once, then again, so that " +
		"the machine's load over time falls on every row alike). The table above shows, for each, the whole run " +
		"of the median msg/s (a failed run instead, when one failed); here is the range over the verified runs.\n\n")
	header := []string{"scenario", "ids", "verified runs"}
	for _, m := range repeatedFigures {
		header = append(header, m.name)
	}
	writeTable(b, header, rows)
}

// repeatedFigures are the repeated runs table's columns after the runs.
var repeatedFigures = []targetMetric{metricMsgPerSec, metricCPU, metricP99, metricRSSMiB}

// writePipelineTable writes the push rows' split of a push's time and
// the projector's load (ScenarioResult.Pipeline), when any row has it.
func writePipelineTable(b *bytes.Buffer, results []*ScenarioResult) {
	var rows [][]string
	for _, r := range results {
		if p := r.Pipeline; p != nil {
			rows = append(rows, []string{r.Scenario.Name, r.Scenario.TxIDs,
				strconv.FormatFloat(p.PushWALMs, 'f', 2, 64), strconv.FormatFloat(p.PushProjectionMs, 'f', 2, 64),
				strconv.FormatFloat(p.BatchMs, 'f', 2, 64), strconv.FormatFloat(p.BatchItems, 'f', 0, 64),
				strconv.FormatFloat(p.ProjectorBusy*100, 'f', 0, 64)})
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### Where a push's time goes\n\n" +
		"From the broker's `/metrics` over each push row's measured phase (docs/operations.md): the mean time of a push " +
		"answered with verdicts from its body handed in to its record fsynced (wal) and from then to its verdicts " +
		"(projection), the mean committed projection transaction and its items, and the share of the phase the " +
		"projector spent in transactions. Near 100%, the one projector loop's transaction chain sets the row's rate.\n\n")
	writeTable(b, []string{"scenario", "ids", "wal ms", "projection ms", "transaction ms", "items/transaction", "projector busy %"}, rows)
}

func failure(r *ScenarioResult) string {
	if r.Error != "" {
		return r.Error
	}
	return strings.Join(r.Problems, "; ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func secs(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) + " s" }

// WriteText writes one scenario's figures as a two-column table, then its
// problems.
func (r *ScenarioResult) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "== %s", r.Scenario.Name)
	if !r.Durable {
		b.WriteString(" (non-durable PostgreSQL)")
	}
	b.WriteString("\n\n")
	row := markdownRow(r)
	header := []string{"scenario", "ids", "connections", "msg/s", "queued", "buffered", "duplicate/failed/errors",
		"latency p50 ms", "latency p99 ms", "latency p99.9 ms", "peak projector backlog (records)", "catch-up s", "broker peak RSS MiB",
		"broker CPU µs/msg", "PostgreSQL CPU µs/msg", "total CPU µs/msg", "segments B/msg", "dedup B/msg",
		"beyond payload B/msg", "verify"}
	rows := make([][]string, 0, len(header))
	for i := 1; i < len(header); i++ {
		rows = append(rows, []string{header[i], row[i]})
	}
	rows = append(rows, []string{"messages (per-message denominator)", strconv.FormatInt(r.Messages, 10)},
		[]string{"broker / PostgreSQL / bench CPU s", fmt.Sprintf("%.2f / %.2f / %.2f", r.BrokerCPUSec, r.PGCPUSec, r.ClientCPUSec)})
	if p := r.Pipeline; p != nil {
		rows = append(rows, []string{"push stages: wal / projection ms", fmt.Sprintf("%.2f / %.2f", p.PushWALMs, p.PushProjectionMs)},
			[]string{"projection transaction ms / items", fmt.Sprintf("%.2f / %.0f", p.BatchMs, p.BatchItems)},
			[]string{"projector busy %", fmt.Sprintf("%.0f", p.ProjectorBusy*100)})
	}
	writeTable(&b, []string{"metric", "value"}, rows)
	if r.Stream != nil {
		b.WriteByte('\n')
		r.Stream.writeText(&b)
	}
	if r.Partitions != nil {
		b.WriteByte('\n')
		r.Partitions.writeText(&b)
	}
	if !r.OK() {
		fmt.Fprintf(&b, "\nFAILED: %s\n", failure(r))
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}
