// Package drivers is the registry of the power drivers kubefarm ships, by
// the name a Machine gives in spec.power.driver: qmp, ipmi and redfish. It
// is apart from package power because the drivers import that package.
package drivers

import (
	"fmt"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/ipmi"
	"github.com/kubefarm/kubefarm/power/qmp"
	"github.com/kubefarm/kubefarm/power/redfish"
)

// MaxTimeout is the largest Options.Timeout. A BMC that has not answered
// a reset in five minutes is not slow but gone, and a longer bound would
// hold one of the power controller's few workers for as long.
const MaxTimeout = 5 * time.Minute

// CallerMargin is what a caller's bound around one operation needs beyond
// the driver's timeout: the uncached reads of the Machine's Secrets
// (power.Control resolves them before the driver starts its clock) and an
// answer to the operation that returns as the driver's timeout ends.
const CallerMargin = 30 * time.Second

// Options shape the drivers New builds. The zero value is every driver's
// own defaults.
type Options struct {
	// Timeout bounds one operation of the BMC drivers, ipmi and redfish
	// (their sessions, requests and retries); zero is each driver's own
	// default (ipmi.DefaultTimeout, redfish.DefaultTimeout). qmp keeps
	// its own bounds: its QEMU is local and answers at once or is gone.
	Timeout time.Duration
}

// Validate refuses a negative Timeout and one above MaxTimeout.
func (o Options) Validate() error {
	if o.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative; 0 means each driver's default (ipmi %s, redfish %s)",
			o.Timeout, ipmi.DefaultTimeout, redfish.DefaultTimeout)
	}
	if o.Timeout > MaxTimeout {
		return fmt.Errorf("timeout %s is above the maximum %s", o.Timeout, MaxTimeout)
	}
	return nil
}

// CallerBound is the bound a caller should put around one operation whose
// own bound is callerDefault: callerDefault, or the drivers' Timeout plus
// CallerMargin when that is longer. A caller's shorter context would
// otherwise cut an operation the operator gave more time, and its error
// would not say which bound ended it.
func (o Options) CallerBound(callerDefault time.Duration) time.Duration {
	return max(callerDefault, o.Timeout+CallerMargin)
}

// New returns every driver, each with its default timeouts.
func New() power.Drivers { return NewWith(Options{}) }

// NewWith returns every driver, shaped by o. It does not validate o
// (Validate does): a negative or zero Timeout is each driver's default.
func NewWith(o Options) power.Drivers {
	return power.Drivers{
		v1alpha1.PowerQMP:     qmp.Driver{},
		v1alpha1.PowerIPMI:    ipmi.Driver{Timeout: o.Timeout},
		v1alpha1.PowerRedfish: redfish.Driver{Timeout: o.Timeout},
	}
}
