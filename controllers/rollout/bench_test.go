package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/rollout"
	"github.com/kubefarm/kubefarm/internal/examples"
)

const (
	benchMachines = 50
	benchBudget   = 5
	// benchPoll is how often the benchmark reads the pool: the rollout's
	// end is known to within it. The same reads run during the baseline.
	benchPoll = 25 * time.Millisecond
)

// benchStrategy: the budget under test, the shortest verification the tests
// use, and timeouts no healthy fake machine comes near. A failure halts the
// pool at once (failureBudget 0), and the benchmark fails instead of waiting.
func benchStrategy() v1alpha1.RolloutStrategy {
	long := &metav1.Duration{Duration: 10 * time.Minute}
	return v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(benchBudget)), MinReadySeconds: ptr.To[int32](1),
		DrainTimeout: long, BootTimeout: long, PowerCycleAfter: long, FailureBudget: ptr.To[int32](0)}
}

// BenchmarkRollout50 rolls a pool of 50 fake machines (fakeFarm, envtest)
// to another image with maxUnavailable 5 and minReadySeconds 1, no
// workload on the nodes, and measures it against the ideal: ten waves of
// five, each as long as one machine's update. One machine's update is
// measured the same way in the same run, on a pool of one (the peer, also
// the warm-up), so the ratio is T(50) / (ceil(50/5) x T(1)), where each T
// runs from the switch of the pool's BootImage to its Complete condition.
// ns/op is T(50).
//
// The process holds the rollout and NodePool controllers, the fake farm and
// the benchmark's reads of the pool, so its CPU is measured twice: during
// the rollout, and after it for the same work without a rollout (as many
// farm steps and reads, the manager idle), the baseline. What the rollout
// adds above the baseline is the manager's work (both controllers, their
// caches, events) and the farm's writes for the simulated reboots.
// kube-apiserver and etcd are this process's children; their CPU is read
// from /proc.
//
// Reported: ratio_to_ideal, rollout_s, ideal_s; cpu_ms (this process during
// the rollout), farm_baseline_cpu_ms (the same, for the baseline);
// apiserver_cpu_ms, apiserver_baseline_cpu_ms, etcd_cpu_ms; heap_max_MiB
// (HeapInuse, sampled every 100 ms during the rollout), maxrss_MiB (the
// process's peak so far, test harness included); inflight_mean (machines
// updating, time-weighted from the first start to the last finish, out of
// 5); farm_step_interval_ms (the fake farm's pace during the rollout: its
// reboots last 4 steps, and it falls behind its 50 ms tick under load). The
// log breaks the figures down.
func BenchmarkRollout50(b *testing.B) {
	b.StopTimer()
	var runs []benchRun
	for range b.N {
		runs = append(runs, benchRolloutOnce(b))
	}
	mean := func(f func(r benchRun) float64) float64 {
		s := 0.0
		for _, r := range runs {
			s += f(r)
		}
		return s / float64(len(runs))
	}
	b.ReportMetric(mean(func(r benchRun) float64 { return r.ratio() }), "ratio_to_ideal")
	b.ReportMetric(mean(func(r benchRun) float64 { return r.main.wall.Seconds() }), "rollout_s")
	b.ReportMetric(mean(func(r benchRun) float64 { return r.ideal().Seconds() }), "ideal_s")
	b.ReportMetric(mean(func(r benchRun) float64 { return msOf(r.main.cpu) }), "cpu_ms")
	b.ReportMetric(mean(func(r benchRun) float64 { return msOf(r.base.cpu) }), "farm_baseline_cpu_ms")
	b.ReportMetric(mean(func(r benchRun) float64 { return msOf(r.main.child["kube-apiserver"]) }), "apiserver_cpu_ms")
	b.ReportMetric(mean(func(r benchRun) float64 { return msOf(r.base.child["kube-apiserver"]) }), "apiserver_baseline_cpu_ms")
	b.ReportMetric(mean(func(r benchRun) float64 { return msOf(r.main.child["etcd"]) }), "etcd_cpu_ms")
	b.ReportMetric(slices.Max(mapRuns(runs, func(r benchRun) float64 { return mibOf(r.main.heapMax) })), "heap_max_MiB")
	b.ReportMetric(slices.Max(mapRuns(runs, func(r benchRun) float64 { return float64(r.maxRSSKiB) / 1024 })), "maxrss_MiB")
	b.ReportMetric(mean(func(r benchRun) float64 { return r.spans.meanInFlight }), "inflight_mean")
	b.ReportMetric(mean(func(r benchRun) float64 { return r.main.farmInterval() }), "farm_step_interval_ms")
}

