package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StatusCounts counts items by the status the broker answered.
type StatusCounts struct {
	Queued    int64 `json:"queued"`
	Duplicate int64 `json:"duplicate"`
	Buffered  int64 `json:"buffered"`
	Failed    int64 `json:"failed"`
}

// counts are the raw tallies of a run (per producer, then summed).
type counts struct {
	requests   int64 // requests sent, answered or not
	items      int64 // items sent
	outcomes   [numOutcomes]int64
	errors     int64 // requests without a usable answer
	errSamples map[string]int64
}

// maxErrSamples bounds the distinct error messages kept.
const maxErrSamples = 20

func (c *counts) addError(msg string) {
	c.errors++
	c.errSamples = addSample(c.errSamples, msg, 1)
}

// addSample adds n occurrences of error msg to m (allocated when nil),
// keeping at most maxErrSamples distinct messages.
func addSample(m map[string]int64, msg string, n int64) map[string]int64 {
	if m == nil {
		m = make(map[string]int64)
	}
	if _, ok := m[msg]; ok || len(m) < maxErrSamples {
		m[msg] += n
	}
	return m
}

func (c *counts) merge(o *counts) {
	c.requests += o.requests
	c.items += o.items
	for i := range c.outcomes {
		c.outcomes[i] += o.outcomes[i]
	}
	c.errors += o.errors
	for k, v := range o.errSamples {
		c.errSamples = addSample(c.errSamples, k, v)
	}
}

// Report is the result of a run.
type Report struct {
	RunID        string  `json:"run_id"`
	URL          string  `json:"url"`
	Queue        string  `json:"queue"`
	Producers    int     `json:"producers"`
	Batch        int     `json:"batch"`
	Partitions   int     `json:"partitions"`
	PayloadBytes int     `json:"payload_bytes"`
	DurationSec  float64 `json:"duration_s"` // configured
	WallSec      float64 `json:"wall_s"`     // measured, start to last answer

	Requests int64 `json:"requests"`
	Items    int64 `json:"items"`
	// Accepted is the items answered queued, duplicate or buffered.
	Accepted  int64          `json:"accepted"`
	MsgPerSec float64        `json:"msg_per_s"` // Accepted / WallSec
	ReqPerSec float64        `json:"req_per_s"` // Requests / WallSec
	Latency   LatencySummary `json:"latency"`   // requests answered 201 only
	Status    StatusCounts   `json:"status"`
	// Errors is the requests without a usable answer; ErrorItems their items.
	Errors       int64            `json:"errors"`
	ErrorItems   int64            `json:"error_items"`
	ErrorSamples map[string]int64 `json:"error_samples,omitempty"`

	// ClientPeakHeapBytes is the largest HeapAlloc sampled during the run.
	ClientPeakHeapBytes uint64 `json:"client_peak_heap_bytes"`
	BrokerPID           int    `json:"broker_pid,omitempty"`
	// BrokerPeakRSSBytes is the broker's VmHWM at the end of the run: its
	// peak resident set since the process started (not only this run).
	BrokerPeakRSSBytes int64  `json:"broker_peak_rss_bytes,omitempty"`
	BrokerRSSError     string `json:"broker_rss_error,omitempty"`

	// Consume is what the consumers received; nil without consumers.
	Consume *ConsumeReport `json:"consume,omitempty"`

	// Verify is set by the caller after Verify.
	Verify *VerifyResult `json:"verify,omitempty"`

	// Ledger is every item sent and its outcome, for Verify.
	Ledger *Ledger `json:"-"`
}

