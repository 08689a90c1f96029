package power_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

// nopDriver is a Driver that does nothing: For only hands it out.
type nopDriver struct{ power.Driver }

func TestDriversFor(t *testing.T) {
	d := power.Drivers{v1alpha1.PowerQMP: nopDriver{}, v1alpha1.PowerIPMI: nil}
	if got, err := d.For(v1alpha1.PowerQMP); err != nil || got != (nopDriver{}) {
		t.Fatalf("For(qmp) = %v, %v", got, err)
	}
	for _, drivers := range []power.Drivers{d, {}, nil} {
		_, err := drivers.For(v1alpha1.PowerIPMI)
		if !errors.Is(err, power.ErrUnknownDriver) || !strings.Contains(err.Error(), `"ipmi"`) {
			t.Errorf("For(ipmi) with %v: %v, want ErrUnknownDriver naming ipmi", drivers, err)
		}
	}
	if _, err := d.For("redfish"); err == nil || !strings.Contains(err.Error(), "known: qmp)") {
		t.Errorf("error %v does not list the known drivers (a nil entry is not one)", err)
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, v1alpha1.ReasonPowerRead},
		{fmt.Errorf("Machine a/b: %w", power.ErrCredentialsMissing), v1alpha1.ReasonPowerCredentialsMissing},
		{fmt.Errorf("Machine a/b: ipmi power status of 10.0.0.1:623: %w: Unauthorized name", power.ErrAuth), v1alpha1.ReasonPowerAuthFailed},
		{fmt.Errorf("Machine a/b: %w", context.DeadlineExceeded), v1alpha1.ReasonPowerFailed},
		{fmt.Errorf("qmp cannot: %w", power.ErrUnsupported), v1alpha1.ReasonPowerFailed},
		{fmt.Errorf("Machine a/b: %w", power.ErrUnknownDriver), v1alpha1.ReasonPowerFailed},
	} {
		if got := power.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestParseRequest(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 20, 30, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  power.Request
		err   string
	}{
		{"on@2026-03-01T10:20:30Z", power.Request{Op: power.OpOn, Time: at}, ""},
		{"off@2026-03-01T10:20:30Z", power.Request{Op: power.OpOff, Time: at}, ""},
		{"cycle@2026-03-01T10:20:30Z", power.Request{Op: power.OpCycle, Time: at}, ""},
		{"cycle,netboot@2026-03-01T10:20:30Z", power.Request{Op: power.OpCycle, NetbootOnce: true, Time: at}, ""},
		{"on,netboot@2026-03-01T11:20:30+01:00", power.Request{Op: power.OpOn, NetbootOnce: true, Time: at}, ""},
		// Sub-second precision is dropped: status keeps seconds.
		{"on@2026-03-01T10:20:30.75Z", power.Request{Op: power.OpOn, Time: at}, ""},
		{"off,netboot@2026-03-01T10:20:30Z", power.Request{}, "off boots nothing"},
		{"reboot@2026-03-01T10:20:30Z", power.Request{}, `operation "reboot"`},
		{"Cycle@2026-03-01T10:20:30Z", power.Request{}, `operation "Cycle"`},
		{"cycle,pxe@2026-03-01T10:20:30Z", power.Request{}, `"pxe" is not a flag`},
		{"cycle", power.Request{}, "no @<time>"},
		{"cycle@yesterday", power.Request{}, "not RFC3339"},
		{"", power.Request{}, "no @<time>"},
	} {
		got, err := power.ParseRequest(tc.value)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.value, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.value, err, tc.err)
		case tc.err == "" && got.String() != strings.Replace(strings.Replace(tc.value, ".75", "", 1), "11:20:30+01:00", "10:20:30Z", 1):
			t.Errorf("%q: String() = %q", tc.value, got.String())
		}
	}
}

func TestOperation(t *testing.T) {
	for r, want := range map[power.Request]string{
		{Op: power.OpOn}: "On", {Op: power.OpOff}: "Off", {Op: power.OpCycle}: "Cycle",
		{Op: power.OpCycle, NetbootOnce: true}: "Cycle,NetbootOnce", {Op: power.OpOn, NetbootOnce: true}: "On,NetbootOnce",
	} {
		if got := r.Operation(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
		if got := power.LastOperation(r, power.OutcomeSucceeded); got != want+" Succeeded" || len(got) > 64 {
			t.Errorf("%+v: LastOperation %q", r, got)
		}
	}
}

func TestHandled(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 20, 30, 0, time.UTC)
	r := power.Request{Op: power.OpCycle, NetbootOnce: true, Time: at}
	status := func(op string, when time.Time) *v1alpha1.MachinePowerStatus {
		t := metav1.NewTime(when)
		return &v1alpha1.MachinePowerStatus{State: v1alpha1.PowerOn, LastOperation: op, LastOperationTime: &t}
	}
	for _, tc := range []struct {
		name    string
		st      *v1alpha1.MachinePowerStatus
		handled bool
		want    power.Outcome
	}{
		{"no status", nil, false, ""},
		{"never an operation", &v1alpha1.MachinePowerStatus{State: v1alpha1.PowerOn}, false, ""},
		{"an older one", status("Off Succeeded", at.Add(-time.Second)), false, ""},
		{"this one, pending", status("Cycle,NetbootOnce Pending", at), true, power.OutcomePending},
		{"this one, done", status("Cycle,NetbootOnce Succeeded", at), true, power.OutcomeSucceeded},
		{"this one, failed", status("Cycle,NetbootOnce Failed", at), true, power.OutcomeFailed},
		{"this one, interrupted", status("Cycle,NetbootOnce Interrupted", at), true, power.OutcomeInterrupted},
		{"another in the same second", status("Off Succeeded", at), true, power.OutcomeSuperseded},
		{"a later one", status("Cycle,NetbootOnce Succeeded", at.Add(time.Minute)), true, power.OutcomeSuperseded},
	} {
		got, handled := power.Handled(tc.st, r)
		if handled != tc.handled || got != tc.want {
			t.Errorf("%s: %q, %t; want %q, %t", tc.name, got, handled, tc.want, tc.handled)
		}
	}
}
