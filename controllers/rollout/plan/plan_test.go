package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machinestate"
)

var (
	imgA = v1alpha1.ImageRef{Name: "a", Digest: "sha256:" + strings.Repeat("a", 64)}
	imgB = v1alpha1.ImageRef{Name: "b", Digest: "sha256:" + strings.Repeat("b", 64)}
)

// machine is a Machine served and booted on img, with a Ready schedulable
// node in zone.
func machine(name string, img v1alpha1.ImageRef, zone string) Machine {
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}}
	m.Status.ServedImage = img.DeepCopy()
	m.Status.LastBoot = &v1alpha1.BootRecord{BootID: "boot-" + name, ImageDigest: img.Digest}
	return Machine{M: m, Node: &Node{Ready: true, BootID: "boot-" + name, Labels: map[string]string{"zone": zone}}}
}

func with(m Machine, fn func(*Machine)) Machine { fn(&m); return m }

func notReady(m *Machine) { m.Node.Ready = false }
func cordoned(m *Machine) { m.Node.Unschedulable = true }
func noNode(m *Machine)   { m.Node = nil }
func inFlight(m *Machine) {
	m.M.Status.Rollout = &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutDraining, TargetImage: imgB}
}
func failedOnB(m *Machine) {
	m.M.Status.Rollout = &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutFailed, TargetImage: imgB}
}

// now is the planner's clock in the tables.
var now = time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)

// skippedB: the drain timed out and was skipped an hour ago (the default
// backoff is 15 minutes).
func skippedB(m *Machine) {
	m.M.Status.History = []v1alpha1.RolloutHistoryEntry{{Image: imgB, Result: v1alpha1.RolloutSkipped, FinishTime: metav1.NewTime(now.Add(-time.Hour))}}
}

// skippedBJustNow: skipped a minute ago, inside the backoff.
func skippedBJustNow(m *Machine) {
	m.M.Status.History = []v1alpha1.RolloutHistoryEntry{{Image: imgB, Result: v1alpha1.RolloutSkipped, FinishTime: metav1.NewTime(now.Add(-time.Minute))}}
}

