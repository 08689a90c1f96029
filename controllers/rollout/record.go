package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// transition records ro's next phase.
func (r *Reconciler) transition(ctx context.Context, s *scope, m *plan.Machine, phase v1alpha1.RolloutPhase, msg string) error {
	ro := m.M.Status.Rollout
	if err := r.record(ctx, m, plan.Next(ro, phase, s.now, msg), nil, nil); err != nil {
		return err
	}
	observePhase(ro, s.now)
	r.event(m.M, corev1.EventTypeNormal, "Rollout"+string(phase), "%s", msg)
	return nil
}

// fail ends the update as Failed: the record stays (so the operator sees
// where it stopped) and the history says why. The node is left as it is:
// cordoned when the drain timed out, for the operator to look at.
func (r *Reconciler) fail(ctx context.Context, s *scope, m *plan.Machine, why string) error {
	ro := m.M.Status.Rollout
	next := plan.Next(ro, v1alpha1.RolloutFailed, s.now, why)
	history := plan.Finished(m.M.Status.History, ro, v1alpha1.RolloutFailed, s.now, fmt.Sprintf("in phase %s: %s", ro.Phase, why))
	if err := r.record(ctx, m, next, nil, history); err != nil {
		return err
	}
	observePhase(ro, s.now)
	observeResult(s.pool, v1alpha1.RolloutFailed)
	r.event(m.M, corev1.EventTypeWarning, "RolloutFailed", "in phase %s: %s", ro.Phase, why)
	return nil
}

// record writes the machine's rollout record (nil clears it), with the
// served image when served is set and the history when history is set, in
// one server-side apply of the status under FieldOwner, on the condition
// that the Machine is still the version this pass read. m is updated with
// the server's answer.
func (r *Reconciler) record(ctx context.Context, m *plan.Machine, ro *v1alpha1.MachineRollout, served *v1alpha1.ImageRef, history []v1alpha1.RolloutHistoryEntry) error {
	st := m.M.Status.DeepCopy()
	st.Rollout = ro
	if served != nil {
		st.ServedImage = served
	}
	if history != nil {
		st.History = history
	}
	if err := r.applyMachineStatus(ctx, m.M, st); err != nil {
		return fmt.Errorf("recording the rollout of Machine %s: %w", m.M.Name, err)
	}
	if r.afterRecord != nil {
		r.afterRecord(ctx, m.M)
	}
	return nil
}

// applyMachineStatus writes the fields of st this controller owns
// (servedImage, rollout, history) in one server-side apply of m's status
// under FieldOwner, on the condition that m is still the version this pass
// read. m is updated with the server's answer.
func (r *Reconciler) applyMachineStatus(ctx context.Context, m *v1alpha1.Machine, st *v1alpha1.MachineStatus) error {
	// A request sent on a cancelled context may still be applied over
	// HTTP/2 while the caller sees only the cancellation; not sending it
	// keeps the last write of a stopping manager one whose outcome is known.
	if err := ctx.Err(); err != nil {
		return err
	}
	owned := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace},
		Status: v1alpha1.MachineStatus{ServedImage: st.ServedImage, Rollout: st.Rollout, History: st.History}}
	rv, err := ssa.ApplyStatusAt(ctx, r.Client, FieldOwner, owned, m.ResourceVersion)
	if err != nil {
		return err
	}
	m.ResourceVersion = rv
	m.Status.Rollout, m.Status.ServedImage, m.Status.History = st.Rollout, st.ServedImage, st.History
	return nil
}

// setUnschedulable cordons or uncordons the machine's node with a merge
// patch of spec.unschedulable alone, as kubectl cordon does; a missing node
// has nothing to change.
func (r *Reconciler) setUnschedulable(ctx context.Context, cs kubernetes.Interface, m *plan.Machine, on bool) error {
	if m.Node == nil || m.Node.Unschedulable == on {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	_, err := cs.CoreV1().Nodes().Patch(ctx, m.M.Spec.Hostname, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldOwner})
	switch {
	case apierrors.IsNotFound(err):
		m.Node = nil
		return nil
	case err != nil:
		verb := "uncordoning"
		if on {
			verb = "cordoning"
		}
		return fmt.Errorf("%s Node %s: %w", verb, m.M.Spec.Hostname, err)
	}
	m.Node.Unschedulable = on
	return nil
}

func (r *Reconciler) event(m *v1alpha1.Machine, typ, reason, format string, args ...any) {
	r.Recorder.Eventf(m, nil, typ, reason, "Rollout", format, args...)
}
