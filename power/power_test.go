package power_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/qmp"
)

func TestDriversDispatchesOnDriver(t *testing.T) {
	var rec power.Recorder
	drivers := power.Drivers{v1alpha1.PowerQMP: &rec}
	spec := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix:///run/m1.qmp"}
	if err := drivers.PowerCycle(context.Background(), spec); err != nil {
		t.Fatalf("PowerCycle: %v", err)
	}
	if calls := rec.Calls(); len(calls) != 1 || calls[0] != spec {
		t.Fatalf("calls = %v, want [%v]", calls, spec)
	}
}

func TestDriversUnknownDriverIsNamed(t *testing.T) {
	var rec power.Recorder
	for name, drivers := range map[string]power.Drivers{
		"other driver": {v1alpha1.PowerQMP: &rec},
		"nil entry":    {v1alpha1.PowerQMP: &rec, "redfish": nil},
		"empty":        {},
		"nil map":      nil,
	} {
		t.Run(name, func(t *testing.T) {
			err := drivers.PowerCycle(context.Background(), v1alpha1.PowerSpec{Driver: "redfish", Address: "https://bmc1"})
			if !errors.Is(err, power.ErrUnknownDriver) {
				t.Fatalf("err = %v, want ErrUnknownDriver", err)
			}
			for _, want := range []string{`"redfish"`, "https://bmc1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
	if got := rec.Calls(); len(got) != 0 {
		t.Fatalf("an unknown driver reached a Cycler: %v", got)
	}
	err := power.Drivers{v1alpha1.PowerQMP: &rec}.PowerCycle(context.Background(), v1alpha1.PowerSpec{Driver: "redfish"})
	if err == nil || !strings.Contains(err.Error(), "known: qmp") {
		t.Fatalf("error %v does not list the known drivers", err)
	}
}

func TestNewHasQMP(t *testing.T) {
	if _, ok := power.New()[v1alpha1.PowerQMP].(qmp.Driver); !ok {
		t.Fatalf("New()[%q] = %T, want qmp.Driver", v1alpha1.PowerQMP, power.New()[v1alpha1.PowerQMP])
	}
}

func TestRecorder(t *testing.T) {
	var rec power.Recorder
	var c power.Cycler = &rec
	fail := errors.New("bmc unreachable")
	a := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "tcp://m1:4444"}
	b := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "tcp://m2:4444"}

	if err := c.PowerCycle(context.Background(), a); err != nil {
		t.Fatalf("zero Recorder returned %v", err)
	}
	rec.SetErr(fail)
	if err := c.PowerCycle(context.Background(), b); err != fail {
		t.Fatalf("err = %v, want %v", err, fail)
	}
	calls := rec.Calls()
	if len(calls) != 2 || calls[0] != a || calls[1] != b {
		t.Fatalf("calls = %v, want [%v %v] (failed calls are recorded too)", calls, a, b)
	}
	calls[0].Address = "changed"
	if rec.Calls()[0] != a {
		t.Fatal("Calls returned the Recorder's own slice")
	}

	rec.SetErr(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _ = c.PowerCycle(context.Background(), a) })
	}
	wg.Wait()
	if n := len(rec.Calls()); n != 10 {
		t.Fatalf("%d calls recorded, want 10", n)
	}
}
