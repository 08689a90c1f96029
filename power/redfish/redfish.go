// Package redfish drives a bare-metal machine's power through its BMC's
// Redfish service (DMTF Redfish 1.x over HTTPS), with
// github.com/stmcginnis/gofish as the client: power state, On, ForceOff, a
// hard reset, and a one-time network boot set on the BMC before the machine
// starts.
//
// Every operation opens its own connection and session and logs the session
// out when it returns, whatever happened: BMCs hold few sessions (often four
// to sixteen), and a manager that leaked one per reconcile would lock the
// operator out of the BMC's own web console.
//
// Every operation is bounded: by the caller's context, by Driver.Timeout
// (through both the context and the HTTP client), and by at most two
// retries of an error that a second try can cure (a refused connection, a
// 5xx answer; see transport.go). Errors name the Machine, the operation and
// the BMC, and carry the BMC's own Redfish message; a 401 or 403 wraps
// power.ErrAuth.
//
// TLS: the BMC's certificate is verified against Target.CA when the Machine
// names a caSecret (a pool of exactly those certificates, not added to the
// system roots), else against the system roots. Only spec.insecureSkipVerify
// turns verification off, and then every error says so and [Warning]
// returns the sentence the caller must show in its Warning event: this
// package emits no events and writes no logs itself.
package redfish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stmcginnis/gofish"
	gfredfish "github.com/stmcginnis/gofish/redfish"

	"github.com/kubefarm/kubefarm/power"
)

// DefaultTimeout bounds one operation (connect, session, every request,
// logout) when Driver.Timeout is zero. A BMC answers a reset in about a
// second; 20 s leaves room for a slow one and for the retries.
const DefaultTimeout = 20 * time.Second

// Driver is the redfish power.Driver. The zero value is ready to use; it
// holds no connection between calls.
type Driver struct {
	// Timeout bounds one operation; zero means DefaultTimeout. The
	// context's own deadline applies as well.
	Timeout time.Duration
	// Backoff is the wait before the first retry (doubled before the
	// second); zero means defaultBackoff. Tests shorten it.
	Backoff time.Duration
}

var (
	_ power.Driver = Driver{}
	_ power.Warner = Driver{}
)

// Warning is the package's Warning: power.Control records it in a Warning
// event on every operation.
func (Driver) Warning(t power.Target) string { return Warning(t) }

// Warning is the sentence a caller shows (in the Warning event of the
// operation) when the target's BMC is reached without certificate
// verification; "" when it is verified.
func Warning(t power.Target) string {
	if !t.Spec.InsecureSkipVerify {
		return ""
	}
	return fmt.Sprintf("machine %s: the Redfish BMC at %s is reached with TLS certificate verification off "+
		"(spec.power.insecureSkipVerify): anyone on the path to it can read its password", t.Machine, t.Spec.Address)
}

// Status reads the system's PowerState.
func (d Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	state := power.StateUnknown
	err := d.do(ctx, t, "status", func(s *gfredfish.ComputerSystem) error {
		state = stateOf(s.PowerState)
		return nil
	})
	return state, err
}

// On powers the system on (ResetType On), first setting a one-time Pxe
// boot override when o.NetbootOnce. A system already on is left alone and
// its boot override untouched: On is idempotent, and many BMCs refuse On
// for a running system.
func (d Driver) On(ctx context.Context, t power.Target, o power.Options) error {
	return d.do(ctx, t, "power on", func(s *gfredfish.ComputerSystem) error {
		if stateOf(s.PowerState) == power.StateOn {
			return nil
		}
		rt, err := chooseReset(opOn, s.PowerState, s.SupportedResetTypes)
		if err != nil {
			return err
		}
		return resetWithBoot(s, rt, o)
	})
}

// Off forces the system off (ResetType ForceOff: no clean shutdown; the
// rollout turns power off only when the agent did not answer). A system
// already off is left alone.
func (d Driver) Off(ctx context.Context, t power.Target) error {
	return d.do(ctx, t, "power off", func(s *gfredfish.ComputerSystem) error {
		if stateOf(s.PowerState) == power.StateOff {
			return nil
		}
		rt, err := chooseReset(opOff, s.PowerState, s.SupportedResetTypes)
		if err != nil {
			return err
		}
		if err := s.Reset(rt); err != nil {
			return fmt.Errorf("reset %s: %w", rt, err)
		}
		return nil
	})
}