// benchRun is one run's figures.
type benchRun struct {
	peer, main, base benchWindow
	peerSpans, spans spanStats
	maxRSSKiB        int64
	farmTick         time.Duration
}

func (r benchRun) ideal() time.Duration {
	waves := (benchMachines + benchBudget - 1) / benchBudget
	return time.Duration(waves) * r.peer.wall
}

func (r benchRun) ratio() float64 { return r.main.wall.Seconds() / r.ideal().Seconds() }

func benchRolloutOnce(b *testing.B) benchRun {
	var r benchRun
	ctx := context.Background()
	// The peer: the same rollout of a pool of one. Its nodes are named as
	// the big pool's (m00), so it is gone before that pool is made.
	func() {
		f := newBenchFixture(b, 1, benchStrategy())
		defer f.close()
		since := time.Now()
		r.peer = f.rollout(ctx)
		r.peerSpans = f.tl.stats(since, benchBudget)
	}()

	f := newBenchFixture(b, benchMachines, benchStrategy())
	defer f.close()
	since := time.Now()
	b.StartTimer()
	r.main = f.rollout(ctx)
	b.StopTimer()
	r.spans = f.tl.stats(since, benchBudget)
	r.farmTick = f.farm.tick
	r.base = f.baseline(ctx, r.main)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	r.maxRSSKiB = ru.Maxrss
	for _, m := range f.machinesNow(ctx) {
		if m.Status.LastBoot == nil || m.Status.LastBoot.ImageDigest != f.imgB.Digest || doneOn(&m, f.imgB) != 1 {
			b.Errorf("%s: last boot %+v, %d updates to image b done; want one, and a boot of image b", m.Name, m.Status.LastBoot, doneOn(&m, f.imgB))
		}
	}
	r.log(b)
	return r
}

