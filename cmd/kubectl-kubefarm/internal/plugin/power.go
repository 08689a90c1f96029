package plugin

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

// PowerRequest is the request `kubectl kubefarm power` writes for m: its
// time is now, to the second, or a second after the last request the
// controller handled when the clock has not passed it (two requests in one
// second would otherwise read as one).
func PowerRequest(m *v1alpha1.Machine, op power.Op, netboot bool, now time.Time) power.Request {
	at := now.UTC().Truncate(time.Second)
	if st := m.Status.Power; st != nil && st.LastOperationTime != nil && !at.After(st.LastOperationTime.Time) {
		at = st.LastOperationTime.Time.UTC().Add(time.Second)
	}
	return power.Request{Op: op, NetbootOnce: netboot, Time: at}
}

// PowerRequestPatch is the JSON merge patch that sets the
// kubefarm.io/power-request annotation and touches nothing else.
func PowerRequestPatch(r power.Request) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationPowerRequest: r.String()}}})
	return b
}

// PowerResult says whether the controller finished r on m, and how:
// done is false while it is not recorded or Pending; failed is true for
// any outcome but Succeeded.
func PowerResult(m *v1alpha1.Machine, r power.Request) (done, failed bool, outcome power.Outcome) {
	outcome, handled := power.Handled(m.Status.Power, r)
	if !handled || outcome == power.OutcomePending {
		return false, false, outcome
	}
	return true, outcome != power.OutcomeSucceeded, outcome
}

// PowerStatus is `kubectl kubefarm power status`: the state and when it
// was read, the last operation, and the PowerControl condition.
func PowerStatus(m *v1alpha1.Machine, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine %s/%s\n", m.Namespace, m.Name)
	if p := m.Spec.Power; p != nil {
		fmt.Fprintf(&b, "Driver:         %s %s\n", p.Driver, p.Address)
	} else {
		b.WriteString("Driver:         none (no spec.power)\n")
	}
	st := m.Status.Power
	if st == nil {
		b.WriteString("State:          not read yet\n")
	} else {
		fmt.Fprintf(&b, "State:          %s (read %s ago, %s)\n", st.State, Age(now, st.ReadTime), st.ReadTime.UTC().Format(time.RFC3339))
		if st.LastOperationTime != nil {
			fmt.Fprintf(&b, "Last operation: %s (requested %s)\n", st.LastOperation, st.LastOperationTime.UTC().Format(time.RFC3339))
		}
	}
	if v := m.Annotations[v1alpha1.AnnotationPowerRequest]; v != "" {
		fmt.Fprintf(&b, "Request:        %s=%s\n", v1alpha1.AnnotationPowerRequest, v)
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionPowerControl); c != nil {
		fmt.Fprintf(&b, "PowerControl:   %s %s (since %s): %s\n", c.Status, c.Reason, Age(now, c.LastTransitionTime), c.Message)
	} else {
		b.WriteString("PowerControl:   none: kubefarm-manager has not reported on this machine\n")
	}
	return b.String()
}