// Cycle hard-resets the system (PowerCycle when the BMC lists it, else
// ForceRestart; On when it is off), first setting a one-time Pxe boot
// override when o.NetbootOnce.
func (d Driver) Cycle(ctx context.Context, t power.Target, o power.Options) error {
	return d.do(ctx, t, "power cycle", func(s *gfredfish.ComputerSystem) error {
		rt, err := chooseReset(opCycle, s.PowerState, s.SupportedResetTypes)
		if err != nil {
			return err
		}
		return resetWithBoot(s, rt, o)
	})
}

// resetWithBoot sets the one-time network boot, when asked, and resets.
// The override goes first: set after the reset, the machine would already
// be booting from its disk.
func resetWithBoot(s *gfredfish.ComputerSystem, rt gfredfish.ResetType, o power.Options) error {
	if o.NetbootOnce {
		err := s.SetBoot(gfredfish.Boot{
			BootSourceOverrideTarget:  gfredfish.PxeBootSourceOverrideTarget,
			BootSourceOverrideEnabled: gfredfish.OnceBootSourceOverrideEnabled,
		})
		if err != nil {
			return fmt.Errorf("setting a one-time Pxe boot override: %w", err)
		}
	}
	if err := s.Reset(rt); err != nil {
		return fmt.Errorf("reset %s: %w", rt, err)
	}
	return nil
}

// do runs one operation: it parses the address, connects (a session when
// the service offers one, else HTTP basic authentication), selects the
// system, runs op on it and logs out. Every error is described for the
// operator by describe.
func (d Driver) do(ctx context.Context, t power.Target, opName string, op func(*gfredfish.ComputerSystem) error) error {
	fail := func(err error) error { return describe(t, opName, err) }
	addr, err := parseAddress(t.Spec.Address, t.Spec.InsecureSkipVerify)
	if err != nil {
		return fail(err)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := httpClient(t, timeout, d.Backoff)
	if err != nil {
		return fail(err)
	}
	defer client.CloseIdleConnections()

	sessions, err := sessionsLink(ctx, client, addr.Endpoint)
	if err != nil {
		return fail(err)
	}
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:   addr.Endpoint,
		Username:   t.Username,
		Password:   t.Password,
		HTTPClient: client,
		// Basic authentication only when the service has no session
		// service (sushy-tools has none); a session is what BMCs expect
		// and is logged out below.
		BasicAuth: sessions == "",
	})
	if err != nil {
		return fail(fmt.Errorf("connecting: %w", err))
	}
	// Logout deletes the session (a no-op under basic authentication).
	// It runs under the operation's context: after a timeout the BMC
	// expires the session itself.
	defer c.Logout()

	sys, err := system(c, addr.SystemPath)
	if err != nil {
		return fail(err)
	}
	if err := op(sys); err != nil {
		return fail(err)
	}
	return nil
}

// system is the ComputerSystem at path, or the service's only one.
func system(c *gofish.APIClient, path string) (*gfredfish.ComputerSystem, error) {
	if path != "" {
		s, err := gfredfish.GetComputerSystem(c, path)
		if err != nil {
			return nil, fmt.Errorf("reading the system %s: %w", path, err)
		}
		return s, nil
	}
	systems, err := c.Service.Systems()
	if err != nil {
		return nil, fmt.Errorf("listing the systems: %w", err)
	}
	ids := make([]string, len(systems))
	for i, s := range systems {
		ids[i] = s.ODataID
	}
	i, err := selectSystem(ids)
	if err != nil {
		return nil, err
	}
	return systems[i], nil
}

// sessionsLink reads the service root's Links.Sessions: gofish's Service
// keeps it unexported, and the choice between a session and basic
// authentication has to be made before gofish connects.
func sessionsLink(ctx context.Context, client *http.Client, endpoint string) (string, error) {
	var root struct {
		Links struct {
			Sessions struct {
				ID string `json:"@odata.id"`
			}
		}
	}
	if err := getJSON(ctx, client, endpoint+"/redfish/v1/", &root); err != nil {
		return "", fmt.Errorf("reading the service root: %w", err)
	}
	return root.Links.Sessions.ID, nil
}

// errNotRedfish is returned when the service root is not Redfish JSON.
var errNotRedfish = errors.New("the address does not serve a Redfish service root")