func (r benchRun) log(b *testing.B) {
	b.Helper()
	p, s := r.peerSpans, r.spans
	b.Logf("peer, 1 machine: %.2fs from the switch to Complete; the update %.2fs (%s)", r.peer.wall.Seconds(), p.perMachine.Seconds(), p.phaseLine())
	b.Logf("%d machines, maxUnavailable %d: %.2fs; ideal %d x %.2fs = %.2fs; ratio %.2f", benchMachines, benchBudget,
		r.main.wall.Seconds(), (benchMachines+benchBudget-1)/benchBudget, r.peer.wall.Seconds(), r.ideal().Seconds(), r.ratio())
	b.Logf("  ratio ~ longer updates x%.2f (%.2fs each, the peer's %.2fs) x budget unused x%.2f (%d / %.2f in flight) x the peer's own overhead x%.2f (its update %.2fs of %.2fs)",
		s.perMachine.Seconds()/p.perMachine.Seconds(), s.perMachine.Seconds(), p.perMachine.Seconds(), benchBudget/s.meanInFlight, benchBudget, s.meanInFlight,
		p.perMachine.Seconds()/r.peer.wall.Seconds(), p.perMachine.Seconds(), r.peer.wall.Seconds())
	b.Logf("  %d updates of %.2fs on average (%.2f-%.2fs): %s", s.updates, s.perMachine.Seconds(), s.minMachine.Seconds(), s.maxMachine.Seconds(), s.phaseLine())
	b.Logf("  in flight: at most %d, %.2f on average and %d for %.0f%% of the time from the first start to the last finish; first start %.0fms after the switch, Complete seen %.0fms after the last finish; a freed slot refilled after %.0fms on average, %.0fms at most",
		s.maxInFlight, s.meanInFlight, benchBudget, 100*s.atBudget, msOf(s.firstStart.Sub(r.main.start)), msOf(r.main.end.Sub(s.lastEnd)), msOf(s.refillMean), msOf(s.refillMax))
	b.Logf("  rollout controller: %d reconciles (%d errors), in Reconcile %.1fs of %.1fs (peer: %d, %d errors); fake farm: a step every %.0fms (tick %s), %.0fms each (peer: every %.0fms, %.0fms each)",
		r.main.reconciles, r.main.reconcileErrors, r.main.reconcileBusy.Seconds(), r.main.wall.Seconds(), r.peer.reconciles, r.peer.reconcileErrors,
		r.main.farmInterval(), r.farmTick, msOf(r.main.farmStepMean), r.peer.farmInterval(), msOf(r.peer.farmStepMean))
	b.Logf("  the manager's requests (watches aside): %s", r.main.apiLine())
	b.Logf("CPU: this process %.0fms during the rollout (%.0f%% of a core); %.0fms for the same %d farm steps and %d reads without a rollout (baseline, %.1fs), so %.0fms for the manager's work and the farm's writes; kube-apiserver %.0fms (baseline %.0fms), etcd %.0fms (baseline %.0fms)",
		msOf(r.main.cpu), 100*r.main.cpu.Seconds()/r.main.wall.Seconds(), msOf(r.base.cpu), r.base.farmSteps, r.base.reads, r.base.wall.Seconds(), msOf(r.main.cpu-r.base.cpu),
		msOf(r.main.child["kube-apiserver"]), msOf(r.base.child["kube-apiserver"]), msOf(r.main.child["etcd"]), msOf(r.base.child["etcd"]))
	b.Logf("memory: heap in use %.1f MiB at the switch (after a GC), %.1f MiB at most during the rollout; Go Sys at most %.1f MiB; process max RSS %.1f MiB (peak so far, test harness and peer included)",
		mibOf(r.main.heapStart), mibOf(r.main.heapMax), mibOf(r.main.sysMax), float64(r.maxRSSKiB)/1024)
}

// benchWindow is what was measured over one span of wall time.
type benchWindow struct {
	start, end time.Time
	wall       time.Duration
	cpu        time.Duration            // this process, user+system
	child      map[string]time.Duration // this process's children by command name
	heapStart  uint64
	heapMax    uint64
	sysMax     uint64
	reads      int // of the pool, every benchPoll
	// The rollout controller, from controller-runtime's metrics.
	reconciles, reconcileErrors int
	reconcileBusy               time.Duration
	// The NodePool controller's reconciles.
	nodepoolReconciles int
	// The manager's requests, watches aside, by "VERB resource", and
	// their total time.
	api     map[string]int
	apiTook time.Duration
	// The fake farm's steps (one a tick when it keeps up).
	farmSteps    int
	farmStepMean time.Duration
}

// apiLine sums up the manager's requests: their count, per rollout pass,
// mean time, and the most frequent.
func (w benchWindow) apiLine() string {
	total := 0
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range w.api {
		if n > 0 {
			total += n
			all = append(all, kv{k, n})
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return b.n - a.n })
	var top []string
	for i, e := range all {
		if i == 6 {
			break
		}
		top = append(top, fmt.Sprintf("%s %d", e.k, e.n))
	}
	return fmt.Sprintf("%d, %.1f per rollout reconcile, %.1fms each on average; NodePool controller %d reconciles; most: %s",
		total, float64(total)/float64(max(1, w.reconciles)), msOf(w.apiTook)/float64(max(1, total)), w.nodepoolReconciles, strings.Join(top, ", "))
}

// farmInterval is the mean time between the farm's steps, in ms.
func (w benchWindow) farmInterval() float64 { return msOf(w.wall) / float64(max(1, w.farmSteps)) }

