package rollout_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/procstat"
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
// What it leaves out of an operator's path: the kubefarm-manager binary
// (the two controllers run in this process, built as internal/manager
// builds them but with a 100 ms poll instead of the default 5 s, so a
// freed slot is refilled sooner than with defaults); kubefarm-pxe and the
// agents' heartbeats (the fake agent sees the Rebooting record at once,
// where a real agent asks every 15 s); real reboots (200 ms here, about
// 100 s on the e2e's TCG machines) and real drains (no workload). It
// measures the controller's own pace and its cost to the API server; the
// e2e join's rollout measures the real path for two machines.
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
// 5); farm_step_interval_ms (the fake farm's pace during the rollout: it
// falls behind its 50 ms tick under load; its reboots last 200 ms, or one
// step where a step takes longer). The log breaks the figures down.
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
		f := newBenchFixture(b, 1)
		defer f.close()
		since := time.Now()
		r.peer = f.rollout(ctx)
		r.peerSpans = f.tl.stats(since, benchBudget)
	}()

	f := newBenchFixture(b, benchMachines)
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
	for _, m := range f.machines() {
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

// benchFixture is the tests' fixture with the benchmark's strategy, its
// rollout records going to tl and its manager's requests (its own client's
// and the tenant's) counted in api.
type benchFixture struct {
	*fixture
	tl  recordTimeline
	api apiCounter
}

func newBenchFixture(tb testing.TB, n int) *benchFixture {
	tb.Helper()
	f := &benchFixture{}
	f.fixture = newFixture(tb, n, benchStrategy(), withTransport(f.api.wrap))
	f.setHook(func(_ context.Context, m *v1alpha1.Machine) { f.tl.add(m) })
	return f
}

// rollout switches the pool to image b and waits for it to be Complete.
func (f *benchFixture) rollout(ctx context.Context) benchWindow {
	f.t.Helper()
	const limit = 5 * time.Minute
	complete, halted := false, false
	w := f.measure(ctx, func(w *benchWindow) {
		f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
		tick := time.NewTicker(benchPoll)
		defer tick.Stop()
		for !complete && !halted && time.Since(w.start) < limit {
			<-tick.C
			complete, halted = f.read(ctx, w)
		}
	})
	if !complete {
		f.t.Fatalf("the rollout of %d machines did not complete (halted: %v) in %s:\n%s", len(f.pool.Spec.Machines), halted, w.wall, f.dump())
	}
	return w
}

// baseline repeats the load of the rollout's window without a rollout: as
// many steps of the farm, now with nothing to reboot, and as many reads of
// the pool, with the manager idle. The farm's pace depends on the load (it
// steps faster when idle), so this is the same work, not the same length
// of time: the farm is held to the rollout's count of steps.
func (f *benchFixture) baseline(ctx context.Context, like benchWindow) benchWindow {
	f.t.Helper()
	const limit = 5 * time.Minute
	defer f.farm.setQuota(-1)
	return f.measure(ctx, func(w *benchWindow) {
		f.farm.setQuota(like.farmSteps)
		tick := time.NewTicker(benchPoll)
		defer tick.Stop()
		for time.Since(w.start) < limit {
			<-tick.C
			if w.reads < like.reads {
				f.read(ctx, w)
			}
			if w.reads >= like.reads && f.farm.quotaLeft() == 0 {
				return
			}
		}
		f.t.Fatalf("the baseline did not make %d farm steps and %d reads in %s", like.farmSteps, like.reads, limit)
	})
}

// measure runs body and measures it.
func (f *benchFixture) measure(ctx context.Context, body func(w *benchWindow)) benchWindow {
	f.t.Helper()
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
	w.farmSteps, w.farmStepMean = f.farm.stepsIn(w.start, w.end)
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
	return poolComplete(p, f.imgB), meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionHalted)
}

// processCPU is this process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the CPU so far of this process's children (envtest's etcd
// and kube-apiserver) and theirs, by command name.
func childCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, pid := range procstat.Children(os.Getpid()) {
		out[procstat.Command(pid)] += procstat.TreeCPU(pid)
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

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibOf(b uint64) float64 { return float64(b) / (1 << 20) }

func mapRuns(runs []benchRun, f func(benchRun) float64) []float64 {
	out := make([]float64, 0, len(runs))
	for _, r := range runs {
		out = append(out, f(r))
	}
	return out
}
