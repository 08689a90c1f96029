package rollout

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/machinestate"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// summarize counts the machines into s.sum; the up-to-date count is
// machinestate.UpToDate's, the rule the NodePool's updatedMachines uses.
func (r *Reconciler) summarize(s *scope) {
	sum := &s.sum
	sum.Updated, sum.InFlight, sum.Failed, sum.Pending, sum.Unavailable, sum.Unbooted, sum.DrainBlocked = 0, 0, 0, 0, 0, 0, s.drainBlocked
	if sum.Budget == 0 {
		sum.Budget, _ = plan.Budget(s.pool.Spec.Rollout.MaxUnavailable, len(s.machines))
	}
	for _, m := range s.machines {
		switch {
		case machinestate.InFlight(m.M):
			sum.InFlight++
		case plan.Failed(m.M, s.target):
			sum.Failed++
		default:
			if _, needs := plan.NeedsUpdate(m.M, s.target); needs {
				sum.Pending++
			}
		}
		if machinestate.Unbooted(m.M) {
			sum.Unbooted++
		}
		if machinestate.UpToDate(m.M, s.target) {
			sum.Updated++
		}
		if plan.Unavailable(m) {
			sum.Unavailable++
		}
	}
	if sum.InFlight > 0 {
		s.wake(r.poll())
	}
}

// writeStatus applies the rollout's part of the pool's status when it
// changed, and turns condition changes into events.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, before *v1alpha1.NodePoolStatus) error {
	pool, sum := s.pool, s.sum
	st := &pool.Status
	for _, c := range plan.Conditions(sum) {
		conditions.Set(&st.Conditions, pool.Generation, c)
	}
	st.FailedUpdates, st.UpdatingMachines, st.UnavailableMachines = int32(sum.Failed), int32(sum.InFlight), int32(sum.Unavailable)
	observeMachines(pool, s.machines, sum)
	if equality.Semantic.DeepEqual(before, st) {
		return nil
	}
	out := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace}}
	out.Status = v1alpha1.NodePoolStatus{FailedUpdates: st.FailedUpdates, UpdatingMachines: st.UpdatingMachines,
		UnavailableMachines: st.UnavailableMachines, RolloutImage: st.RolloutImage, ObservedRetry: st.ObservedRetry}
	for _, c := range st.Conditions {
		switch c.Type {
		case v1alpha1.ConditionProgressing, v1alpha1.ConditionPaused, v1alpha1.ConditionHalted, v1alpha1.ConditionComplete:
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	if err := ssa.ApplyStatus(ctx, r.Client, FieldOwner, out); err != nil {
		return fmt.Errorf("applying the rollout status of NodePool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	conditions.EmitTransitions(r.Recorder, pool, before.Conditions, st.Conditions, v1alpha1.ReasonRolloutHalted, v1alpha1.ReasonFailureBudgetSpent, v1alpha1.ReasonInvalidStrategy)
	r.notifyHalt(ctx, s)
	return nil
}
