package plan

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func onNode(host string) func(*Machine) {
	return func(m *Machine) { m.M.Spec.Hostname = host }
}

func machineHold(v string) func(*Machine) {
	return func(m *Machine) { m.M.Annotations = map[string]string{v1alpha1.AnnotationRebootHold: v} }
}

func nodeHold(v string) func(*Machine) {
	return func(m *Machine) { m.Node.RebootHold = &v }
}

func TestHoldOf(t *testing.T) {
	pods := Gates{PodSelector: true, BlockingPods: map[string][]string{
		"n1": {"batch/a"},
		"n2": {"b/1", "b/2", "b/3", "b/4", "b/5", "b/6", "b/7"},
	}}
	long := strings.Repeat("é", 200) // 400 bytes
	for _, tc := range []struct {
		name   string
		m      Machine
		g      Gates
		reason string // "" : not held
		says   []string
	}{
		{name: "no gates", m: with(machine("m1", imgA, ""), onNode("n1"))},
		{name: "pods on another node", m: with(machine("m1", imgA, ""), onNode("n9")), g: pods},
		{name: "pods without a selector are not read", m: with(machine("m1", imgA, ""), onNode("n1")),
			g: Gates{BlockingPods: pods.BlockingPods}},
		{name: "one blocking pod", m: with(machine("m1", imgA, ""), onNode("n1")), g: pods,
			reason: v1alpha1.ReasonBlockingPods, says: []string{"1 pod matching spec.rollout.blockingPodSelector runs on Node n1: batch/a"}},
		{name: "many pods: five named and a count", m: with(machine("m1", imgA, ""), onNode("n2")), g: pods,
			reason: v1alpha1.ReasonBlockingPods, says: []string{"7 pods", "b/1, b/2, b/3, b/4, b/5 and 2 more"}},
		{name: "unknown pods fail closed", m: with(machine("m1", imgA, ""), onNode("n9")), g: Gates{PodSelector: true, PodsUnknown: "connection refused"},
			reason: v1alpha1.ReasonBlockingPodsUnknown, says: []string{"could not be listed", "connection refused"}},
		{name: "the Node's annotation", m: with(with(machine("m1", imgA, ""), onNode("n1")), nodeHold("kernel debugging")),
			reason: v1alpha1.ReasonRebootHold, says: []string{`on Node n1: "kernel debugging"`}},
		{name: "an empty annotation holds too", m: with(machine("m1", imgA, ""), nodeHold("")),
			reason: v1alpha1.ReasonRebootHold, says: []string{`""`}},
		{name: "the Machine's annotation comes first", m: with(with(with(machine("m1", imgA, ""), onNode("n1")), nodeHold("tenant")), machineHold("operator")), g: pods,
			reason: v1alpha1.ReasonRebootHold, says: []string{`on the Machine: "operator"`}},
		{name: "the Node's annotation before pods", m: with(with(machine("m1", imgA, ""), onNode("n1")), nodeHold("tenant")), g: pods,
			reason: v1alpha1.ReasonRebootHold, says: []string{`"tenant"`}},
		{name: "a long value is cut on a rune", m: with(machine("m1", imgA, ""), nodeHold(long)),
			reason: v1alpha1.ReasonRebootHold, says: []string{strings.Repeat("é", 128) + "..."}},
		{name: "a machine without a node and no annotation", m: with(machine("m1", imgA, ""), noNode), g: pods},
		{name: "the pool's alerts before pods", m: with(machine("m1", imgA, ""), onNode("n1")),
			g:      Gates{PodSelector: true, BlockingPods: pods.BlockingPods, Pool: &Hold{Reason: v1alpha1.ReasonFiringAlerts, Message: "NodeDown (2)"}},
			reason: v1alpha1.ReasonFiringAlerts, says: []string{"NodeDown (2)"}},
		{name: "an annotation before the pool's alerts", m: with(machine("m1", imgA, ""), machineHold("x")),
			g:      Gates{Pool: &Hold{Reason: v1alpha1.ReasonAlertsUnknown}},
			reason: v1alpha1.ReasonRebootHold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := HoldOf(tc.m, tc.g)
			if tc.reason == "" {
				if h != nil {
					t.Fatalf("held: %+v", h)
				}
				return
			}
			if h == nil || h.Reason != tc.reason {
				t.Fatalf("hold %+v, want reason %s", h, tc.reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(h.Message, s) {
					t.Errorf("message %q does not say %q", h.Message, s)
				}
			}
			if len(h.Message) > 700 {
				t.Errorf("message of %d bytes", len(h.Message))
			}
		})
	}
}

