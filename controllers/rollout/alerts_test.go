package rollout_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/alertgate"
	"github.com/kubefarm/kubefarm/internal/testing/promtest"
)

// alertRules: TestAlarm fires while the test's gauge is above zero;
// SlowAlarm is pending as long as the gauge is served (it would need an
// hour to fire) and must never hold; Watchdog always fires, as in
// kube-prometheus, and the pools exclude it.
const alertRules = `groups:
- name: test
  rules:
  - alert: TestAlarm
    expr: ` + promtest.Gauge + ` > 0
  - alert: SlowAlarm
    expr: ` + promtest.Gauge + ` >= 0
    for: 1h
  - alert: Watchdog
    expr: vector(1)
`

// withAlerts gives the rollout the alert sources of the values, each read
// shared for maxAge.
func withAlerts(t *testing.T, maxAge time.Duration, values ...string) fixtureOption {
	s, err := alertgate.New(values, alertgate.Options{MaxAge: maxAge, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return func(f *fixture) { f.alerts = s }
}

// TestRolloutAlertGate, against a real Prometheus evaluating real rules:
// an alert firing before the image changes holds every machine (pending and
// excluded alerts do not); clearing it lets the rollout start; firing again
// while a machine updates lets that one finish and holds the rest; clearing
// it again lets the rollout complete.
func TestRolloutAlertGate(t *testing.T) {
	prom := promtest.Start(t, alertRules)
	prom.WaitAlert(t, "Watchdog", "firing")
	prom.WaitAlert(t, "SlowAlarm", "pending")
	prom.SetAlarm(1)
	prom.WaitAlert(t, "TestAlarm", "firing")

	f := newFixture(t, 3, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute},
		AlertGate:   &v1alpha1.AlertGate{Source: "prod", Exclude: "Watchdog"}},
		withAlerts(t, 100*time.Millisecond, "prod="+prom.URL))
	// When m00 starts, the alarm goes off again (the hook waits until
	// Prometheus says so), while m00 is in flight.
	var refired atomic.Bool
	f.setHook(func(ctx context.Context, m *v1alpha1.Machine) {
		if m.Name == "workers-m00" && m.Status.Rollout != nil && m.Status.Rollout.Phase == v1alpha1.RolloutCordoning && refired.CompareAndSwap(false, true) {
			prom.SetAlarm(2)
			for ctx.Err() == nil {
				if st, err := prom.AlertState(ctx, "TestAlarm"); err == nil && st == "firing" {
					return
				}
				time.Sleep(50 * time.Millisecond) // poll interval of the hook's wait
			}
		}
	})
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("every machine is held by TestAlarm", func() (bool, error) {
		for _, m := range []string{"workers-m00", "workers-m01", "workers-m02"} {
			if !f.heldFor(m, v1alpha1.ReasonFiringAlerts, "TestAlarm (1)") {
				return false, nil
			}
		}
		return f.poolProgressingReason() == v1alpha1.ReasonRolloutHeld, nil
	})
	c := f.held("workers-m00")
	if strings.Contains(c.Message, "Watchdog") || strings.Contains(c.Message, "SlowAlarm") {
		t.Errorf("the hold names an excluded or pending alert: %q", c.Message)
	}
	for _, m := range f.machines() {
		if m.Status.Rollout != nil {
			t.Fatalf("%s started while TestAlarm fires", m.Name)
		}
	}

	prom.SetAlarm(0)
	f.eventually("m00 is updated after the clear, m01 and m02 held by the alarm that fired during it", func() (bool, error) {
		return doneOn(f.machine("workers-m00"), f.imgB) == 1 &&
			f.heldFor("workers-m01", v1alpha1.ReasonFiringAlerts, "TestAlarm") &&
			f.heldFor("workers-m02", v1alpha1.ReasonFiringAlerts, "TestAlarm"), nil
	})
	if !refired.Load() {
		t.Fatal("the hook never fired the alarm again")
	}
	for _, name := range []string{"workers-m01", "workers-m02"} {
		if m := f.machine(name); m.Status.Rollout != nil || doneOn(m, f.imgB) != 0 {
			t.Errorf("%s started while TestAlarm fired again", name)
		}
	}

	prom.SetAlarm(0)
	f.eventually("the rollout completes once the alarm clears", func() (bool, error) { return f.complete(f.imgB), nil })
}

// TestRolloutAlertGateFailsClosed: a source that does not answer holds
// every machine (AlertsUnknown); a pool naming no configured source, or
// with a pattern that does not compile, is an invalid strategy.
func TestRolloutAlertGateFailsClosed(t *testing.T) {
	f := newFixture(t, 2, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute}, AlertGate: &v1alpha1.AlertGate{Source: "down"}},
		withAlerts(t, 100*time.Millisecond, "down=http://127.0.0.1:1"))
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("both machines are held: the source cannot be read", func() (bool, error) {
		return f.heldFor("workers-m00", v1alpha1.ReasonAlertsUnknown, "could not be read") &&
			f.heldFor("workers-m01", v1alpha1.ReasonAlertsUnknown, "could not be read"), nil
	})
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.Rollout.AlertGate.Source = "staging" })
	f.eventually("an unknown source is an invalid strategy", func() (bool, error) {
		c := meta.FindStatusCondition(f.getPool().Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonInvalidStrategy && strings.Contains(c.Message, `"staging"`), nil
	})
	for _, m := range f.machines() {
		if m.Status.Rollout != nil {
			t.Errorf("%s started with its alert gate unreadable: %+v", m.Name, m.Status.Rollout)
		}
	}
}
