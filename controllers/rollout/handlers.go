package rollout

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/notify"
	"github.com/kubefarm/kubefarm/power"
)

// The phase handlers: each does its phase's side effect (idempotently) and
// records the next phase when the phase is complete.

func (r *Reconciler) cordoning(ctx context.Context, s *scope, m *plan.Machine) (bool, error) {
	if err := r.setUnschedulable(ctx, s.cs, m, true); err != nil {
		return false, err
	}
	if err := r.transition(ctx, s, m, v1alpha1.RolloutDraining, "evicting the node's pods"); err != nil {
		return false, err
	}
	r.notify(ctx, s, notify.EventDrainStarting, m, "")
	return true, nil
}

func (r *Reconciler) draining(ctx context.Context, s *scope, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	res, err := drain.Step(ctx, s.cs, m.M.Spec.Hostname)
	if err != nil {
		return false, err
	}
	if res.Remaining == 0 {
		next := plan.Next(ro, v1alpha1.RolloutRebooting, s.now, "waiting for kubefarm-agent to reboot into the target image")
		if lb := m.M.Status.LastBoot; lb != nil {
			// A reboot out of turn since the start came back on the old
			// image; the proof of the update's reboot is a boot after this one.
			next.PreviousBootID = lb.BootID
		}
		target := ro.TargetImage
		if err := r.record(ctx, m, next, &target, nil); err != nil {
			return false, err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutRebooting", "drained; serving BootImage %s (%s) from the next boot and asking the machine to reboot",
			target.Name, target.Digest)
		return true, nil
	}
	msg := drainMessage(res)
	if len(res.Blocked) > 0 && s.drainBlocked == "" {
		s.drainBlocked = m.M.Name + ": " + msg
	}
	if expired, left := plan.Expired(ro.PhaseStartTime, s.pool.Spec.Rollout.DrainTimeout, s.now); expired {
		if s.pool.Spec.Rollout.DrainTimeoutPolicy == v1alpha1.DrainSkip {
			next := plan.Next(ro, v1alpha1.RolloutUncordoning, s.now, "drain timed out, skipping this machine for now: "+msg)
			next.Result = v1alpha1.RolloutSkipped
			if err := r.record(ctx, m, next, nil, nil); err != nil {
				return false, err
			}
			r.event(m.M, corev1.EventTypeWarning, "DrainTimedOut", "skipping the machine for now: %s", msg)
			return true, nil
		}
		return true, r.fail(ctx, s, m, "drain timed out: "+msg)
	} else {
		s.wake(min(left, r.poll()))
	}
	if len(res.Blocked) > 0 && ro.Message != msg {
		// The blocked pods change rarely; one event per change, not per pass.
		next := ro.DeepCopy()
		next.Message = msg
		if err := r.record(ctx, m, next, nil, nil); err != nil {
			return false, err
		}
		r.event(m.M, corev1.EventTypeWarning, "DrainBlocked", "%s", msg)
	}
	return false, nil
}

// drainMessage names what holds a drain up, a few pods at most.
func drainMessage(res drain.Result) string {
	if len(res.Blocked) == 0 {
		return fmt.Sprintf("%d pods still terminating", res.Remaining)
	}
	msg := fmt.Sprintf("%d pods left; eviction refused for", res.Remaining)
	for i, b := range res.Blocked {
		if i == 3 {
			msg += fmt.Sprintf(" and %d more", len(res.Blocked)-3)
			break
		}
		msg += fmt.Sprintf(" %s (%s)", b.Pod, b.Reason)
	}
	return msg
}

