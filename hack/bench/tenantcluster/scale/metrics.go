package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// reconcileTime summarises the controller's reconcile time histogram.
func reconcileTime(mfs map[string]*dto.MetricFamily) (histogramFigures, error) {
	mf := mfs["controller_runtime_reconcile_time_seconds"]
	if mf == nil {
		return histogramFigures{}, errors.New("no controller_runtime_reconcile_time_seconds in /metrics")
	}
	for _, m := range mf.GetMetric() {
		if label(m, "controller") != controllerName || m.GetHistogram() == nil {
			continue
		}
		h := m.GetHistogram()
		f := histogramFigures{Count: h.GetSampleCount(), SumSeconds: h.GetSampleSum()}
		if f.Count > 0 {
			f.MeanSeconds = f.SumSeconds / float64(f.Count)
		}
		f.P50Seconds = quantile(0.50, h)
		f.P99Seconds = quantile(0.99, h)
		return f, nil
	}
	return histogramFigures{}, fmt.Errorf("no reconcile time histogram for controller %q", controllerName)
}

// quantile estimates a quantile from cumulative buckets the way PromQL's
// histogram_quantile does: linear interpolation inside the bucket that
// holds the rank, the lowest bucket starting at 0, and the highest finite
// bound for a rank that falls in +Inf.
func quantile(q float64, h *dto.Histogram) float64 {
	count := float64(h.GetSampleCount())
	if count == 0 {
		return 0 // JSON has no NaN; the count says there was nothing
	}
	buckets := h.GetBucket()
	rank := q * count
	prevUpper, prevCount := 0.0, 0.0
	for _, bk := range buckets {
		upper, cum := bk.GetUpperBound(), float64(bk.GetCumulativeCount())
		if cum >= rank {
			if math.IsInf(upper, 1) {
				return prevUpper
			}
			if cum == prevCount {
				return upper
			}
			return prevUpper + (upper-prevUpper)*(rank-prevCount)/(cum-prevCount)
		}
		prevUpper, prevCount = upper, cum
	}
	return prevUpper
}

// peakRSS reads VmHWM, the peak resident set size, in bytes.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/" + strconv.Itoa(pid) + "/status")
}

// sumFound adds the values of a family's series whose labels include sel;
// found says whether there was any.
func sumFound(mfs map[string]*dto.MetricFamily, name string, sel map[string]string) (sum float64, found bool) {
next:
	for _, m := range mfs[name].GetMetric() {
		for k, v := range sel {
			if label(m, k) != v {
				continue next
			}
		}
		sum += value(m)
		found = true
	}
	return sum, found
}

// sumOf is sumFound for a report, where a missing series counts as 0.
func sumOf(mfs map[string]*dto.MetricFamily, name string, sel map[string]string) float64 {
	sum, _ := sumFound(mfs, name, sel)
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