// newReport does the report's arithmetic.
func newReport(cfg Config, wall time.Duration, c *counts, lat *Latency) *Report {
	r := &Report{
		RunID: cfg.RunID, URL: cfg.URL, Queue: cfg.Queue,
		Producers: cfg.Producers, Batch: cfg.Batch, Partitions: cfg.Partitions,
		PayloadBytes: cfg.PayloadBytes, DurationSec: cfg.Duration.Seconds(), WallSec: wall.Seconds(),
		Requests: c.requests, Items: c.items,
		Latency: lat.Summary(),
		Status: StatusCounts{
			Queued: c.outcomes[Queued], Duplicate: c.outcomes[Duplicate],
			Buffered: c.outcomes[Buffered], Failed: c.outcomes[Failed],
		},
		Errors: c.errors, ErrorItems: c.outcomes[Unknown], ErrorSamples: c.errSamples,
	}
	r.Accepted = r.Status.Queued + r.Status.Duplicate + r.Status.Buffered
	if wall > 0 {
		r.MsgPerSec = float64(r.Accepted) / wall.Seconds()
		r.ReqPerSec = float64(r.Requests) / wall.Seconds()
	}
	return r
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// WriteText writes the report as a table, then error samples and the
// verification result when present.
func (r *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "queen-bench run %s: url=%s queue=%s producers=%d batch=%d partitions=%d payload=%dB duration=%s\n\n",
		r.RunID, r.URL, r.Queue, r.Producers, r.Batch, r.Partitions, r.PayloadBytes,
		time.Duration(r.DurationSec*float64(time.Second)))
	rows := [][2]string{
		{"wall time", fmt.Sprintf("%.2f s", r.WallSec)},
		{"requests", strconv.FormatInt(r.Requests, 10)},
		{"items sent", strconv.FormatInt(r.Items, 10)},
		{"msg/s (accepted)", fmt.Sprintf("%.0f", r.MsgPerSec)},
		{"requests/s", fmt.Sprintf("%.0f", r.ReqPerSec)},
		{"latency p50", fmt.Sprintf("%.3f ms", r.Latency.P50ms)},
		{"latency p90", fmt.Sprintf("%.3f ms", r.Latency.P90ms)},
		{"latency p99", fmt.Sprintf("%.3f ms", r.Latency.P99ms)},
		{"latency p99.9", fmt.Sprintf("%.3f ms", r.Latency.P999ms)},
		{"latency max", fmt.Sprintf("%.3f ms", r.Latency.MaxMs)},
		{"status queued", strconv.FormatInt(r.Status.Queued, 10)},
		{"status duplicate", strconv.FormatInt(r.Status.Duplicate, 10)},
		{"status buffered", strconv.FormatInt(r.Status.Buffered, 10)},
		{"status failed", strconv.FormatInt(r.Status.Failed, 10)},
		{"errors (requests/items)", fmt.Sprintf("%d / %d", r.Errors, r.ErrorItems)},
		{"client peak heap", mib(int64(r.ClientPeakHeapBytes))},
	}
	switch {
	case r.BrokerPID == 0:
		rows = append(rows, [2]string{"broker peak RSS", "n/a (no -broker-pid)"})
	case r.BrokerRSSError != "":
		rows = append(rows, [2]string{"broker peak RSS", "n/a (" + r.BrokerRSSError + ")"})
	default:
		rows = append(rows, [2]string{"broker peak RSS", fmt.Sprintf("%s (VmHWM, pid %d)", mib(r.BrokerPeakRSSBytes), r.BrokerPID)})
	}
	table := make([][]string, len(rows))
	for i := range rows {
		table[i] = rows[i][:]
	}
	writeTable(&b, []string{"metric", "value"}, table)
	if r.Consume != nil {
		b.WriteByte('\n')
		r.Consume.writeTables(&b)
	}
	writeErrorSamples(&b, "errors by kind", r.ErrorSamples)
	if r.Consume != nil {
		writeErrorSamples(&b, "consumer errors by kind", r.Consume.ErrorSamples)
	}
	if r.Verify != nil {
		b.WriteByte('\n')
		r.Verify.writeText(&b)
	}
	if r.Consume != nil {
		b.WriteByte('\n')
		r.Consume.writeVerify(&b)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeTable writes a Markdown table: the first column left-aligned, the
// others right-aligned.
func writeTable(b *bytes.Buffer, header []string, rows [][]string) {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = len(h)
		for _, row := range rows {
			w[i] = max(w[i], len(row[i]))
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			if i == 0 {
				fmt.Fprintf(b, "| %-*s ", w[i], c)
			} else {
				fmt.Fprintf(b, "| %*s ", w[i], c)
			}
		}
		b.WriteString("|\n")
	}
	line(header)
	for i := range header {
		if i == 0 {
			fmt.Fprintf(b, "|%s", strings.Repeat("-", w[i]+2))
		} else {
			fmt.Fprintf(b, "|%s:", strings.Repeat("-", w[i]+1))
		}
	}
	b.WriteString("|\n")
	for _, row := range rows {
		line(row)
	}
}

func writeErrorSamples(b *bytes.Buffer, title string, samples map[string]int64) {
	if len(samples) == 0 {
		return
	}
	keys := make([]string, 0, len(samples))
	for k := range samples {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(b, "\n%s (first %d kinds):\n", title, maxErrSamples)
	for _, k := range keys {
		fmt.Fprintf(b, "  %6d× %s\n", samples[k], k)
	}
}

// errNoVmHWM is returned by readVmHWM when /proc/<pid>/status has no VmHWM line.
var errNoVmHWM = errors.New("no VmHWM in /proc status")

// readVmHWM returns a process's peak resident set size in bytes, from
// /proc/<pid>/status (Linux only).
func readVmHWM(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmHWM(f)
}

func parseVmHWM(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("bench: VmHWM line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: VmHWM line %q: %w", sc.Text(), err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoVmHWM
}