// rollout switches the pool to image b and waits for it to be Complete.
func (f *benchFixture) rollout(ctx context.Context) benchWindow {
	f.tb.Helper()
	const limit = 5 * time.Minute
	complete, halted := false, false
	w := f.measure(ctx, func(w *benchWindow) {
		p := &v1alpha1.NodePool{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), p); err != nil {
			f.tb.Fatal(err)
		}
		orig := p.DeepCopy()
		p.Spec.BootImage = f.imgB.Name
		if err := env.Client.Patch(ctx, p, client.MergeFrom(orig)); err != nil {
			f.tb.Fatal(err)
		}
		tick := time.NewTicker(benchPoll)
		defer tick.Stop()
		for !complete && !halted && time.Since(w.start) < limit {
			<-tick.C
			complete, halted = f.read(ctx, w)
		}
	})
	if !complete {
		f.tb.Fatalf("the rollout of %d machines did not complete (halted: %v) in %s:\n%s", f.n, halted, w.wall, f.dump(ctx))
	}
	return w
}

// baseline repeats the load of the rollout's window without a rollout: as
// many steps of the farm, now with nothing to reboot, and as many reads of
// the pool, with the manager idle. The farm's pace depends on the load (it
// steps faster when idle), so this is the same work, not the same length
// of time: the farm is held to the rollout's count of steps.
func (f *benchFixture) baseline(ctx context.Context, like benchWindow) benchWindow {
	f.tb.Helper()
	const limit = 5 * time.Minute
	defer f.farmQuota.Store(-1)
	return f.measure(ctx, func(w *benchWindow) {
		f.farmQuota.Store(int64(like.farmSteps))
		tick := time.NewTicker(benchPoll)
		defer tick.Stop()
		for time.Since(w.start) < limit {
			<-tick.C
			if w.reads < like.reads {
				f.read(ctx, w)
			}
			if w.reads >= like.reads && f.farmQuota.Load() == 0 {
				return
			}
		}
		f.tb.Fatalf("the baseline did not make %d farm steps and %d reads in %s", like.farmSteps, like.reads, limit)
	})
}

// measure runs body and measures it.
func (f *benchFixture) measure(ctx context.Context, body func(w *benchWindow)) benchWindow {
	f.tb.Helper()
	runtime.GC()
	var w benchWindow
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	w.heapStart, w.heapMax, w.sysMax = mem.HeapInuse, mem.HeapInuse, mem.Sys
	rec0, np0 := reconcileMetrics("rollout"), reconcileMetrics("nodepool")
	api0, took0 := f.api.snapshot()
	child0 := childCPU()
	cpu0 := processCPU()
	w.start = time.Now()
	body(&w)
	w.end = time.Now()
	w.cpu = processCPU() - cpu0
	w.wall = w.end.Sub(w.start)
	w.child = childCPU()
	for name, t := range w.child {
		w.child[name] = t - child0[name]
	}
	rec, np := reconcileMetrics("rollout"), reconcileMetrics("nodepool")
	w.reconciles, w.reconcileErrors = int(rec.total-rec0.total), int(rec.errors-rec0.errors)
	w.nodepoolReconciles = int(np.total - np0.total)
	w.api, w.apiTook = f.api.snapshot()
	w.apiTook -= took0
	for k, n := range w.api {
		w.api[k] = n - api0[k]
	}
	w.reconcileBusy = time.Duration((rec.busy - rec0.busy) * float64(time.Second))
	w.farmSteps, w.farmStepMean = f.farmSteps(w.start, w.end)
	return w
}

// read reads the pool, and the heap every fourth time.
func (f *benchFixture) read(ctx context.Context, w *benchWindow) (complete, halted bool) {
	complete, halted = f.poolState(ctx)
	w.reads++
	if w.reads%4 == 0 {
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		w.heapMax, w.sysMax = max(w.heapMax, mem.HeapInuse), max(w.sysMax, mem.Sys)
	}
	return complete, halted
}

// poolState reads the pool once: Complete as fixture.complete says it for
// image b, and Halted.
func (f *benchFixture) poolState(ctx context.Context) (complete, halted bool) {
	p := &v1alpha1.NodePool{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), p); err != nil {
		return false, false
	}
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionComplete)
	complete = c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation &&
		p.Status.RolloutImage != nil && *p.Status.RolloutImage == f.imgB
	return complete, meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionHalted)
}

func (f *benchFixture) machinesNow(ctx context.Context) []v1alpha1.Machine {
	ms := &v1alpha1.MachineList{}
	if err := env.Client.List(ctx, ms, client.InNamespace(f.ns)); err != nil {
		f.tb.Fatal(err)
	}
	return ms.Items
}

