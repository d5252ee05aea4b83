package bench

import (
	"math"
	"slices"
	"time"
)

// Latency collects request durations exactly. Percentiles use the
// nearest-rank method over all samples: the q-quantile of n samples is the
// ceil(q·n)-th smallest. Memory is 8 bytes a sample, which is fine for the
// request counts of a benchmark run. Not safe for concurrent use: give each
// producer its own and Merge them.
type Latency struct {
	d      []time.Duration
	sorted bool
}

// Record adds one sample.
func (l *Latency) Record(d time.Duration) {
	l.d = append(l.d, d)
	l.sorted = false
}

// Merge adds every sample of o.
func (l *Latency) Merge(o *Latency) {
	l.d = append(l.d, o.d...)
	l.sorted = false
}

// Count is the number of samples.
func (l *Latency) Count() int { return len(l.d) }

func (l *Latency) sort() {
	if !l.sorted {
		slices.Sort(l.d)
		l.sorted = true
	}
}

// Quantile returns the nearest-rank q-quantile (0 ≤ q ≤ 1), 0 without samples.
func (l *Latency) Quantile(q float64) time.Duration {
	n := len(l.d)
	if n == 0 {
		return 0
	}
	l.sort()
	// The epsilon keeps q·n that is an integer in exact arithmetic (0.9·10)
	// from rounding up to the next rank.
	rank := int(math.Ceil(q*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return l.d[rank-1]
}

// Max is the largest sample, 0 without samples.
func (l *Latency) Max() time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	l.sort()
	return l.d[len(l.d)-1]
}

// LatencySummary is the report's view of a Latency, in milliseconds.
type LatencySummary struct {
	Count  int     `json:"count"`
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
	P999ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summary returns the percentiles the report shows.
func (l *Latency) Summary() LatencySummary {
	return LatencySummary{
		Count:  l.Count(),
		P50ms:  ms(l.Quantile(0.50)),
		P90ms:  ms(l.Quantile(0.90)),
		P99ms:  ms(l.Quantile(0.99)),
		P999ms: ms(l.Quantile(0.999)),
		MaxMs:  ms(l.Max()),
	}
}
