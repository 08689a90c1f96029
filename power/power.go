package power

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power/qmp"
)

// Cycler power-cycles a machine (a hard reset: the machine netboots again).
//
// A nil error means the reset was requested and acknowledged by the power
// control, not that the machine has booted. An error may still follow a
// reset that happened (the acknowledgement was lost), so a caller records
// its intent before calling, as the rollout does with powerCycleTime.
type Cycler interface {
	PowerCycle(ctx context.Context, spec v1alpha1.PowerSpec) error
}

// ErrUnknownDriver is wrapped by the error of a PowerCycle whose
// spec.Driver has no Cycler: a configuration error that retrying will not
// fix.
var ErrUnknownDriver = errors.New("unknown power driver")

// Drivers dispatches on spec.Driver; an unknown driver is an error naming
// it. Drivers is itself a Cycler.
type Drivers map[v1alpha1.PowerDriver]Cycler

// New returns the default drivers: qmp.
func New() Drivers {
	return Drivers{v1alpha1.PowerQMP: qmp.Driver{}}
}

// PowerCycle resets the machine through the Cycler registered for
// spec.Driver.
func (d Drivers) PowerCycle(ctx context.Context, spec v1alpha1.PowerSpec) error {
	c := d[spec.Driver]
	if c == nil {
		known := make([]string, 0, len(d))
		for name, c := range d {
			if c != nil {
				known = append(known, string(name))
			}
		}
		slices.Sort(known)
		return fmt.Errorf("%w %q for %s (known: %s)", ErrUnknownDriver, spec.Driver, spec.Address, strings.Join(known, ", "))
	}
	return c.PowerCycle(ctx, spec)
}

// Recorder is a fake Cycler for controller tests: it records every call and
// returns the error set with SetErr (nil by default). It resets nothing. The
// zero value is ready to use and it is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	err   error
	calls []v1alpha1.PowerSpec
}

// PowerCycle records spec and returns the error set with SetErr.
func (r *Recorder) PowerCycle(_ context.Context, spec v1alpha1.PowerSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, spec)
	return r.err
}

// SetErr sets the error later calls return; nil makes them succeed.
func (r *Recorder) SetErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// Calls returns the specs of the calls so far, oldest first, including those
// that returned an error.
func (r *Recorder) Calls() []v1alpha1.PowerSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}