func (f *benchFixture) dump(ctx context.Context) string {
	var sb strings.Builder
	for _, m := range f.machinesNow(ctx) {
		fmt.Fprintf(&sb, "%s lastBoot=%+v rollout=%+v\n", m.Name, m.Status.LastBoot, m.Status.Rollout)
	}
	return sb.String()
}

// processCPU is this process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the user and system CPU so far of this process's children
// (envtest's etcd and kube-apiserver) by command name, from
// /proc/<pid>/stat; Linux counts it in USER_HZ, 100 a second.
func childCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	self := strconv.Itoa(os.Getpid())
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		open, closing := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if open < 0 || closing < open {
			continue
		}
		// After the command: state, ppid, ... utime and stime are the
		// 14th and 15th fields of the line.
		fields := strings.Fields(string(data[closing+1:]))
		if len(fields) < 13 || fields[1] != self {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		out[string(data[open+1:closing])] += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}

type reconcileCounts struct {
	total, errors float64
	busy          float64 // seconds in Reconcile
}

// reconcileMetrics reads controller-runtime's counters of one controller
// name, summed over the managers that ran it in this process.
func reconcileMetrics(controller string) reconcileCounts {
	var c reconcileCounts
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ours := false
			for _, l := range m.GetLabel() {
				ours = ours || l.GetName() == "controller" && l.GetValue() == controller
			}
			if !ours {
				continue
			}
			switch mf.GetName() {
			case "controller_runtime_reconcile_total":
				c.total += m.GetCounter().GetValue()
			case "controller_runtime_reconcile_errors_total":
				c.errors += m.GetCounter().GetValue()
			case "controller_runtime_reconcile_time_seconds":
				c.busy += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return c
}

// apiCounter counts the requests of a client, watches aside, by verb and
// resource, with the time they took.
type apiCounter struct {
	mu   sync.Mutex
	n    map[string]int
	took time.Duration
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") == "true" {
			return rt.RoundTrip(req)
		}
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		took := time.Since(start)
		key := apiKey(req.Method, req.URL.Path)
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[key]++
		c.took += took
		c.mu.Unlock()
		return resp, err
	})
}

// snapshot is the counts so far and their total time.
func (c *apiCounter) snapshot() (map[string]int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out, c.took
}

// apiKey names a request as "VERB resource[/subresource]", LIST for a GET
// of a collection: /api/v1/nodes is "LIST nodes",
// /apis/kubefarm.io/v1alpha1/namespaces/x/machines/m/status with PATCH is
// "PATCH machines/status".
func apiKey(method, path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return method + " " + path
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	if len(seg) == 0 {
		return method + " " + path
	}
	res := seg[0]
	if len(seg) >= 3 {
		res += "/" + seg[2]
	}
	if method == http.MethodGet && len(seg) == 1 {
		method = "LIST"
	}
	return method + " " + res
}

// recordTimeline is every rollout record the controller wrote, with the time it
// wrote it (the rollout.SetAfterRecord hook).
type recordTimeline struct {
	mu     sync.Mutex
	events []recordEvent
}

type recordEvent struct {
	at      time.Time
	machine string
	phase   v1alpha1.RolloutPhase // "" when the record was cleared: the update finished
}

func (tl *recordTimeline) add(m *v1alpha1.Machine) {
	e := recordEvent{at: time.Now(), machine: m.Name}
	if ro := m.Status.Rollout; ro != nil {
		e.phase = ro.Phase
	}
	tl.mu.Lock()
	tl.events = append(tl.events, e)
	tl.mu.Unlock()
}

// spanStats is what the records tell of the updates.
type spanStats struct {
	updates                int
	perMachine             time.Duration // mean, first record to the last
	minMachine, maxMachine time.Duration
	firstStart, lastEnd    time.Time
	maxInFlight            int
	meanInFlight           float64 // time-weighted, from firstStart to lastEnd
	atBudget               float64 // fraction of that time with the budget in flight
	// refill is, for the i-th finish, the wait until the (i+budget)-th
	// start: how long a freed slot stayed empty while machines waited.
	refillMean, refillMax time.Duration
	phases                map[v1alpha1.RolloutPhase]time.Duration // mean time in each phase
	// minVerifying is the shortest Verifying phase: it holds minReadySeconds.
	minVerifying time.Duration
}

