// Package ipmi is the power.Driver of a BMC spoken to over IPMI v2.0 LAN
// (lanplus, RMCP+), with github.com/bougou/go-ipmi.
//
// Every operation opens its own session (no state is kept between
// reconciles, and a BMC drops idle sessions anyway), always with cipher
// suite 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128): asking the BMC which
// suites it has costs 4-10 s on many BMCs and on ipmi_sim, and suite 3 is
// the one IPMI 2.0 BMCs must offer.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/kubefarm/kubefarm/power"
)

// DefaultPort is IPMI's RMCP port (UDP).
const DefaultPort = 623

const (
	// DefaultTimeout bounds one operation: the session, its commands and
	// the retries.
	DefaultTimeout = 15 * time.Second
	// exchangeTimeout is how long one request waits for its answer before
	// it counts as lost (ipmitool's lanplus waits 1 s and retries 4
	// times; a BMC answers in milliseconds or not at all).
	exchangeTimeout = 2 * time.Second
	// maxRetries is how often a step lost to the network is tried again.
	maxRetries = 2
	// firstBackoff doubles before each retry.
	firstBackoff = 250 * time.Millisecond
)

// Driver drives machines whose spec.power.driver is ipmi. The zero value
// is ready to use.
type Driver struct {
	// Timeout bounds each operation (DefaultTimeout when zero); the
	// caller's context can only shorten it.
	Timeout time.Duration
}

var _ power.Driver = Driver{}

// Status reads the chassis power state (Get Chassis Status).
func (d Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	state := power.StateUnknown
	err := d.run(ctx, t, "power status", func(ctx context.Context, c *client.Client) error {
		on, err := powerIsOn(ctx, c)
		if err == nil {
			state = stateOf(on)
		}
		return err
	})
	return state, err
}

// On powers the machine on (a no-op for the BMC when it already is), after
// setting the one-time network boot when o asks for it.
func (d Driver) On(ctx context.Context, t power.Target, o power.Options) error {
	return d.run(ctx, t, "power on", func(ctx context.Context, c *client.Client) error {
		if err := setNetbootOnce(ctx, c, o); err != nil {
			return err
		}
		return retry(ctx, "chassis control power up", func() error {
			_, err := c.ChassisControl(ctx, chassis.ChassisControlPowerUp)
			return err
		})
	})
}

// Off powers the machine off at once (no clean shutdown).
func (d Driver) Off(ctx context.Context, t power.Target) error {
	return d.run(ctx, t, "power off", func(ctx context.Context, c *client.Client) error {
		return retry(ctx, "chassis control power down", func() error {
			_, err := c.ChassisControl(ctx, chassis.ChassisControlPowerDown)
			return err
		})
	})
}

// Cycle power-cycles the machine, after setting the one-time network boot
// when o asks for it. A machine that is off is powered on instead, as
// ipmitool's "power cycle" does: the IPMI specification lets a BMC ignore
// a power cycle of a machine that is off, and the caller wants it running.
func (d Driver) Cycle(ctx context.Context, t power.Target, o power.Options) error {
	return d.run(ctx, t, "power cycle", func(ctx context.Context, c *client.Client) error {
		on, err := powerIsOn(ctx, c)
		if err != nil {
			return err
		}
		if err := setNetbootOnce(ctx, c, o); err != nil {
			return err
		}
		control := cycleControl(on)
		// Not retried once sent: a lost answer may follow a cycle that
		// happened, and a second one would reset the boot it started (and
		// find the one-time boot flag already spent).
		if _, err := c.ChassisControl(ctx, control); err != nil {
			return fmt.Errorf("chassis control %s: %w", controlName(control), err)
		}
		return nil
	})
}

// cycleControl is the chassis control that power-cycles a machine whose
// power is on (or, when it is off, powers it on).
func cycleControl(on bool) chassis.ChassisControl {
	if on {
		return chassis.ChassisControlPowerCycle
	}
	return chassis.ChassisControlPowerUp
}

func controlName(c chassis.ChassisControl) string {
	switch c {
	case chassis.ChassisControlPowerDown:
		return "power down"
	case chassis.ChassisControlPowerUp:
		return "power up"
	case chassis.ChassisControlPowerCycle:
		return "power cycle"
	}
	return fmt.Sprintf("%#x", uint8(c))
}

func stateOf(on bool) power.State {
	if on {
		return power.StateOn
	}
	return power.StateOff
}