func names(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.M.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	count := func(n int32) *intstr.IntOrString { return ptr.To(intstr.FromInt32(n)) }
	pct := func(s string) *intstr.IntOrString { return ptr.To(intstr.FromString(s)) }
	cases := []struct {
		name     string
		machines []Machine
		st       v1alpha1.RolloutStrategy
		start    []string
		pending  int
		unavail  int
	}{
		{name: "budget one starts the first by name",
			machines: []Machine{machine("m2", imgA, ""), machine("m1", imgA, ""), machine("m3", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, start: []string{"m1"}, pending: 2},
		{name: "nil budget is one",
			machines: []Machine{machine("m1", imgA, ""), machine("m2", imgA, "")},
			start:    []string{"m1"}, pending: 1},
		{name: "up to date machines are not candidates",
			machines: []Machine{machine("m1", imgB, ""), machine("m2", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(5)}, start: []string{"m2"}},
		{name: "someone else's NotReady node counts against the budget",
			machines: []Machine{with(machine("m1", imgB, ""), notReady), machine("m2", imgA, ""), machine("m3", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, pending: 2, unavail: 1},
		{name: "an operator's cordon counts against the budget",
			machines: []Machine{with(machine("m1", imgB, ""), cordoned), machine("m2", imgA, ""), machine("m3", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(2)}, start: []string{"m2"}, pending: 1, unavail: 1},
		{name: "a missing node counts",
			machines: []Machine{with(machine("m1", imgB, ""), noNode), machine("m2", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, pending: 1, unavail: 1},
		{name: "in-flight updates count and are not started again",
			machines: []Machine{with(machine("m1", imgA, ""), inFlight), machine("m2", imgA, ""), machine("m3", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(2)}, start: []string{"m2"}, pending: 1, unavail: 1},
		{name: "an already unavailable candidate goes first and costs nothing more",
			machines: []Machine{machine("m1", imgA, ""), with(machine("m9", imgA, ""), notReady), machine("m2", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(2)}, start: []string{"m9", "m1"}, pending: 1, unavail: 1},
		{name: "past the budget even an unavailable candidate waits",
			machines: []Machine{with(machine("m1", imgA, ""), notReady), with(machine("m2", imgA, ""), notReady)},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, pending: 2, unavail: 2},
		{name: "failed machines wait for a retry",
			machines: []Machine{with(machine("m1", imgA, ""), failedOnB), machine("m2", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(2)}, start: []string{"m2"}},
		{name: "a machine skipped last time goes last",
			machines: []Machine{with(machine("m1", imgA, ""), skippedB), machine("m2", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, start: []string{"m2"}, pending: 1},
		{name: "a machine skipped last time goes last, even when it is the only one left",
			machines: []Machine{with(machine("m1", imgA, ""), skippedB), machine("m2", imgB, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, start: []string{"m1"}},
		{name: "a machine skipped within the backoff waits",
			machines: []Machine{with(machine("m1", imgA, ""), skippedBJustNow), machine("m2", imgB, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(1)}, pending: 1},
		{name: "percent rounds down, at least one",
			machines: []Machine{machine("m1", imgA, ""), machine("m2", imgA, ""), machine("m3", imgA, "")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: pct("50%")}, start: []string{"m1"}, pending: 2},
		{name: "percent of ten",
			machines: tenOnA(),
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: pct("30%")}, start: []string{"m00", "m01", "m02"}, pending: 7},
		{name: "per-domain budget spreads the starts over domains",
			machines: []Machine{machine("a1", imgA, "z1"), machine("a2", imgA, "z1"), machine("b1", imgA, "z2"), machine("b2", imgA, "z2")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(4), FailureDomainLabel: "zone", MaxUnavailablePerDomain: count(1)},
			start:    []string{"a1", "b1"}, pending: 2},
		{name: "a domain with an unavailable node has no room",
			machines: []Machine{with(machine("a0", imgB, "z1"), notReady), machine("a1", imgA, "z1"), machine("b1", imgA, "z2")},
			st:       v1alpha1.RolloutStrategy{MaxUnavailable: count(4), FailureDomainLabel: "zone", MaxUnavailablePerDomain: count(1)},
			start:    []string{"b1"}, pending: 1, unavail: 1},
		{name: "a new Machine with no served image yet is the NodePool controller's, not a candidate",
			machines: []Machine{with(machine("m1", imgA, ""), func(m *Machine) { m.M.Status.ServedImage, m.M.Status.LastBoot, m.Node = nil, nil, nil }),
				machine("m2", imgA, "")},
			st: v1alpha1.RolloutStrategy{MaxUnavailable: count(2)}, start: []string{"m2"}, unavail: 1},
		{name: "a reboot request is a candidate on the same image",
			machines: []Machine{with(machine("m1", imgB, ""), func(m *Machine) {
				m.M.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionRebootRequired, Status: metav1.ConditionTrue, Message: "boot boot-m1: login"}}
			}), machine("m2", imgB, "")},
			st: v1alpha1.RolloutStrategy{MaxUnavailable: count(3)}, start: []string{"m1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Select(tc.machines, imgB, tc.st, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(sel.Start); !slices.Equal(got, tc.start) {
				t.Errorf("start %v, want %v", got, tc.start)
			}
			if sel.Pending != tc.pending || sel.Unavailable != tc.unavail {
				t.Errorf("pending %d unavailable %d, want %d and %d", sel.Pending, sel.Unavailable, tc.pending, tc.unavail)
			}
		})
	}
}

func tenOnA() []Machine {
	var out []Machine
	for i := range 10 {
		out = append(out, machine(fmt.Sprintf("m%02d", i), imgA, ""))
	}
	return out
}

// TestSelectNeverExceedsBudget: whatever the pool's state, the starts
// never take the unavailable count past the budget.
func TestSelectNeverExceedsBudget(t *testing.T) {
	mods := []func(*Machine){func(*Machine) {}, notReady, cordoned, noNode, inFlight, failedOnB}
	for seed := range 400 {
		var ms []Machine
		for i := range 8 {
			img := imgA
			if (seed>>i)&1 == 1 {
				img = imgB
			}
			ms = append(ms, with(machine(fmt.Sprintf("m%d", i), img, fmt.Sprintf("z%d", i%3)), mods[(seed*7+i*3)%len(mods)]))
		}
		budget := int32(seed%4 + 1)
		st := v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(budget)), FailureDomainLabel: "zone", MaxUnavailablePerDomain: ptr.To(intstr.FromInt32(1))}
		sel, err := Select(ms, imgB, st, now)
		if err != nil {
			t.Fatal(err)
		}
		after := 0
		started := map[string]bool{}
		for _, c := range sel.Start {
			started[c.M.Name] = true
		}
		for _, m := range ms {
			if Unavailable(m) || started[m.M.Name] {
				after++
			}
		}
		if len(sel.Start) > 0 && after > int(budget) {
			t.Fatalf("seed %d: %d unavailable after starting %v, budget %d", seed, after, names(sel.Start), budget)
		}
	}
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		v     *intstr.IntOrString
		total int
		want  int
	}{
		{nil, 10, 1}, {ptr.To(intstr.FromInt32(3)), 10, 3}, {ptr.To(intstr.FromString("10%")), 50, 5},
		{ptr.To(intstr.FromString("10%")), 5, 1}, {ptr.To(intstr.FromString("100%")), 7, 7}, {ptr.To(intstr.FromString("19%")), 10, 1},
	} {
		if got, err := Budget(tc.v, tc.total); err != nil || got != tc.want {
			t.Errorf("Budget(%v, %d) = %d, %v; want %d", tc.v, tc.total, got, err, tc.want)
		}
	}
}

func TestRebootRequested(t *testing.T) {
	m := machine("m1", imgA, "").M
	set := func(status metav1.ConditionStatus, msg string) {
		m.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionRebootRequired, Status: status, Message: msg}}
	}
	if machinestate.RebootRequested(m) {
		t.Error("no condition: requested")
	}
	set(metav1.ConditionTrue, "boot boot-m1: login 4h ago")
	if !machinestate.RebootRequested(m) {
		t.Error("True for this boot: not requested")
	}
	set(metav1.ConditionTrue, "boot other: login 4h ago")
	if machinestate.RebootRequested(m) {
		t.Error("True for another boot: requested")
	}
	set(metav1.ConditionFalse, "boot boot-m1")
	if machinestate.RebootRequested(m) {
		t.Error("False: requested")
	}
}

func TestStartRecordsTheOperatorsCordon(t *testing.T) {
	c := Candidate{Machine: with(machine("m1", imgA, ""), cordoned), Reason: v1alpha1.RolloutForImage}
	r := Start(c, imgB, now)
	if !r.WasCordoned || r.Phase != v1alpha1.RolloutCordoning || r.PreviousBootID != "boot-m1" || !r.StartTime.Time.Equal(now) {
		t.Errorf("Start = %+v", r)
	}
	// After a failed update the rollout's own cordon is not the operator's.
	c = Candidate{Machine: with(machine("m1", imgA, ""), func(m *Machine) { cordoned(m); failedOnB(m) })}
	if r := Start(c, imgB, now); r.WasCordoned {
		t.Error("a failed update's cordon was taken for the operator's")
	}
	c = Candidate{Machine: machine("m1", imgA, "")}
	if r := Start(c, imgB, now); r.WasCordoned {
		t.Error("a schedulable node recorded as cordoned")
	}
}

func TestVerify(t *testing.T) {
	rebooted := func(fn func(*Machine)) Machine {
		m := machine("m1", imgB, "")
		m.M.Status.Rollout = &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutVerifying, TargetImage: imgB, PreviousBootID: "old"}
		if fn != nil {
			fn(&m)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		m    Machine
		good bool
		why  string
	}{
		{"good", rebooted(nil), true, ""},
		{"other image", rebooted(func(m *Machine) { m.M.Status.LastBoot.ImageDigest = imgA.Digest }), false, "not the target"},
		{"no node", rebooted(noNode), false, "not registered"},
		{"node on the old boot", rebooted(func(m *Machine) { m.Node.BootID = "old" }), false, "not the reported boot"},
		{"not ready", rebooted(notReady), false, "not Ready"},
	} {
		v := Verify(tc.m)
		if v.Good != tc.good || !strings.Contains(v.Why, tc.why) {
			t.Errorf("%s: Verify = %+v, want good=%v why~%q", tc.name, v, tc.good, tc.why)
		}
	}
	m := rebooted(nil)
	if !Rebooted(m.M) {
		t.Error("a new boot ID is not a reboot")
	}
	m.M.Status.LastBoot.BootID = "old"
	if Rebooted(m.M) {
		t.Error("the previous boot counted as a reboot")
	}
}

func TestBootStarted(t *testing.T) {
	asked := metav1.NewTime(now)
	at := func(d time.Duration) *v1alpha1.BootCredential {
		return &v1alpha1.BootCredential{SHA256: "sha256:" + strings.Repeat("a", 64), Issued: metav1.NewTime(now.Add(d))}
	}
	for _, tc := range []struct {
		name    string
		rollout *v1alpha1.MachineRollout
		cred    *v1alpha1.BootCredential
		want    bool
	}{
		{"a secret taken after the reboot was asked for", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutRebooting, PhaseStartTime: asked}, at(20 * time.Second), true},
		{"the running boot's secret, from before", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutRebooting, PhaseStartTime: asked}, at(-time.Hour), false},
		{"a secret taken in the very second of the request", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutRebooting, PhaseStartTime: asked}, at(0), false},
		{"no secret taken yet", &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutRebooting, PhaseStartTime: asked}, nil, false},
		{"no rollout", nil, at(time.Second), false},
	} {
		m := machine("m1", imgA, "")
		m.M.Status.Rollout, m.M.Status.BootCredential = tc.rollout, tc.cred
		if got := BootStarted(m.M); got != tc.want {
			t.Errorf("%s: BootStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExpired(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := &metav1.Duration{Duration: time.Minute}
	if exp, left := Expired(start, d, start.Add(59*time.Second)); exp || left != time.Second {
		t.Errorf("before: %v %v", exp, left)
	}
	if exp, _ := Expired(start, d, start.Add(time.Minute)); !exp {
		t.Error("at the deadline: not expired")
	}
	if exp, _ := Expired(start, nil, start.Add(1000*time.Hour)); exp {
		t.Error("no timeout expired")
	}
}

func TestFinishedKeepsTen(t *testing.T) {
	var h []v1alpha1.RolloutHistoryEntry
	r := &v1alpha1.MachineRollout{TargetImage: imgB, Reason: v1alpha1.RolloutForImage}
	for i := range 12 {
		h = Finished(h, r, v1alpha1.RolloutDone, time.Unix(int64(i), 0), fmt.Sprint(i))
	}
	if len(h) != 10 || h[0].Message != "11" || h[9].Message != "2" {
		t.Errorf("history %d entries, first %q last %q", len(h), h[0].Message, h[len(h)-1].Message)
	}
}

func TestConditions(t *testing.T) {
	find := func(cs []metav1.Condition, typ string) metav1.Condition {
		for _, c := range cs {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s", typ)
		return metav1.Condition{}
	}
	base := Summary{Total: 4, Updated: 1, Pending: 3, Budget: 1, FailureBudget: 1, WindowOpen: true}
	for _, tc := range []struct {
		name   string
		s      Summary
		typ    string
		status metav1.ConditionStatus
		reason string
	}{
		{"updating", with2(base, func(s *Summary) { s.InFlight = 1 }), v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonMachinesUpdating},
		{"waiting for budget", base, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForBudget},
		{"waiting for a domain's budget", with2(base, func(s *Summary) { s.FullDomains = []string{"rack-a"} }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForBudget},
		{"drain blocked", with2(base, func(s *Summary) { s.InFlight, s.DrainBlocked = 1, "workers-m1: eviction refused for default/web-0" }), v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonMachinesUpdating},
		{"paused", with2(base, func(s *Summary) { s.Paused = true }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutPaused},
		{"paused condition", with2(base, func(s *Summary) { s.Paused = true }), v1alpha1.ConditionPaused, metav1.ConditionTrue, v1alpha1.ReasonRolloutPaused},
		{"window", with2(base, func(s *Summary) { s.WindowOpen = false }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForWindow},
		{"within failure budget", with2(base, func(s *Summary) { s.Failed = 1 }), v1alpha1.ConditionHalted, metav1.ConditionFalse, v1alpha1.ReasonFailureBudgetLeft},
		{"halted", with2(base, func(s *Summary) { s.Failed = 2 }), v1alpha1.ConditionHalted, metav1.ConditionTrue, v1alpha1.ReasonFailureBudgetSpent},
		{"halted holds progress", with2(base, func(s *Summary) { s.Failed = 2 }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutHalted},
		{"complete", Summary{Total: 4, Updated: 4, WindowOpen: true}, v1alpha1.ConditionComplete, metav1.ConditionTrue, v1alpha1.ReasonAllUpdated},
		{"not complete", base, v1alpha1.ConditionComplete, metav1.ConditionFalse, v1alpha1.ReasonMachinesPending},
		{"image missing", with2(base, func(s *Summary) { s.ImageProblem, s.ImageReason = "gone", v1alpha1.ReasonImageNotFound }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonImageNotFound},
		// Nothing waits and every machine runs the image: complete.
		{"rollout complete", Summary{Total: 4, Updated: 4, WindowOpen: true}, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		// An empty pool has nothing to roll out.
		{"empty pool", Summary{WindowOpen: true}, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		// Machines that never booted: nothing waits for the rollout, but
		// the pool does not run its image yet.
		{"no machine booted", Summary{Total: 3, Unbooted: 3, WindowOpen: true}, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForFirstBoot},
		{"no machine booted, Complete", Summary{Total: 3, Unbooted: 3, WindowOpen: true}, v1alpha1.ConditionComplete, metav1.ConditionFalse, v1alpha1.ReasonMachinesPending},
		{"one machine not booted", Summary{Total: 3, Updated: 2, Unbooted: 1, WindowOpen: true}, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForFirstBoot},
		// Waiting updates say why they wait, booted or not.
		{"unbooted and waiting for budget", with2(base, func(s *Summary) { s.Unbooted = 1 }), v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonWaitingForBudget},
		{"unbooted and updating", with2(base, func(s *Summary) { s.Unbooted, s.InFlight = 1, 1 }), v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonMachinesUpdating},
	} {
		c := find(Conditions(tc.s), tc.typ)
		if c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %s = %s/%s, want %s/%s", tc.name, tc.typ, c.Status, c.Reason, tc.status, tc.reason)
		}
		if len(tc.s.FullDomains) > 0 && !strings.Contains(c.Message, "failure domains at their own budget: rack-a") {
			t.Errorf("%s: Progressing says %q, without the full domain", tc.name, c.Message)
		}
		if tc.reason == v1alpha1.ReasonWaitingForFirstBoot && !strings.Contains(c.Message, fmt.Sprintf("%d of %d machines have not booted yet", tc.s.Unbooted, tc.s.Total)) {
			t.Errorf("%s: Progressing says %q, without the count of unbooted machines", tc.name, c.Message)
		}
		if tc.s.DrainBlocked != "" && !strings.Contains(c.Message, "drain blocked: "+tc.s.DrainBlocked) {
			t.Errorf("%s: Progressing says %q, without the blocked drain", tc.name, c.Message)
		}
	}
}

func with2(s Summary, fn func(*Summary)) Summary { fn(&s); return s }

// TestUpdated: a machine counts as updated only once it is served the
// target, booted it, and has nothing in flight or requested.
func TestUpdated(t *testing.T) {
	cases := []struct {
		name string
		m    Machine
		want bool
	}{
		{"served and booted on the target", machine("m1", imgB, ""), true},
		{"booted on the target, served another image", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.ServedImage = imgA.DeepCopy() }), false},
		{"served the target, still booted on the old image", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.LastBoot.ImageDigest = imgA.Digest }), false},
		{"no served image yet, whatever it booted", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.ServedImage = nil }), false},
		{"never booted", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.LastBoot = nil }), false},
		{"in flight", with(machine("m1", imgB, ""), inFlight), false},
	}
	for _, tc := range cases {
		if got := machinestate.UpToDate(tc.m.M, imgB); got != tc.want {
			t.Errorf("%s: Updated %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnbooted: only a machine that never reported a boot counts, and not
// while an update of the rollout drives it.
func TestUnbooted(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Machine
		want bool
	}{
		{"booted", machine("m1", imgB, ""), false},
		{"never booted, served an image", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.LastBoot = nil }), true},
		{"never booted, no served image yet", with(machine("m1", imgB, ""), func(m *Machine) { m.M.Status.LastBoot, m.M.Status.ServedImage = nil, nil }), true},
		{"never booted, in flight", with(with(machine("m1", imgB, ""), inFlight), func(m *Machine) { m.M.Status.LastBoot = nil }), false},
	} {
		if got := machinestate.Unbooted(tc.m.M); got != tc.want {
			t.Errorf("%s: Unbooted %v, want %v", tc.name, got, tc.want)
		}
	}
}
