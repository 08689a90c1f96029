package redfish

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/common"
	gfredfish "github.com/stmcginnis/gofish/redfish"

	"github.com/kubefarm/kubefarm/power"
)

// address is spec.power.address taken apart.
type address struct {
	// Endpoint is scheme://host[:port], what gofish connects to.
	Endpoint string
	// SystemPath is /redfish/v1/Systems/<id>, or "" for the only system.
	SystemPath string
}

var systemPath = regexp.MustCompile(`^/redfish/v1/Systems/[a-zA-Z0-9._-]+$`)

// parseAddress checks a redfish address the way the API's pattern and CEL
// rules do (the driver also runs for objects written before them, and for
// callers that are not the API): https://host[:port] with an optional
// system path; http:// only with insecureSkipVerify, since it sends the
// password in clear.
func parseAddress(s string, insecure bool) (address, error) {
	u, err := url.Parse(s)
	if err != nil {
		return address{}, fmt.Errorf("spec.power.address %q: %w", s, err)
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return address{}, fmt.Errorf("spec.power.address %q: a redfish address is https://host[:port][/redfish/v1/Systems/<id>]", s)
	case u.Scheme == "http" && !insecure:
		return address{}, fmt.Errorf("spec.power.address %q: plain http:// sends the BMC password in clear; it needs spec.power.insecureSkipVerify: true", s)
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return address{}, fmt.Errorf("spec.power.address %q: only scheme, host, port and a system path are allowed", s)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if p != "" && !systemPath.MatchString(p) {
		return address{}, fmt.Errorf("spec.power.address %q: the path must be /redfish/v1/Systems/<id> or empty", s)
	}
	return address{Endpoint: u.Scheme + "://" + u.Host, SystemPath: p}, nil
}

// selectSystem picks the system to drive from the service's list when the
// address names none: the only one, else an error that counts and names
// them, since guessing among a chassis's blades would power off the wrong
// machine.
func selectSystem(ids []string) (int, error) {
	switch len(ids) {
	case 1:
		return 0, nil
	case 0:
		return 0, errors.New("the BMC lists no ComputerSystem")
	}
	return 0, fmt.Errorf("the BMC lists %d ComputerSystems (%s): name the one to drive in spec.power.address as "+
		"https://host[:port]/redfish/v1/Systems/<id>", len(ids), strings.Join(ids, ", "))
}

type operation int

const (
	opOn operation = iota
	opOff
	opCycle
)

// chooseReset is the ResetType of an operation for a system in state
// whose BMC allows the reset types allowed (empty: the BMC does not say,
// and the standard type is sent).
func chooseReset(op operation, state gfredfish.PowerState, allowed []gfredfish.ResetType) (gfredfish.ResetType, error) {
	lists := func(rt gfredfish.ResetType) bool { return slices.Contains(allowed, rt) }
	var want []gfredfish.ResetType
	switch op {
	case opOn:
		want = []gfredfish.ResetType{gfredfish.OnResetType, gfredfish.ForceOnResetType}
	case opOff:
		want = []gfredfish.ResetType{gfredfish.ForceOffResetType}
	case opCycle:
		if state == gfredfish.OffPowerState {
			// A restart of a machine that is off is refused by most
			// BMCs; turning it on is the cycle's effect.
			want = []gfredfish.ResetType{gfredfish.OnResetType, gfredfish.ForceOnResetType}
		} else {
			// PowerCycle removes power (what a hung machine may need);
			// ForceRestart is the type every BMC has.
			want = []gfredfish.ResetType{gfredfish.PowerCycleResetType, gfredfish.ForceRestartResetType}
			if !lists(gfredfish.PowerCycleResetType) {
				want = want[1:]
			}
		}
	}
	if len(allowed) == 0 {
		return want[0], nil
	}
	for _, rt := range want {
		if lists(rt) {
			return rt, nil
		}
	}
	return "", fmt.Errorf("the BMC allows the reset types %v, none of %v", allowed, want)
}

// stateOf maps Redfish's PowerState to power.State: PoweringOn, PoweringOff
// and Paused are neither on nor off yet.
func stateOf(s gfredfish.PowerState) power.State {
	switch s {
	case gfredfish.OnPowerState:
		return power.StateOn
	case gfredfish.OffPowerState:
		return power.StateOff
	}
	return power.StateUnknown
}

// opError is an operation's error for the operator: the Machine, the
// operation, the BMC and its own words, and whether verification was off.
// It unwraps to the cause and, for a 401 or 403, to power.ErrAuth.
type opError struct {
	msg  string
	errs []error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return e.errs }

// describe wraps err of operation op on t: the Redfish error's raw JSON is
// replaced by its status, code and messages (@Message.ExtendedInfo), a
// certificate error says what verified it, and the password never appears
// (no error here carries it: gofish sends it in a header or a session
// body).
func describe(t power.Target, op string, err error) error {
	msg := err.Error()
	errs := []error{err}
	var re *common.Error
	if errors.As(err, &re) {
		msg = strings.Replace(msg, re.Error(), redfishMessage(re), 1)
		if re.HTTPReturnedStatusCode == 401 || re.HTTPReturnedStatusCode == 403 {
			errs = append(errs, power.ErrAuth)
			msg += " (check spec.power.credentialsSecret)"
		}
	}
	if isCertificateError(err) {
		if len(t.CA) > 0 {
			msg += " (the BMC's certificate does not verify against spec.power.caSecret's ca.crt)"
		} else {
			msg += " (the BMC's certificate does not verify against the system roots: name its CA in spec.power.caSecret)"
		}
	}
	if t.Spec.InsecureSkipVerify {
		msg += " [TLS certificate verification off: spec.power.insecureSkipVerify]"
	}
	return &opError{
		msg:  fmt.Sprintf("machine %s: redfish %s at %s: %s", t.Machine, op, t.Spec.Address, msg),
		errs: errs,
	}
}

// redfishMessage is a Redfish error's status, code, message and extended
// messages, or its body (shortened) when it is not Redfish JSON.
func redfishMessage(e *common.Error) string {
	parts := []string{fmt.Sprintf("HTTP %d", e.HTTPReturnedStatusCode)}
	raw := e.Message
	if e.Code != "" {
		parts = append(parts, e.Code)
	}
	if e.Code == "" && raw != "" {
		// Not a Redfish error object: the body as it came, bounded.
		raw = strings.Join(strings.Fields(raw), " ")
		if len(raw) > 300 {
			raw = raw[:300] + "..."
		}
	}
	if raw != "" {
		parts = append(parts, raw)
	}
	for _, x := range e.ExtendedInfos {
		m := x.Message
		if m == "" && x.MessageID == e.Code {
			continue // says nothing the code did not
		}
		if m == "" {
			m = x.MessageID
		} else if x.MessageID != "" {
			m += " (" + x.MessageID + ")"
		}
		if x.Resolution != "" {
			m += "; resolution: " + x.Resolution
		}
		if m != "" {
			parts = append(parts, m)
		}
	}
	return strings.Join(parts, ": ")
}

func isCertificateError(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}