func powerIsOn(ctx context.Context, c *client.Client) (bool, error) {
	var on bool
	err := retry(ctx, "get chassis status", func() error {
		st, err := c.GetChassisStatus(ctx)
		if err == nil {
			on = st.PowerIsOn
		}
		return err
	})
	return on, err
}

// setNetbootOnce sets the boot device to PXE for the next boot only
// (Set System Boot Options, boot flags: valid, not persistent, PXE), the
// bytes ipmitool's "chassis bootdev pxe" sends. The BIOS boot type is left
// at legacy there too: a BMC that boots UEFI applies its own.
func setNetbootOnce(ctx context.Context, c *client.Client, o power.Options) error {
	if !o.NetbootOnce {
		return nil
	}
	return retry(ctx, "set boot device pxe (next boot only)", func() error {
		return c.SetBootDevice(ctx, types.BootDeviceSelectorForcePXE, types.BIOSBootTypeLegacy, false)
	})
}

// run opens a session to t's BMC, runs fn in it and closes it, all within
// the driver's timeout, and maps the error to one naming the Machine, the
// operation and the BMC.
func (d Driver) run(ctx context.Context, t power.Target, op string, fn func(context.Context, *client.Client) error) error {
	host, port, err := ParseAddress(t.Spec.Address)
	if err != nil {
		return fmt.Errorf("ipmi %s of Machine %s: spec.power.address: %w", op, t.Machine, err)
	}
	if t.Username == "" {
		return fmt.Errorf("ipmi %s of Machine %s: %w: the credentials Secret %q has no username",
			op, t.Machine, power.ErrAuth, t.Spec.CredentialsSecret)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The client does not always cut an exchange short at ctx's deadline
	// (it waits out its own read timeout), so the operation returns when
	// ctx ends; the session's goroutine ends within an exchange timeout.
	done := make(chan error, 1)
	go func() { done <- session(ctx, host, port, t.Username, t.Password, exchangeFor(timeout), fn) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		return nil
	}
	return wrapError(t.Machine, op, net.JoinHostPort(host, strconv.Itoa(port)), timeout, err)
}

// exchangeFor is how long one request waits for its answer under an
// operation's timeout: exchangeTimeout up to DefaultTimeout, and the same
// share of a longer one (--bmc-timeout), so that raising the operation's
// bound for a slow BMC also gives each of its answers longer: otherwise
// a BMC slower than three exchanges to answer one command would fail
// whatever the operator set.
func exchangeFor(timeout time.Duration) time.Duration {
	if timeout <= DefaultTimeout {
		return exchangeTimeout
	}
	// In milliseconds: nanoseconds multiplied would overflow int64.
	return time.Duration(timeout.Milliseconds()*exchangeTimeout.Milliseconds()/DefaultTimeout.Milliseconds()) * time.Millisecond
}

func session(ctx context.Context, host string, port int, user, pass string, exchange time.Duration, fn func(context.Context, *client.Client) error) error {
	var c *client.Client
	err := retry(ctx, "open session", func() error {
		var err error
		c, err = client.NewClient(host, port, user, pass)
		if err != nil {
			return err
		}
		// Our own retries, with backoff, replace the client's (immediate,
		// four of them).
		// Operator is the privilege every command here needs: a BMC
		// user limited to operator then works, and an administrator's
		// password opens no more than that.
		c.WithInterface(client.InterfaceLanplus).
			WithCipherSuiteID(types.CipherSuiteID3).
			WithMaxPrivilegeLevel(types.PrivilegeLevelOperator).
			WithTimeout(exchange).
			WithRetry(0)
		if err := c.Connect(ctx); err != nil {
			// No session to close on the BMC: only free the socket (an
			// already cancelled context makes Close skip the exchange).
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = c.Close(cctx)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer func() {
		// Close the session on the BMC (BMCs have few), bounded on its
		// own so a cancelled operation still frees it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exchange)
		defer cancel()
		_ = c.Close(cctx)
	}()
	return fn(ctx, c)
}

// retry runs step, and again at most maxRetries times with a doubling
// backoff when it failed for the network (no answer, port unreachable),
// within ctx. Steps it runs must be safe to repeat.
func retry(ctx context.Context, what string, step func() error) error {
	backoff := firstBackoff
	var err error
	for attempt := 0; ; attempt++ {
		if err = step(); err == nil {
			return nil
		}
		if attempt == maxRetries || !transient(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (then %w)", what, err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return fmt.Errorf("%s: %w", what, err)
}

// transient: the failure is the network's (a lost or refused datagram),
// not the BMC's answer, so trying again may help.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if _, ok := types.IsResponseError(err); ok {
		return false
	}
	var rmcp *types.RmcpStatusError
	if errors.As(err, &rmcp) || errors.Is(err, client.ErrRAKPAuthentication) {
		return false
	}
	if auth, _ := authFailure(err); auth {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	// The client's "no datagram matched before deadline" (unexported):
	// nothing, or nothing that answered this request, came back in time.
	// Session setup's errors reach us as text (see authFailure).
	msg := err.Error()
	for _, lost := range []string{"no datagram matched", "i/o timeout", "connection refused"} {
		if strings.Contains(msg, lost) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ParseAddress splits spec.power.address, host or host:port, into the BMC's
// host and UDP port (DefaultPort when absent).
func ParseAddress(addr string) (string, int, error) {
	if addr == "" {
		return "", 0, errors.New("empty; want the BMC's host or host:port")
	}
	if strings.Contains(addr, "://") {
		return "", 0, fmt.Errorf("%q is a URL; the ipmi driver wants the BMC's host or host:port", addr)
	}
	host, portText := addr, ""
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		host, portText = addr[:i], addr[i+1:]
		if strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("%q: an IPv6 address is not supported; use a host name", addr)
		}
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q has no host", addr)
	}
	port := DefaultPort
	if portText != "" || strings.HasSuffix(addr, ":") {
		p, err := strconv.Atoi(portText)
		if err != nil || p < 1 || p > 65535 {
			return "", 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, portText)
		}
		port = p
	}
	return host, port, nil
}

// wrapError names the Machine, the operation and the BMC, keeps the BMC's
// own words (a completion code and its meaning, an RMCP+ status) and
// marks a refusal of the credentials with power.ErrAuth.
func wrapError(machine, op, bmc string, timeout time.Duration, err error) error {
	prefix := fmt.Sprintf("ipmi %s of Machine %s (BMC %s)", op, machine, bmc)
	if auth, why := authFailure(err); auth {
		return fmt.Errorf("%s: %w (%s): %w", prefix, power.ErrAuth, why, err)
	}
	if re, ok := types.IsResponseError(err); ok {
		cc := re.CompletionCode()
		return fmt.Errorf("%s: the BMC answered completion code %#02x (%s): %w", prefix, uint8(cc), cc.String(), err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer before the deadline (driver timeout %s; is UDP %s reachable from the manager?): %w", prefix, timeout, bmc, err)
	}
	if transient(err) {
		return fmt.Errorf("%s: the BMC did not answer (tried %d times): %w", prefix, maxRetries+1, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// authFailure says whether err is the BMC refusing the credentials (or
// their privilege), which no retry fixes until the Secret changes, and
// how. go-ipmi v0.9.1 flattens the errors of session setup into text
// ("connect20 failed after try all cipher suite ids ..."), so their RMCP+
// status and RAKP failure are read from the text too.
func authFailure(err error) (bool, string) {
	var rmcp *types.RmcpStatusError
	if errors.As(err, &rmcp) {
		if why, ok := authStatus[rmcp.StatusCode()]; ok {
			return true, why
		}
	}
	if re, ok := types.IsResponseError(err); ok && re.CompletionCode() == types.CompletionCode(0xd4) {
		return true, "the user's privilege is too low for this command (give it operator or administrator)"
	}
	msg := err.Error()
	if errors.Is(err, client.ErrRAKPAuthentication) || strings.Contains(msg, client.ErrRAKPAuthentication.Error()) {
		return true, "wrong password"
	}
	for code, why := range authStatus {
		if strings.Contains(msg, rmcpStatusText(code)) {
			return true, why
		}
	}
	return false, ""
}

// authStatus are the RMCP+ statuses of session setup that refuse the
// credentials.
var authStatus = map[types.RmcpStatusCode]string{
	types.RmcpStatusCodeUnauthorizedName:           "unknown user name",
	types.RmcpStatusCodeInvalidIntegrityCheckValue: "wrong password",
	types.RmcpStatusCodeUnauthorizedRoleOfPriLevel: "the user may not have the privilege asked for (operator or administrator)",
	types.RmcpStatusCodeInvalidRole:                "the user may not have the privilege asked for (operator or administrator)",
}

// rmcpStatusText is how go-ipmi writes an RMCP+ status ("RMCP+ status 0xd:"),
// the part before its description.
func rmcpStatusText(code types.RmcpStatusCode) string {
	text := types.NewRmcpStatusError(code).Error()
	if i := strings.IndexByte(text, ':'); i >= 0 {
		return text[:i+1]
	}
	return text
}
