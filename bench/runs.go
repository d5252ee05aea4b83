package bench

import (
	"cmp"
	"slices"
)

// runGroup is every run of one scenario in a set of results (queen-bench
// -repeat, or results files rendered together with -from), in the order
// they ran.
type runGroup struct {
	name string
	runs []*ScenarioResult
	// rep stands for the group in the report's table and plots: a run that
	// failed, when any did (a failure is never hidden behind a good run),
	// else the run of the median msg/s (the lower of the two middle ones
	// for an even count). It is one whole run, so its columns agree.
	rep *ScenarioResult
}

// verified is the group's runs that ran and verified, in the order they
// ran.
func (g *runGroup) verified() []*ScenarioResult {
	var ok []*ScenarioResult
	for _, r := range g.runs {
		if r.OK() {
			ok = append(ok, r)
		}
	}
	return ok
}

// okRuns is how many of the group's runs ran and verified.
func (g *runGroup) okRuns() int { return len(g.verified()) }

// groupRuns groups results by scenario name, in the order each name first
// appears, and picks each group's representative run (runGroup.rep).
func groupRuns(results []*ScenarioResult) []*runGroup {
	var out []*runGroup
	byName := map[string]*runGroup{}
	for _, r := range results {
		g := byName[r.Scenario.Name]
		if g == nil {
			g = &runGroup{name: r.Scenario.Name}
			byName[r.Scenario.Name] = g
			out = append(out, g)
		}
		g.runs = append(g.runs, r)
	}
	for _, g := range out {
		for _, r := range g.runs {
			if !r.OK() {
				g.rep = r
				break
			}
		}
		if g.rep == nil {
			g.rep = medianRun(g.runs)
		}
	}
	return out
}

// medianRun is the run of the median msg/s (the lower middle one of an
// even count); ties keep the order the runs ran in.
func medianRun(runs []*ScenarioResult) *ScenarioResult {
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b *ScenarioResult) int { return cmp.Compare(a.MsgPerSec, b.MsgPerSec) })
	return sorted[(len(sorted)-1)/2]
}

// plotRuns is, per scenario in first-seen order, the run a plot's point
// shows: the run of the median msg/s among those that verified (a plot
// leaves failed runs out), else the representative (WritePlots then
// leaves a run with an error out).
func plotRuns(groups []*runGroup) []*ScenarioResult {
	out := make([]*ScenarioResult, len(groups))
	for i, g := range groups {
		out[i] = g.rep
		if ok := g.verified(); len(ok) > 0 {
			out[i] = medianRun(ok)
		}
	}
	return out
}

// representatives is each scenario's representative run, in first-seen
// order: what the table's rows show.
func representatives(groups []*runGroup) []*ScenarioResult {
	out := make([]*ScenarioResult, len(groups))
	for i, g := range groups {
		out[i] = g.rep
	}
	return out
}

// spread is the least and the most of f over the runs that ran and
// verified; ok is false when none did.
func spread(runs []*ScenarioResult, f func(*ScenarioResult) float64) (lo, hi float64, ok bool) {
	for _, r := range runs {
		if !r.OK() {
			continue
		}
		v := f(r)
		if !ok {
			lo, hi, ok = v, v, true
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi, ok
}