var benchPhases = []v1alpha1.RolloutPhase{v1alpha1.RolloutCordoning, v1alpha1.RolloutDraining, v1alpha1.RolloutRebooting,
	v1alpha1.RolloutVerifying, v1alpha1.RolloutUncordoning}

func (s spanStats) phaseLine() string {
	var parts []string
	for _, p := range benchPhases {
		parts = append(parts, fmt.Sprintf("%s %.0fms", p, msOf(s.phases[p])))
		if p == v1alpha1.RolloutVerifying {
			parts[len(parts)-1] += fmt.Sprintf(" (min %.0fms)", msOf(s.minVerifying))
		}
	}
	return strings.Join(parts, ", ")
}

func (tl *recordTimeline) stats(since time.Time, budget int) spanStats {
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	type state struct {
		start, phaseAt time.Time
		phase          v1alpha1.RolloutPhase
	}
	cur := map[string]*state{}
	var starts, ends []time.Time
	s := spanStats{phases: map[v1alpha1.RolloutPhase]time.Duration{}, minMachine: time.Duration(math.MaxInt64), minVerifying: time.Duration(math.MaxInt64)}
	phaseN := map[v1alpha1.RolloutPhase]int{}
	var total time.Duration
	for _, e := range events {
		if e.at.Before(since) {
			continue
		}
		st := cur[e.machine]
		if st == nil {
			if e.phase == "" || e.phase == v1alpha1.RolloutFailed {
				continue
			}
			cur[e.machine] = &state{start: e.at, phaseAt: e.at, phase: e.phase}
			starts = append(starts, e.at)
			continue
		}
		if e.phase == st.phase {
			continue // the same phase again: a message or readySince
		}
		s.phases[st.phase] += e.at.Sub(st.phaseAt)
		phaseN[st.phase]++
		if st.phase == v1alpha1.RolloutVerifying {
			s.minVerifying = min(s.minVerifying, e.at.Sub(st.phaseAt))
		}
		if e.phase == "" || e.phase == v1alpha1.RolloutFailed {
			d := e.at.Sub(st.start)
			total += d
			s.minMachine, s.maxMachine = min(s.minMachine, d), max(s.maxMachine, d)
			ends = append(ends, e.at)
			delete(cur, e.machine)
			continue
		}
		st.phase, st.phaseAt = e.phase, e.at
	}
	for p, n := range phaseN {
		s.phases[p] /= time.Duration(n)
	}
	s.updates = len(ends)
	if len(starts) == 0 || len(ends) == 0 {
		return s
	}
	s.perMachine = total / time.Duration(len(ends))
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	s.firstStart, s.lastEnd = starts[0], ends[len(ends)-1]

	// In flight over time: a finish before a start at the same instant.
	type step struct {
		at    time.Time
		delta int
	}
	var steps []step
	for _, t := range starts {
		steps = append(steps, step{t, 1})
	}
	for _, t := range ends {
		steps = append(steps, step{t, -1})
	}
	slices.SortStableFunc(steps, func(a, b step) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n, area, full := 0, 0.0, time.Duration(0)
	for i, st := range steps {
		n += st.delta
		s.maxInFlight = max(s.maxInFlight, n)
		if i+1 < len(steps) {
			d := steps[i+1].at.Sub(st.at)
			area += float64(n) * d.Seconds()
			if n >= budget {
				full += d
			}
		}
	}
	if span := s.lastEnd.Sub(s.firstStart); span > 0 {
		s.meanInFlight = area / span.Seconds()
		s.atBudget = full.Seconds() / span.Seconds()
	}
	var gaps []time.Duration
	for i, end := range ends {
		if i+budget < len(starts) {
			gaps = append(gaps, max(0, starts[i+budget].Sub(end)))
		}
	}
	if len(gaps) > 0 {
		var sum time.Duration
		for _, g := range gaps {
			sum += g
		}
		s.refillMean, s.refillMax = sum/time.Duration(len(gaps)), slices.Max(gaps)
	}
	return s
}

// benchFixture is newFixture's scenario for a benchmark: a namespace with
// BootImages a and b, a pool of n machines on a, their Nodes and first
// boots, the fake farm and a manager running the NodePool and rollout
// controllers as newFixture's does, whose rollout records go to tl. It is
// closed explicitly, so that two of them (their Nodes are named alike)
// follow each other in one benchmark.
//
// It repeats newFixture, startManager and fakeFarm.addMachine, which take
// a *testing.T (with those taking a testing.TB it would be newFixture with
// the fixture's hook set to tl.add), and fakeFarm.run, to time the steps.
type benchFixture struct {
	tb         testing.TB
	n          int
	ns         string
	farm       *fakeFarm
	pool       *v1alpha1.NodePool
	imgA, imgB v1alpha1.ImageRef
	tl         recordTimeline
	api        apiCounter

	once     sync.Once
	stopMgr  context.CancelFunc
	mgrDone  chan struct{}
	stopFarm context.CancelFunc
	farmDone chan struct{}
	stepsMu  sync.Mutex
	steps    []farmStep
	// farmQuota is how many more steps the farm takes; -1 is no limit.
	farmQuota atomic.Int64
}

func newBenchFixture(tb testing.TB, n int, strategy v1alpha1.RolloutStrategy) *benchFixture {
	tb.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rollout-bench-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		tb.Fatal(err)
	}
	f := &benchFixture{tb: tb, n: n, ns: ns.Name, farm: newFarm(env.Client, ns.Name)}
	f.farmQuota.Store(-1)
	tb.Cleanup(f.close)
	var refs []v1alpha1.ImageRef
	for _, digit := range []string{"a", "b"} {
		img, err := examples.BootImage()
		if err != nil {
			tb.Fatal(err)
		}
		imageSeq++
		img.Name = fmt.Sprintf("img-%s-%d", digit, imageSeq)
		img.Spec.Rootfs.Digest = "sha256:" + strings.Repeat(digit, 62) + fmt.Sprintf("%02d", imageSeq%100)
		if err := env.Client.Create(ctx, img); err != nil {
			tb.Fatal(err)
		}
		refs = append(refs, v1alpha1.ImageRef{Name: img.Name, Digest: img.Spec.Rootfs.Digest})
	}
	f.imgA, f.imgB = refs[0], refs[1]
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "workers"},
		Spec: v1alpha1.NodePoolSpec{
			Cluster: "tenant", BootImage: f.imgA.Name,
			Network: v1alpha1.BootNetwork{Subnet: "10.60.0.0/16"},
			Rollout: strategy,
		},
	}
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		pool.Spec.Machines = append(pool.Spec.Machines, v1alpha1.MachineEntry{
			Name: name, IP: fmt.Sprintf("10.60.0.%d", 10+i), MACs: []string{fmt.Sprintf("02:00:00:60:00:%02x", i)},
			Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix:///farm/workers-" + name},
		})
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		tb.Fatal(err)
	}
	f.pool = pool
	f.startManager()
	f.wait("the pool's Machines exist with image a served", func() bool {
		list := f.machinesNow(ctx)
		return len(list) == n && !slices.ContainsFunc(list, func(m v1alpha1.Machine) bool {
			return m.Status.ServedImage == nil || *m.Status.ServedImage != f.imgA
		})
	})
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		fm := &fakeMachine{hostname: name, bootID: string(uuid.NewUUID())}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if err := env.Client.Create(ctx, node); err != nil {
			tb.Fatal(err)
		}
		if err := f.farm.setNode(ctx, name, true, fm.bootID); err != nil {
			tb.Fatal(err)
		}
		if err := f.farm.report(ctx, "workers-"+name, fm.bootID, f.imgA.Digest); err != nil {
			tb.Fatal(err)
		}
		f.farm.mu.Lock()
		f.farm.machines["workers-"+name] = fm
		f.farm.mu.Unlock()
	}
	fctx, cancel := context.WithCancel(context.Background())
	f.stopFarm, f.farmDone = cancel, make(chan struct{})
	go func() { defer close(f.farmDone); f.runFarm(fctx) }()
	f.wait("the pool is Complete on image a", func() bool {
		p := &v1alpha1.NodePool{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), p); err != nil {
			return false
		}
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionComplete)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation &&
			p.Status.RolloutImage != nil && *p.Status.RolloutImage == f.imgA
	})
	return f
}

