package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/machinestate"
)

// driveInFlight drives every machine whose update is in flight as far as
// it goes in this pass. A Machine that changed since the cache's copy (a
// boot report) waits for the next pass; the others go on.
func (r *Reconciler) driveInFlight(ctx context.Context, s *scope) (bool, error) {
	for i := range s.machines {
		if !machinestate.InFlight(s.machines[i].M) {
			continue
		}
		if err := r.drive(ctx, s, &s.machines[i]); err != nil {
			if !apierrors.IsConflict(err) {
				return false, err
			}
			s.conflicts++
		}
	}
	return false, nil
}

// startSelected starts the machines the planner selects within the budget
// and drives each as far as it goes. An invalid strategy starts nothing.
func (r *Reconciler) startSelected(ctx context.Context, s *scope) (bool, error) {
	sel, err := plan.Select(s.machines, s.target, s.pool.Spec.Rollout, s.now)
	if err != nil {
		s.sum.Invalid = err.Error()
		return true, nil
	}
	s.sel = sel
	for _, c := range sel.Start {
		m := &s.machines[c.Index]
		if err := r.record(ctx, m, plan.Start(c, s.target, s.now), nil, nil); err != nil {
			if apierrors.IsConflict(err) {
				// Stale: the next pass decides again with the new copy.
				s.conflicts++
				continue
			}
			return false, err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutStarted", "update to BootImage %s (%s) started: %s", s.target.Name, s.target.Digest, c.Reason)
		if err := r.drive(ctx, s, m); err != nil {
			if !apierrors.IsConflict(err) {
				return false, err
			}
			s.conflicts++
		}
	}
	return false, nil
}

// drive moves one in-flight machine through as many phases as it can in
// this pass.
func (r *Reconciler) drive(ctx context.Context, s *scope, m *plan.Machine) error {
	for range maxTransitionsPerPass {
		ro := m.M.Status.Rollout
		if !machinestate.InFlight(m.M) {
			return nil
		}
		h, ok := handlers[ro.Phase]
		if !ok {
			return fmt.Errorf("machine %s: unknown rollout phase %q", m.M.Name, ro.Phase)
		}
		moved, err := h(r, ctx, s, m)
		if err != nil {
			return fmt.Errorf("machine %s, phase %s: %w", m.M.Name, ro.Phase, err)
		}
		if !moved {
			return nil
		}
	}
	return nil
}

// phaseHandler does a phase's side effect (idempotently) and records the next
// phase when the phase is complete; moved says it did.
type phaseHandler func(r *Reconciler, ctx context.Context, s *scope, m *plan.Machine) (moved bool, err error)

var handlers = map[v1alpha1.RolloutPhase]phaseHandler{
	v1alpha1.RolloutCordoning:   (*Reconciler).cordoning,
	v1alpha1.RolloutDraining:    (*Reconciler).draining,
	v1alpha1.RolloutRebooting:   (*Reconciler).rebooting,
	v1alpha1.RolloutVerifying:   (*Reconciler).verifying,
	v1alpha1.RolloutUncordoning: (*Reconciler).uncordoning,
}