func (r *Reconciler) rebooting(ctx context.Context, s *scope, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	if plan.Rebooted(m.M) {
		return true, r.transition(ctx, s, m, v1alpha1.RolloutVerifying,
			fmt.Sprintf("rebooted (boot %s); waiting for the target image and a Ready node", m.M.Status.LastBoot.BootID))
	}
	st := s.pool.Spec.Rollout
	if expired, left := plan.Expired(ro.PhaseStartTime, st.BootTimeout, s.now); expired {
		return true, r.fail(ctx, s, m, fmt.Sprintf("the machine reported no new boot within %s", st.BootTimeout.Duration))
	} else {
		s.wake(min(left, r.poll()))
	}
	if m.M.Spec.Power == nil || r.Power == nil || ro.PowerCycleTime != nil {
		return false, nil
	}
	if plan.BootStarted(m.M) {
		// The agent rebooted it and the new boot is under way; a boot that
		// hangs from here is bootTimeout's to fail, not a reset's to restart.
		return false, nil
	}
	expired, left := plan.Expired(ro.PhaseStartTime, st.PowerCycleAfter, s.now)
	if !expired {
		s.wake(left)
		return false, nil
	}
	next := ro.DeepCopy()
	t := metav1.NewTime(s.now)
	next.PowerCycleTime = &t
	next.Message = fmt.Sprintf("kubefarm-agent did not reboot within %s; reset through %s", st.PowerCycleAfter.Duration, m.M.Spec.Power.Driver)
	if err := r.record(ctx, m, next, nil, nil); err != nil {
		return false, err
	}
	// A BMC's machine may boot from its disk first; the one-time network
	// boot makes it come back to kubefarm-pxe and the new image. A qmp
	// machine (the test farm's) boots from the network anyway, and QMP
	// has no one-time boot device.
	opts := power.Options{NetbootOnce: m.M.Spec.Power.Driver != v1alpha1.PowerQMP}
	if err := r.Power.Cycle(ctx, m.M, opts); err != nil {
		// Recorded before it was tried, so it is not tried again: the boot
		// timeout decides. Said loudly, with the BMC's words.
		r.event(m.M, corev1.EventTypeWarning, "PowerCycleFailed", "%v", err)
		return false, nil
	}
	r.event(m.M, corev1.EventTypeNormal, "PowerCycled", "%s", next.Message)
	return false, nil
}

func (r *Reconciler) verifying(ctx context.Context, s *scope, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	st := s.pool.Spec.Rollout
	v := plan.Verify(*m)
	if !v.Good {
		if lb := m.M.Status.LastBoot; lb != nil && lb.ImageDigest != ro.TargetImage.Digest {
			// A finished boot of another image will not turn into the
			// target by waiting.
			return true, r.fail(ctx, s, m, v.Why)
		}
		if expired, left := plan.Expired(ro.PhaseStartTime, st.BootTimeout, s.now); expired {
			return true, r.fail(ctx, s, m, fmt.Sprintf("not verified within %s: %s", st.BootTimeout.Duration, v.Why))
		} else {
			s.wake(min(left, r.poll()))
		}
		if ro.ReadySince != nil || ro.Message != v.Why {
			next := ro.DeepCopy()
			next.ReadySince, next.Message = nil, v.Why
			return false, r.record(ctx, m, next, nil, nil)
		}
		return false, nil
	}
	if ro.ReadySince == nil {
		next := ro.DeepCopy()
		t := metav1.NewTime(s.now)
		next.ReadySince = &t
		next.Message = fmt.Sprintf("runs the target image and is Ready; verified after %ds", ptr.Deref(st.MinReadySeconds, v1alpha1.DefaultMinReadySeconds))
		if err := r.record(ctx, m, next, nil, nil); err != nil {
			return false, err
		}
		ro = next
	}
	minReady := ptr.Deref(st.MinReadySeconds, v1alpha1.DefaultMinReadySeconds)
	// readySince is stored in whole seconds (metav1.Time), rounded down:
	// one second more guarantees the node was Ready for minReady at least.
	if left := ro.ReadySince.Add(time.Duration(minReady)*time.Second + time.Second).Sub(s.now); left > 0 {
		s.wake(left)
		return false, nil
	}
	next := plan.Next(ro, v1alpha1.RolloutUncordoning, s.now, "verified; uncordoning")
	next.Result = v1alpha1.RolloutDone
	if err := r.record(ctx, m, next, nil, nil); err != nil {
		return false, err
	}
	r.event(m.M, corev1.EventTypeNormal, "RolloutVerified", "boot %s runs %s (%s) and stayed Ready for %ds",
		m.M.Status.LastBoot.BootID, ro.TargetImage.Name, ro.TargetImage.Digest, minReady)
	r.notify(ctx, s, notify.EventRebootVerified, m, "boot "+m.M.Status.LastBoot.BootID)
	return true, nil
}

func (r *Reconciler) uncordoning(ctx context.Context, s *scope, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	if !ro.WasCordoned {
		if err := r.setUnschedulable(ctx, s.cs, m, false); err != nil {
			return false, err
		}
	}
	result := ro.Result
	if result == "" {
		result = v1alpha1.RolloutDone
	}
	msg := "updated"
	if ro.WasCordoned {
		msg = "updated; the node stays cordoned, as it was before the update"
	}
	if result == v1alpha1.RolloutSkipped {
		msg = ro.Message
	}
	history := plan.Finished(m.M.Status.History, ro, result, s.now, msg)
	if err := r.record(ctx, m, nil, nil, history); err != nil {
		return false, err
	}
	observePhase(ro, s.now)
	observeResult(s.pool, result)
	r.event(m.M, corev1.EventTypeNormal, "Rollout"+string(result), "%s (%s): %s", ro.TargetImage.Name, ro.TargetImage.Digest, msg)
	return true, nil
}