// runFarm is fakeFarm.run, timing each step (the farm's clock is its
// ticks, and a step that outlasts a tick makes every simulated reboot
// longer in wall time) and within farmQuota.
func (f *benchFixture) runFarm(ctx context.Context) {
	t := time.NewTicker(f.farm.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if q := f.farmQuota.Load(); q == 0 {
			continue
		} else if q > 0 {
			f.farmQuota.Add(-1)
		}
		start := time.Now()
		err := f.farm.step(ctx)
		f.stepsMu.Lock()
		f.steps = append(f.steps, farmStep{start, time.Since(start)})
		f.stepsMu.Unlock()
		if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			f.farm.mu.Lock()
			f.farm.errs = append(f.farm.errs, err)
			f.farm.mu.Unlock()
		}
	}
}

type farmStep struct {
	start time.Time
	took  time.Duration
}

// farmSteps counts the farm's steps that began in [from, to) and their mean
// duration.
func (f *benchFixture) farmSteps(from, to time.Time) (n int, mean time.Duration) {
	f.stepsMu.Lock()
	defer f.stepsMu.Unlock()
	var sum time.Duration
	for _, s := range f.steps {
		if !s.start.Before(from) && s.start.Before(to) {
			n++
			sum += s.took
		}
	}
	if n > 0 {
		mean = sum / time.Duration(n)
	}
	return n, mean
}

