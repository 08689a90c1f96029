package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty", nil, 0.5, 0},
		{"one", []float64{7}, 0.99, 7},
		{"unsorted median", []float64{5, 1, 3}, 0.5, 3},
		{"nearest rank rounds up", []float64{1, 2, 3, 4}, 0.5, 3},
		{"p99 of 100 is the 99th", seq(100), 0.99, 99},
		{"max", []float64{3, 9, 1}, 1, 9},
		{"min", []float64{3, 9, 1}, 0, 1},
	} {
		if got := Percentile(tc.xs, tc.q); got != tc.want {
			t.Errorf("%s: Percentile(%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
}

func TestDurationPercentile(t *testing.T) {
	ds := []time.Duration{3 * time.Millisecond, time.Millisecond, 2500 * time.Microsecond}
	if got := DurationPercentile(ds, 0.5); got != 2.5 {
		t.Errorf("median = %v ms, want 2.5", got)
	}
	if got := DurationPercentile(nil, 0.5); got != 0 {
		t.Errorf("empty = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{4}, 4}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(n - i) // descending, so the sort matters
	}
	return xs
}
