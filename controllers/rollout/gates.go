package rollout

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/machinestate"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// GatesFieldOwner is the field manager of the Machines' RolloutHeld
// condition: a field owner of its own, so that the rollout's records
// (FieldOwner, status.rollout and the served image) and the hold are
// applied independently and neither write drops the other's fields.
const GatesFieldOwner = "kubefarm-rollout-gates"

// maxHeldNamed bounds the held machines the pool's Progressing names.
const maxHeldNamed = 5

// heldPolls is how many polls apart a pool whose waiting machines are all
// held looks again: blocking pods and a Node's annotation are read, not
// watched (15 s at the default poll).
const heldPolls = 3

// readGates finds what holds each machine that waits to start: the
// reboot-hold annotations, with spec.rollout.alertGate the firing alerts
// of its source, and with spec.rollout.blockingPodSelector the tenant's
// running pods that match it. The pods are listed only when some
// machine waits (one list for the pool, served from the API server's watch
// cache), so a pool at rest costs the tenant nothing.
func (r *Reconciler) readGates(ctx context.Context, s *scope) (bool, error) {
	if !anyWaiting(s) {
		return false, nil
	}
	g := plan.Gates{}
	if gate := s.pool.Spec.Rollout.AlertGate; gate != nil {
		hold, invalid := r.alertHold(ctx, gate)
		if invalid != "" {
			s.sum.Invalid = invalid
			return true, nil
		}
		g.Pool = hold
	}
	if sel := s.pool.Spec.Rollout.BlockingPodSelector; sel != nil {
		ls, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			s.sum.Invalid = fmt.Sprintf("spec.rollout.blockingPodSelector: %v", err)
			return true, nil
		}
		g.PodSelector = true
		g.BlockingPods, err = blockingPods(ctx, s, ls.String())
		if err != nil {
			g.PodsUnknown = err.Error()
		}
	}
	for i := range s.machines {
		// Only a machine that waits can be held: one in flight finishes,
		// one up to date has nothing to hold.
		if waits(s.machines[i], s.target) {
			s.machines[i].Hold = plan.HoldOf(s.machines[i], g)
		}
	}
	return false, nil
}

// anyWaiting tells whether a machine of the pool waits to start an update.
func anyWaiting(s *scope) bool {
	return slices.ContainsFunc(s.machines, func(m plan.Machine) bool { return waits(m, s.target) })
}

// waits tells whether m needs an update towards target that has not
// started (and has not failed, waiting for a retry).
func waits(m plan.Machine, target v1alpha1.ImageRef) bool {
	if machinestate.InFlight(m.M) || plan.Failed(m.M, target) {
		return false
	}
	_, needs := plan.NeedsUpdate(m.M, target)
	return needs
}

// blockingPods lists the tenant's pods that match selector and have not
// ended, by the node they run on.
func blockingPods(ctx context.Context, s *scope, selector string) (map[string][]string, error) {
	list, err := s.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: selector,
		FieldSelector: "status.phase!=Succeeded,status.phase!=Failed",
		// From the watch cache: the gate reads the tenant every few
		// seconds while machines wait, and need not reach its etcd.
		ResourceVersion: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of TenantCluster %s/%s: %w", s.pool.Namespace, s.pool.Spec.Cluster, err)
	}
	out := map[string][]string{}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p.Namespace+"/"+p.Name)
	}
	for _, pods := range out {
		slices.Sort(pods)
	}
	return out, nil
}

// noteHeld counts the machines the planner held in the pool's summary and
// asks for the next look: held machines are released by changes the
// controller does not watch.
func (r *Reconciler) noteHeld(s *scope) {
	s.sum.Held = len(s.sel.Held)
	s.sum.HeldNames = plan.HeldNames(s.sel.Held, maxHeldNamed)
	if len(s.sel.Held) > 0 {
		s.wake(heldPolls * r.poll())
	}
}

// writeHolds writes each machine's RolloutHeld condition where it changed:
// True with the gate's reason while one holds it, False once none does
// (only on machines that had the condition, so a pool without gates never
// writes it). A newly held machine gets a RolloutHeld event.
func (r *Reconciler) writeHolds(ctx context.Context, s *scope) (bool, error) {
	for i := range s.machines {
		m := &s.machines[i]
		old := meta.FindStatusCondition(m.M.Status.Conditions, v1alpha1.ConditionRolloutHeld)
		want := holdCondition(m.Hold)
		if old == nil && m.Hold == nil {
			continue
		}
		if old != nil && old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message {
			continue
		}
		conds := slices.Clone(m.M.Status.Conditions)
		conditions.Set(&conds, m.M.Generation, want)
		c := meta.FindStatusCondition(conds, v1alpha1.ConditionRolloutHeld)
		out := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: m.M.Name, Namespace: m.M.Namespace},
			Status: v1alpha1.MachineStatus{Conditions: []metav1.Condition{*c}}}
		if err := ssa.ApplyStatus(ctx, r.Client, GatesFieldOwner, out); err != nil {
			return false, fmt.Errorf("writing the RolloutHeld condition of Machine %s: %w", m.M.Name, err)
		}
		if m.Hold != nil && (old == nil || old.Status != metav1.ConditionTrue || old.Reason != want.Reason) {
			r.event(m.M, corev1.EventTypeNormal, "RolloutHeld", "%s", m.Hold.Message)
		}
	}
	return false, nil
}

// holdCondition is the RolloutHeld condition for h (nil: not held).
func holdCondition(h *plan.Hold) metav1.Condition {
	if h == nil {
		return conditions.New(v1alpha1.ConditionRolloutHeld, false, v1alpha1.ReasonNotHeld, "no gate holds the machine's update")
	}
	return conditions.New(v1alpha1.ConditionRolloutHeld, true, h.Reason, h.Message)
}
