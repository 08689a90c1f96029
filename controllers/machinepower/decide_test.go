package machinepower

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

func TestJitterBounds(t *testing.T) {
	const interval = 5 * time.Minute
	for r, want := range map[float64]time.Duration{0: 4 * time.Minute, 0.5: interval, 0.999999: 6 * time.Minute} {
		if got := Jitter(interval, r); (got - want).Abs() > time.Second {
			t.Errorf("Jitter(5m, %v) = %v, want %v", r, got, want)
		}
	}
	for i := range 1000 {
		r := float64(i) / 1000
		if got := Jitter(interval, r); got < 4*time.Minute || got >= 6*time.Minute {
			t.Fatalf("Jitter(5m, %v) = %v, outside [4m, 6m)", r, got)
		}
	}
}

func TestNextWait(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if got := nextWait(now, now, 5*time.Minute, 0.5); got != 5*time.Minute {
		t.Errorf("just read: %v, want 5m", got)
	}
	if got := nextWait(now, now.Add(-2*time.Minute), 5*time.Minute, 0.5); got != 3*time.Minute {
		t.Errorf("read 2m ago: %v, want 3m", got)
	}
	if got := nextWait(now, now.Add(-time.Hour), 5*time.Minute, 0.5); got != time.Second {
		t.Errorf("long overdue: %v, want the 1s floor", got)
	}
}

func TestReadDue(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	machine := func(readAgo time.Duration, condGen int64, withCond bool) *v1alpha1.Machine {
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		m.Status.Power = &v1alpha1.MachinePowerStatus{State: v1alpha1.PowerOn, ReadTime: metav1.NewTime(now.Add(-readAgo))}
		if withCond {
			m.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionPowerControl, Status: metav1.ConditionTrue, ObservedGeneration: condGen}}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		m    *v1alpha1.Machine
		want bool
	}{
		{"never read", &v1alpha1.Machine{}, true},
		{"no condition", machine(time.Second, 2, false), true},
		{"read for an older spec", machine(time.Second, 1, true), true},
		{"read a minute ago", machine(time.Minute, 2, true), false},
		{"read just under the shortest jittered interval ago", machine(4*time.Minute-time.Second, 2, true), false},
		{"read the shortest jittered interval ago", machine(4*time.Minute, 2, true), true},
	} {
		if got := readDue(now, tc.m, 5*time.Minute); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestDecideRequest(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := now.Add(-10 * time.Second)
	value := "cycle,netboot@" + at.Format(time.RFC3339)
	req := power.Request{Op: power.OpCycle, NetbootOnce: true, Time: at}
	status := func(op string, when time.Time) *v1alpha1.MachinePowerStatus {
		t := metav1.NewTime(when)
		return &v1alpha1.MachinePowerStatus{State: v1alpha1.PowerOn, LastOperation: op, LastOperationTime: &t}
	}
	for _, tc := range []struct {
		name      string
		value     string
		present   bool
		st        *v1alpha1.MachinePowerStatus
		performed time.Time
		want      requestAction
		why       string
	}{
		{"no annotation", "", false, nil, time.Time{}, requestNone, ""},
		{"a new request", value, true, nil, time.Time{}, requestPerform, ""},
		{"newer than the last one", value, true, status("Off Succeeded", at.Add(-time.Minute)), time.Time{}, requestPerform, ""},
		{"handled", value, true, status("Cycle,NetbootOnce Succeeded", at), time.Time{}, requestNone, ""},
		{"failed is handled too", value, true, status("Cycle,NetbootOnce Failed", at), time.Time{}, requestNone, ""},
		{"pending from a manager that stopped", value, true, status("Cycle,NetbootOnce Pending", at), time.Time{}, requestInterrupted, ""},
		{"pending: our own write, seen early", value, true, status("Cycle,NetbootOnce Pending", at), at, requestNone, ""},
		{"performed, the cache has not seen it", value, true, nil, at, requestNone, ""},
		{"performed an older one", value, true, nil, at.Add(-time.Minute), requestPerform, ""},
		{"invalid", "reboot@" + at.Format(time.RFC3339), true, nil, time.Time{}, requestRejected, "annotation kubefarm.io/power-request: "},
		{"empty", "", true, nil, time.Time{}, requestRejected, "no @<time>"},
		{"from the future", "on@" + now.Add(time.Hour).Format(time.RFC3339), true, nil, time.Time{}, requestRejected, "in the future"},
		{"a little ahead (skew)", "on@" + now.Add(time.Minute).Format(time.RFC3339), true, nil, time.Time{}, requestPerform, ""},
		{"too old", "on@" + now.Add(-2*time.Hour).Format(time.RFC3339), true, nil, time.Time{}, requestRejected, "never performed"},
	} {
		d := decideRequest(tc.value, tc.present, tc.st, tc.performed, now)
		if d.action != tc.want || !strings.Contains(d.why, tc.why) {
			t.Errorf("%s: %+v, want action %d saying %q", tc.name, d, tc.want, tc.why)
		}
		if tc.want == requestPerform && tc.value == value && d.req != req {
			t.Errorf("%s: request %+v, want %+v", tc.name, d.req, req)
		}
	}
}
