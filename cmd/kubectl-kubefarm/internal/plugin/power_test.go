package plugin

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

func TestPowerRequest(t *testing.T) {
	m := &v1alpha1.Machine{}
	at := now.Add(700 * time.Millisecond)
	if r := PowerRequest(m, power.OpCycle, true, at); r.String() != "cycle,netboot@2026-11-24T12:00:00Z" {
		t.Errorf("first request: %s", r)
	}
	// The last request handled is this second: the next is a second later.
	m.Status.Power = &v1alpha1.MachinePowerStatus{LastOperation: "Cycle,NetbootOnce Succeeded", LastOperationTime: &metav1.Time{Time: now}}
	r := PowerRequest(m, power.OpOff, false, at)
	if r.String() != "off@2026-11-24T12:00:01Z" {
		t.Errorf("a second request in the same second: %s", r)
	}
	if done, _, _ := PowerResult(m, r); done {
		t.Error("the new request reads as done before the controller handled it")
	}
	m.Status.Power.LastOperation, m.Status.Power.LastOperationTime = "Off Pending", &metav1.Time{Time: r.Time}
	if done, _, _ := PowerResult(m, r); done {
		t.Error("Pending reads as done")
	}
	m.Status.Power.LastOperation = "Off Failed"
	if done, failed, outcome := PowerResult(m, r); !done || !failed || outcome != power.OutcomeFailed {
		t.Errorf("Failed: %t %t %s", done, failed, outcome)
	}
	m.Status.Power.LastOperation = "Off Succeeded"
	if done, failed, _ := PowerResult(m, r); !done || failed {
		t.Errorf("Succeeded: %t %t", done, failed)
	}
}
