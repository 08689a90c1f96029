package power

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Drivers is the registry of power drivers by the name a Machine gives in
// spec.power.driver. package power/drivers builds the one kubefarm ships
// (it cannot live here: the drivers import this package).
type Drivers map[v1alpha1.PowerDriver]Driver

// ErrUnknownDriver is wrapped by the error of an operation whose
// spec.power.driver has no Driver: a configuration error that retrying
// will not fix.
var ErrUnknownDriver = errors.New("unknown power driver")

// ErrNoPowerControl is wrapped by the error of an operation on a Machine
// without spec.power.
var ErrNoPowerControl = errors.New("the Machine has no spec.power")

// For returns the driver registered for name, or an error naming it and
// the known ones.
func (d Drivers) For(name v1alpha1.PowerDriver) (Driver, error) {
	if drv := d[name]; drv != nil {
		return drv, nil
	}
	known := make([]string, 0, len(d))
	for n, drv := range d {
		if drv != nil {
			known = append(known, string(n))
		}
	}
	slices.Sort(known)
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownDriver, name, strings.Join(known, ", "))
}

// Warner is implemented by a driver that has something to say about how a
// machine is reached (redfish: TLS verification is off). Control shows its
// sentence in a Warning event on every operation against that machine.
type Warner interface {
	// Warning is "" when there is nothing to say. It reads only
	// t.Machine and t.Spec (no credentials).
	Warning(t Target) string
}

// ReasonInsecure is the reason of the Warning event Control records on
// every operation against a machine whose driver warns (Warner).
const ReasonInsecure = "PowerControlInsecure"

// Control drives the power of Machines: it reads a Machine's credentials
// (Resolve) and calls the Driver its spec.power.driver names. Every
// controller that touches power goes through it (machinepower, the
// rollout, machine removal), so every operation on an insecurely reached
// BMC is announced the same way.
type Control struct {
	// Reader reads the Secrets spec.power names. The manager passes its
	// API reader (uncached): the manager's cache must not hold every
	// Secret of the cluster.
	Reader  client.Reader
	Drivers Drivers
	// Recorder, when set, gets the Warning event a driver asks for
	// (Warner) before each operation.
	Recorder events.EventRecorder
}

// prepare finds the driver, shows its warning and resolves the target.
func (c Control) prepare(ctx context.Context, m *v1alpha1.Machine, op string) (Driver, Target, error) {
	if m.Spec.Power == nil {
		return nil, Target{}, fmt.Errorf("power control of Machine %s/%s: %w", m.Namespace, m.Name, ErrNoPowerControl)
	}
	d, err := c.Drivers.For(m.Spec.Power.Driver)
	if err != nil {
		return nil, Target{}, fmt.Errorf("spec.power.driver of Machine %s/%s: %w", m.Namespace, m.Name, err)
	}
	t, err := Resolve(ctx, c.Reader, m)
	if err != nil {
		return nil, Target{}, err
	}
	if w, ok := d.(Warner); ok && c.Recorder != nil {
		if msg := w.Warning(t); msg != "" {
			c.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonInsecure, op, "%s", msg)
		}
	}
	return d, t, nil
}

// Status reads the machine's power state.
func (c Control) Status(ctx context.Context, m *v1alpha1.Machine) (State, error) {
	d, t, err := c.prepare(ctx, m, "PowerStatus")
	if err != nil {
		return StateUnknown, err
	}
	return d.Status(ctx, t)
}

// On powers the machine on.
func (c Control) On(ctx context.Context, m *v1alpha1.Machine, o Options) error {
	d, t, err := c.prepare(ctx, m, "PowerOn")
	if err != nil {
		return err
	}
	return d.On(ctx, t, o)
}

// Off powers the machine off at once (no clean shutdown). Machine removal
// calls it for a machine with spec.power; a Machine without it is an
// error wrapping ErrNoPowerControl.
func (c Control) Off(ctx context.Context, m *v1alpha1.Machine) error {
	d, t, err := c.prepare(ctx, m, "PowerOff")
	if err != nil {
		return err
	}
	return d.Off(ctx, t)
}

// Cycle hard-resets the machine (powers it on when it is off).
func (c Control) Cycle(ctx context.Context, m *v1alpha1.Machine, o Options) error {
	d, t, err := c.prepare(ctx, m, "PowerCycle")
	if err != nil {
		return err
	}
	return d.Cycle(ctx, t, o)
}

// Reason is the PowerControl condition's reason for the outcome err of a
// read or an operation.
func Reason(err error) string {
	switch {
	case err == nil:
		return v1alpha1.ReasonPowerRead
	case errors.Is(err, ErrCredentialsMissing):
		return v1alpha1.ReasonPowerCredentialsMissing
	case errors.Is(err, ErrAuth):
		return v1alpha1.ReasonPowerAuthFailed
	}
	return v1alpha1.ReasonPowerFailed
}
