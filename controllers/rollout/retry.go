package rollout

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// retry acts on the kubefarm.io/rollout-retry annotation: a value not yet
// observed forgets the failed updates, uncordoning the nodes the rollout
// had cordoned, so the machines are candidates again. observedRetry is
// written last (with the status), so a pass that dies halfway does it all
// again; both steps are idempotent.
func (r *Reconciler) retry(ctx context.Context, s *scope) (bool, error) {
	want := s.pool.Annotations[v1alpha1.AnnotationRolloutRetry]
	if want == "" || want == s.pool.Status.ObservedRetry {
		return false, nil
	}
	for i := range s.machines {
		m := &s.machines[i]
		ro := m.M.Status.Rollout
		if ro == nil || ro.Phase != v1alpha1.RolloutFailed {
			continue
		}
		if !ro.WasCordoned {
			if err := r.setUnschedulable(ctx, s.cs, m, false); err != nil {
				return false, err
			}
		}
		if err := r.record(ctx, m, nil, nil, nil); err != nil {
			return false, err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutRetried", "the failed update is forgotten (%s=%s); the machine is a candidate again",
			v1alpha1.AnnotationRolloutRetry, want)
	}
	s.pool.Status.ObservedRetry = want
	return false, nil
}