// TestSelectSkipsHeld: a held machine waits without taking the budget's
// room; the machines behind it start in its place.
func TestSelectSkipsHeld(t *testing.T) {
	hold := func(m *Machine) { m.Hold = &Hold{Reason: v1alpha1.ReasonBlockingPods} }
	ms := []Machine{with(machine("m1", imgA, ""), hold), machine("m2", imgA, ""), with(machine("m3", imgA, ""), hold), machine("m4", imgA, "")}
	sel, err := Select(ms, imgB, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sel.Start); !slices.Equal(got, []string{"m2"}) {
		t.Errorf("start %v, want [m2]", got)
	}
	if got := names(sel.Held); !slices.Equal(got, []string{"m1", "m3"}) {
		t.Errorf("held %v, want [m1 m3]", got)
	}
	if sel.Pending != 3 {
		t.Errorf("pending %d, want 3 (two held, one for the budget)", sel.Pending)
	}
	if got := HeldNames(sel.Held, 1); got != "m1 (BlockingPods) and 1 more" {
		t.Errorf("HeldNames = %q", got)
	}
	// A held machine already in flight is not stopped: the gate is read
	// before a start only.
	ms = []Machine{with(with(machine("m1", imgA, ""), inFlight), hold)}
	sel, _ = Select(ms, imgB, v1alpha1.RolloutStrategy{}, now)
	if len(sel.Held) != 0 || sel.Pending != 0 {
		t.Errorf("an in-flight machine was held: %+v", sel)
	}
}

func TestConditionsHeld(t *testing.T) {
	progressing := func(s Summary) metav1.Condition {
		for _, c := range Conditions(s) {
			if c.Type == v1alpha1.ConditionProgressing {
				return c
			}
		}
		t.Fatal("no Progressing")
		return metav1.Condition{}
	}
	base := Summary{Total: 4, Updated: 1, Pending: 2, Budget: 1, FailureBudget: 1, WindowOpen: true, Held: 2, HeldNames: "m1 (BlockingPods), m3 (RebootHold)"}
	c := progressing(base)
	if c.Reason != v1alpha1.ReasonRolloutHeld || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "m1 (BlockingPods), m3 (RebootHold)") {
		t.Errorf("all waiting held: %s/%s %q", c.Status, c.Reason, c.Message)
	}
	c = progressing(with2(base, func(s *Summary) { s.Pending = 3 }))
	if c.Reason != v1alpha1.ReasonWaitingForBudget || !strings.Contains(c.Message, "2 held by the rollout's gates: m1") {
		t.Errorf("one waiting for budget, two held: %s %q", c.Reason, c.Message)
	}
	c = progressing(with2(base, func(s *Summary) { s.InFlight = 1 }))
	if c.Reason != v1alpha1.ReasonMachinesUpdating || !strings.Contains(c.Message, "held by the rollout's gates") {
		t.Errorf("updating with held machines: %s %q", c.Reason, c.Message)
	}
	c = progressing(with2(base, func(s *Summary) { s.Paused = true }))
	if c.Reason != v1alpha1.ReasonRolloutPaused {
		t.Errorf("a pause says more than a gate: %s", c.Reason)
	}
}
