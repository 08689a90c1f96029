package plugin

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
)

// enroll's --power-* flags: the new entry's power control (its BMC), given
// in the same step as the entry so that a server is never in a pool without
// the power control the rollout falls back on.

// PowerFlags are enroll's --power-* flags as given; an empty value (false
// for InsecureSkipVerify) is a flag not given.
type PowerFlags struct {
	Driver             string // --power-driver
	Address            string // --power-address
	Credentials        string // --power-credentials
	CA                 string // --power-ca
	InsecureSkipVerify bool   // --power-insecure-skip-verify
}

// The CRD's address rules per driver (api/v1alpha1 PowerSpec's
// XValidation), matched here so that a refusal names the flag instead of
// coming back from the API server as a CEL rule on spec.machines[n].
var (
	ipmiAddressRE    = regexp.MustCompile(`^[a-zA-Z0-9.-]+(:[0-9]{1,5})?$`)
	redfishAddressRE = regexp.MustCompile(`^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/redfish/v1/Systems/[a-zA-Z0-9._-]+)?$`)
	addressPortRE    = regexp.MustCompile(`^(?:https?://)?[a-zA-Z0-9.-]+:([0-9]+)`)
)

// maxPowerAddress is the CRD's MaxLength of spec.power.address.
const maxPowerAddress = 255

// EnrollPower is the entry's power control from the flags, nil when no
// power flag is given, or an error naming the flag: the API server's
// rules for spec.power (the address's shape per driver, credentials
// required, caSecret and insecureSkipVerify for redfish only and not
// together, http:// only with insecureSkipVerify; names are DNS
// subdomains), plus a port within 1-65535, which the drivers need. qmp is
// refused: it drives the test farm's QEMU machines, not a discovered
// server. Without --power-address, ipmi takes the BMC address the machine
// reported (spec.hardware.bmcAddress); redfish has no default, since the
// system's path on the BMC is not discoverable from the host.
func EnrollPower(f PowerFlags, dm *v1alpha1.DiscoveredMachine) (*v1alpha1.PowerSpec, error) {
	if f.Driver == "" {
		for _, given := range []struct {
			flag string
			set  bool
		}{{"--power-address", f.Address != ""}, {"--power-credentials", f.Credentials != ""}, {"--power-ca", f.CA != ""},
			{"--power-insecure-skip-verify", f.InsecureSkipVerify}} {
			if given.set {
				return nil, fmt.Errorf("%s needs --power-driver (ipmi or redfish)", given.flag)
			}
		}
		return nil, nil
	}
	p := &v1alpha1.PowerSpec{Driver: v1alpha1.PowerDriver(f.Driver), Address: f.Address,
		CredentialsSecret: f.Credentials, CASecret: f.CA, InsecureSkipVerify: f.InsecureSkipVerify}
	switch p.Driver {
	case v1alpha1.PowerIPMI:
		if f.CA != "" {
			return nil, fmt.Errorf("--power-ca is for --power-driver redfish, not ipmi")
		}
		if f.InsecureSkipVerify {
			return nil, fmt.Errorf("--power-insecure-skip-verify is for --power-driver redfish, not ipmi (IPMI has no TLS)")
		}
		if p.Address == "" {
			p.Address = dm.Spec.Hardware.BMCAddress
		}
		if p.Address == "" {
			return nil, fmt.Errorf("--power-address is required: DiscoveredMachine %s reports no BMC address (spec.hardware.bmcAddress); give the BMC's host or host:port", dm.Name)
		}
		if !ipmiAddressRE.MatchString(p.Address) {
			return nil, fmt.Errorf("--power-address %q: an ipmi address is host or host:port (UDP, 623 when absent)", p.Address)
		}
	case v1alpha1.PowerRedfish:
		if err := redfishAddress(p, dm); err != nil {
			return nil, err
		}
	case v1alpha1.PowerQMP:
		return nil, fmt.Errorf("--power-driver qmp drives the test farm's QEMU machines through their QMP socket, not a server's BMC: use ipmi or redfish")
	default:
		return nil, fmt.Errorf("--power-driver %q: want ipmi or redfish", f.Driver)
	}
	if len(p.Address) > maxPowerAddress {
		return nil, fmt.Errorf("--power-address is %d characters, at most %d", len(p.Address), maxPowerAddress)
	}
	if m := addressPortRE.FindStringSubmatch(p.Address); m != nil {
		if port, err := strconv.Atoi(m[1]); err != nil || port < 1 || port > 65535 {
			return nil, fmt.Errorf("--power-address %q: port %s is not from 1 to 65535", p.Address, m[1])
		}
	}
	if p.CredentialsSecret == "" {
		return nil, fmt.Errorf("--power-credentials is required with --power-driver %s: the Secret in the pool's namespace with the BMC's username and password, labelled %s=true",
			p.Driver, v1alpha1.LabelBMCCredentials)
	}
	for _, s := range []struct{ flag, name string }{{"--power-credentials", p.CredentialsSecret}, {"--power-ca", p.CASecret}} {
		if msgs := validation.IsDNS1123Subdomain(s.name); s.name != "" && len(msgs) > 0 {
			return nil, fmt.Errorf("%s %q is not a Secret name: %s", s.flag, s.name, strings.Join(msgs, "; "))
		}
	}
	return p, nil
}

