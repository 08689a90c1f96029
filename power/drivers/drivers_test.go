package drivers_test

import (
	"testing"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/drivers"
	"github.com/kubefarm/kubefarm/power/ipmi"
	"github.com/kubefarm/kubefarm/power/qmp"
	"github.com/kubefarm/kubefarm/power/redfish"
)

// TestNewHasEveryDriverOfTheAPI: every name the API's enum admits has its
// driver, of the right package; only redfish warns.
func TestNewHasEveryDriverOfTheAPI(t *testing.T) {
	d := drivers.New()
	for name, want := range map[v1alpha1.PowerDriver]power.Driver{
		v1alpha1.PowerQMP: qmp.Driver{}, v1alpha1.PowerIPMI: ipmi.Driver{}, v1alpha1.PowerRedfish: redfish.Driver{},
	} {
		got, err := d.For(name)
		if err != nil || got != want {
			t.Errorf("For(%s) = %T, %v; want %T", name, got, err, want)
		}
		_, warns := got.(power.Warner)
		if warns != (name == v1alpha1.PowerRedfish) {
			t.Errorf("%s: warns %t", name, warns)
		}
	}
	if len(d) != 3 {
		t.Errorf("%d drivers, want 3", len(d))
	}
}
