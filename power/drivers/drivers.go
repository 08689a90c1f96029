// Package drivers is the registry of the power drivers kubefarm ships, by
// the name a Machine gives in spec.power.driver: qmp, ipmi and redfish. It
// is apart from package power because the drivers import that package.
package drivers

import (
	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/ipmi"
	"github.com/kubefarm/kubefarm/power/qmp"
	"github.com/kubefarm/kubefarm/power/redfish"
)

// New returns every driver, each with its default timeouts.
func New() power.Drivers {
	return power.Drivers{
		v1alpha1.PowerQMP:     qmp.Driver{},
		v1alpha1.PowerIPMI:    ipmi.Driver{},
		v1alpha1.PowerRedfish: redfish.Driver{},
	}
}