// redfishAddress checks p.Address for the redfish driver, and the TLS
// flags: a plain http:// address sends the password in clear, so the CRD
// wants insecureSkipVerify with it.
func redfishAddress(p *v1alpha1.PowerSpec, dm *v1alpha1.DiscoveredMachine) error {
	if p.Address == "" {
		hint := "https://<BMC>"
		if bmc := dm.Spec.Hardware.BMCAddress; bmc != "" {
			hint = "https://" + bmc + " (the BMC address DiscoveredMachine " + dm.Name + " reports)"
		}
		return fmt.Errorf("--power-address is required with --power-driver redfish: the BMC's https://host[:port], with /redfish/v1/Systems/<id> when the BMC has several systems; e.g. %s", hint)
	}
	if !redfishAddressRE.MatchString(p.Address) {
		return fmt.Errorf("--power-address %q: a redfish address is https://host[:port], optionally with /redfish/v1/Systems/<id>", p.Address)
	}
	if p.CASecret != "" && p.InsecureSkipVerify {
		return fmt.Errorf("--power-ca and --power-insecure-skip-verify contradict each other: the CA verifies the BMC's certificate, the other accepts any")
	}
	if strings.HasPrefix(p.Address, "http://") && !p.InsecureSkipVerify {
		return fmt.Errorf("--power-address %q is plain http://, which sends the BMC password in clear: use https://, or pass --power-insecure-skip-verify", p.Address)
	}
	return nil
}

// SecretRead is the outcome of reading a Secret that spec.power names.
type SecretRead struct {
	Secret    *corev1.Secret // the Secret, when read
	NotFound  bool
	Forbidden bool  // the operator may not read Secrets there
	Err       error // another failure to read it
}

// PowerSecretWarnings says what is wrong with the Secrets power names, as
// read in namespace ns: the manager would refuse to use them
// (PowerCredentialsMissing) at the first power operation, long after the
// operator ran enroll. A warning only: the Secret may well be created
// after the entry, and the operator may not be allowed to read it.
func PowerSecretWarnings(ns string, spec *v1alpha1.PowerSpec, creds, ca SecretRead) []string {
	if spec == nil {
		return nil
	}
	var out []string
	name := ns + "/" + spec.CredentialsSecret
	need := fmt.Sprintf("keys %s and %s and the label %s=true", power.KeyUsername, power.KeyPassword, v1alpha1.LabelBMCCredentials)
	switch s := creds.Secret; {
	case creds.NotFound:
		out = append(out, fmt.Sprintf("Secret %s (--power-credentials) does not exist: create it with %s; until then the manager cannot drive the BMC (PowerCredentialsMissing)", name, need))
	case creds.Forbidden:
		out = append(out, fmt.Sprintf("could not check Secret %s (--power-credentials): you may not read Secrets in namespace %s; it needs %s", name, ns, need))
	case creds.Err != nil:
		out = append(out, fmt.Sprintf("could not check Secret %s (--power-credentials): %v; it needs %s", name, creds.Err, need))
	case s != nil:
		if s.Labels[v1alpha1.LabelBMCCredentials] != "true" {
			out = append(out, fmt.Sprintf("Secret %s (--power-credentials) lacks the label %s=true, so the manager will not send it to the BMC: kubectl label secret -n %s %s %s=true",
				name, v1alpha1.LabelBMCCredentials, ns, spec.CredentialsSecret, v1alpha1.LabelBMCCredentials))
		}
		for _, key := range []string{power.KeyUsername, power.KeyPassword} {
			if len(s.Data[key]) == 0 {
				out = append(out, fmt.Sprintf("Secret %s (--power-credentials) has no non-empty key %q", name, key))
			}
		}
	}
	if spec.CASecret == "" {
		return out
	}
	caName := ns + "/" + spec.CASecret
	switch {
	case ca.NotFound:
		out = append(out, fmt.Sprintf("Secret %s (--power-ca) does not exist: create it with the key %s (PEM)", caName, power.KeyCA))
	case ca.Forbidden:
		out = append(out, fmt.Sprintf("could not check Secret %s (--power-ca): you may not read Secrets in namespace %s; it needs the key %s (PEM)", caName, ns, power.KeyCA))
	case ca.Err != nil:
		out = append(out, fmt.Sprintf("could not check Secret %s (--power-ca): %v; it needs the key %s (PEM)", caName, ca.Err, power.KeyCA))
	case ca.Secret != nil && len(ca.Secret.Data[power.KeyCA]) == 0:
		out = append(out, fmt.Sprintf("Secret %s (--power-ca) has no key %s", caName, power.KeyCA))
	}
	return out
}