// startManager is fixture.startManager with the hook recording to tl and
// the manager's requests (its own and the tenant's client) counted in api.
func (f *benchFixture) startManager() {
	f.tb.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(f.api.wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		f.tb.Fatal(err)
	}
	if err := (&nodepool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nodepool-controller")}).SetupWithManager(mgr); err != nil {
		f.tb.Fatal(err)
	}
	r := &rollout.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("rollout-controller"),
		Tenants: staticTenant{kubernetes.NewForConfigOrDie(cfg)}, Power: &farmPower{farm: f.farm}, Poll: 100 * time.Millisecond}
	rollout.SetAfterRecord(r, func(_ context.Context, m *v1alpha1.Machine) { f.tl.add(m) })
	if err := r.SetupWithManager(mgr); err != nil {
		f.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stopMgr, f.mgrDone = cancel, make(chan struct{})
	go func() {
		defer close(f.mgrDone)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
}

// close stops the farm, removes the Nodes (cluster-wide, named alike in
// every fixture) and the pods bound to them, and stops the manager.
func (f *benchFixture) close() {
	f.once.Do(func() {
		ctx := context.Background()
		if f.stopFarm != nil {
			f.stopFarm()
			<-f.farmDone
			f.farm.mu.Lock()
			for _, err := range f.farm.errs {
				f.tb.Errorf("fake farm: %v", err)
			}
			f.farm.mu.Unlock()
		}
		_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(f.ns), client.GracePeriodSeconds(0))
		for i := range f.n {
			_ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m%02d", i)}})
		}
		f.wait("the Nodes are gone", func() bool {
			for i := range f.n {
				err := env.Client.Get(ctx, client.ObjectKey{Name: fmt.Sprintf("m%02d", i)}, &corev1.Node{})
				if !apierrors.IsNotFound(err) {
					return false
				}
			}
			return true
		})
		if f.stopMgr != nil {
			f.stopMgr()
			<-f.mgrDone
		}
	})
}

func (f *benchFixture) wait(what string, cond func() bool) {
	f.tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		f.tb.Fatalf("waiting for %s: %v", what, err)
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibOf(b uint64) float64 { return float64(b) / (1 << 20) }

func mapRuns(runs []benchRun, f func(benchRun) float64) []float64 {
	out := make([]float64, 0, len(runs))
	for _, r := range runs {
		out = append(out, f(r))
	}
	return out
}
