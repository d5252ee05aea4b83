package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot size.
const (
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 10 * vg.Centimeter
)

// Sweep is one plotted series: the push scenarios that hold every
// parameter fixed but one.
type sweep struct {
	file   string // PNG name
	title  string
	xLabel string
	// x is the varied parameter of a result that belongs to the sweep,
	// ok false for one that does not.
	x func(s Scenario) (x int, ok bool)
}

var sweeps = []sweep{
	{file: "items", title: "8 connections, 10 partitions", xLabel: "items per push",
		x: func(s Scenario) (int, bool) {
			return s.Batch, s.Kind == KindPush && s.Producers == 8 && s.Partitions == 10
		}},
	{file: "partitions", title: "8 connections × 100 items per push", xLabel: "partitions",
		x: func(s Scenario) (int, bool) {
			return s.Partitions, s.Kind == KindPush && s.Producers == 8 && s.Batch == 100
		}},
}

// Plot is one PNG WritePlots wrote.
type Plot struct {
	// Path is where the PNG was written; Title says what it shows.
	Path, Title string
}

// WritePlots draws, for each sweep (items per push; partitions), the
// throughput and the CPU per message of the results as PNGs in dir:
// throughput-<sweep>.png and cpu-<sweep>.png. A sweep without results
// gets no plot. Scenarios that could not run are left out; a scenario
// that ran more than once is one point, its verified run of the median
// msg/s (plotRuns).
func WritePlots(dir string, results []*ScenarioResult) ([]Plot, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	results = plotRuns(groupRuns(results)) // one point per scenario
	var out []Plot
	durable := true
	for _, r := range results {
		durable = durable && r.Durable
	}
	suffix := ""
	if !durable {
		suffix = " (non-durable)"
	}
	for _, sw := range sweeps {
		idx := map[string][]*ScenarioResult{} // by TxIDs, in x order
		var xs []int
		for _, r := range results {
			x, ok := sw.x(r.Scenario)
			if !ok || r.Error != "" || r.Messages == 0 || x <= 0 {
				continue
			}
			idx[r.Scenario.TxIDs] = append(idx[r.Scenario.TxIDs], r)
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
		if len(idx) == 0 {
			continue
		}
		for _, rs := range idx {
			slices.SortStableFunc(rs, func(a, b *ScenarioResult) int {
				xa, _ := sw.x(a.Scenario)
				xb, _ := sw.x(b.Scenario)
				return xa - xb
			})
		}
		slices.Sort(xs)
		ticks := make([]plot.Tick, len(xs))
		for i, x := range xs {
			ticks[i] = plot.Tick{Value: float64(x), Label: shortCount(x)}
		}
		pts := func(id string, y func(*ScenarioResult) float64) plotter.XYs {
			var xys plotter.XYs
			for _, r := range idx[id] {
				x, _ := sw.x(r.Scenario)
				xys = append(xys, plotter.XY{X: float64(x), Y: y(r)})
			}
			return xys
		}
		variants := []string{TxIDMinted, TxIDClient}

		tp := newPlot("Push throughput, "+sw.title+suffix, sw.xLabel, "accepted msg/s", ticks)
		var lines []any
		for _, id := range variants {
			if len(idx[id]) > 0 {
				lines = append(lines, id+" ids", pts(id, func(r *ScenarioResult) float64 { return r.MsgPerSec }))
			}
		}
		if err := plotutil.AddLinePoints(tp, lines...); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "throughput-"+sw.file+".png")
		if err := tp.Save(plotWidth, plotHeight, path); err != nil {
			return nil, fmt.Errorf("bench: plot %s: %w", path, err)
		}
		out = append(out, Plot{Path: path, Title: tp.Title.Text})

		cp := newPlot("CPU per pushed message, "+sw.title+suffix, sw.xLabel, "CPU µs per message", ticks)
		lines = lines[:0]
		for _, id := range variants {
			if len(idx[id]) == 0 {
				continue
			}
			lines = append(lines, "broker + PostgreSQL, "+id+" ids", pts(id, func(r *ScenarioResult) float64 { return r.CPUPerMsgUs }))
			lines = append(lines, "broker only, "+id+" ids", pts(id, func(r *ScenarioResult) float64 { return r.BrokerCPUPerMsgUs }))
		}
		if err := plotutil.AddLinePoints(cp, lines...); err != nil {
			return nil, err
		}
		path = filepath.Join(dir, "cpu-"+sw.file+".png")
		if err := cp.Save(plotWidth, plotHeight, path); err != nil {
			return nil, fmt.Errorf("bench: plot %s: %w", path, err)
		}
		out = append(out, Plot{Path: path, Title: cp.Title.Text})
	}
	return out, nil
}

// newPlot is a plot with a logarithmic x axis ticked at the sweep's
// values and a y axis from zero.
func newPlot(title, x, y string, ticks []plot.Tick) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(ticks) > 0 {
		// Some room either side of the first and last point.
		p.X.Min, p.X.Max = ticks[0].Value/1.5, ticks[len(ticks)-1].Value*1.5
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

// shortCount spells 1000 as 1k and 10000 as 10k.
func shortCount(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
