// Package stats holds the order statistics the benchmarks print, so that
// every benchmark means the same thing by "p99" and "median".
package stats

import (
	"sort"
	"time"
)

// Percentile is the nearest-rank q-quantile (0 <= q <= 1) of xs, which it
// sorts in place. 0 for no samples.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[rank(len(xs), q)]
}

// DurationPercentile is Percentile over durations (sorted in place), in
// milliseconds, the unit every benchmark prints latencies in.
func DurationPercentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return Milliseconds(ds[rank(len(ds), q)])
}

// Median of xs (sorted in place): the mean of the two middle samples when
// their number is even, unlike Percentile, because the tenant benchmark
// reports the median of few runs and an even count is common there.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	sort.Float64s(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Milliseconds is d in milliseconds, with fractions.
func Milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rank is the index of the q-quantile among n sorted samples, rounded to
// the nearest rank and clamped to the samples.
func rank(n int, q float64) int {
	i := int(q*float64(n-1) + 0.5)
	switch {
	case i < 0:
		return 0
	case i >= n:
		return n - 1
	}
	return i
}
