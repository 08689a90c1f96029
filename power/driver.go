package power

import (
	"context"
	"errors"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Target is one machine's power control and what the manager read for it:
// the spec from the Machine and, for a BMC, the credentials and CA from the
// Secrets it names. It is built per operation and never logged: it holds a
// password.
type Target struct {
	// Machine is namespace/name of the Machine, for errors and events.
	Machine string
	Spec    v1alpha1.PowerSpec
	// Username and Password are the BMC's (spec.credentialsSecret).
	Username, Password string
	// CA is PEM certificates that verify a Redfish BMC (spec.caSecret).
	CA []byte
}

// State is a machine's power state as its control reports it.
type State string

const (
	StateOn      State = "On"
	StateOff     State = "Off"
	StateUnknown State = "Unknown"
)

// Options shape an operation that starts the machine.
type Options struct {
	// NetbootOnce makes the next boot, and only it, a network boot (for
	// servers whose local disk would otherwise boot first); it is set on
	// the BMC before the machine is powered on or cycled.
	NetbootOnce bool
}

// Driver is a power control a machine can name in spec.power.driver. Every
// method is bounded by ctx and by the driver's own timeouts, and its error
// carries the BMC's own words (a completion code, a Redfish message) so an
// operator can act on it.
type Driver interface {
	Status(ctx context.Context, t Target) (State, error)
	On(ctx context.Context, t Target, o Options) error
	Off(ctx context.Context, t Target) error
	// Cycle is a hard reset (power off then on, or the BMC's reset): the
	// machine boots again at once, without a clean shutdown.
	Cycle(ctx context.Context, t Target, o Options) error
}

// ErrUnsupported is wrapped by the error of an operation a driver cannot
// do (qmp cannot power a machine on or off).
var ErrUnsupported = errors.New("not supported by this power driver")

// ErrAuth is wrapped by the error of an operation the BMC refused for its
// credentials: retrying does not help until the Secret changes.
var ErrAuth = errors.New("the BMC refused the credentials")
