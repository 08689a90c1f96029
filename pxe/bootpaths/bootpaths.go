// Package bootpaths owns the names a network boot travels by: the iPXE
// binaries kubefarm-pxe serves (over TFTP and HTTP), the URLs of its HTTP
// boot service (as DHCP boot file names and inside iPXE scripts) with the
// parser its handler routes by, and the key that names a machine.
//
// Every other package builds and matches these through here, so that what
// DHCP hands out, what a script names and what the handler answers cannot
// drift apart. It imports nothing of kubefarm's, so that bootfile, tftp,
// httpboot and the binary can all use it.
package bootpaths

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The iPXE binaries kubefarm-pxe serves: the only names its TFTP service
// and its /ipxe/ route answer.
const (
	BinaryBIOS      = "undionly.kpxe"
	BinaryUEFIx64   = "ipxe.efi"
	BinarySNPOnly   = "snponly.efi"
	BinaryUEFIARM64 = "ipxe-arm64.efi"
)

// binaries is the allow-list, in a fixed order.
var binaries = [...]string{BinaryBIOS, BinaryUEFIx64, BinarySNPOnly, BinaryUEFIARM64}

// Binaries returns the allow-list of iPXE binary names, a new slice each
// call.
func Binaries() []string { return append([]string(nil), binaries[:]...) }

// IsBinary reports whether name is exactly one of Binaries. Each of them is
// a single clean path element, so a name that passes can be joined to a
// directory without leaving it.
func IsBinary(name string) bool {
	for _, b := range binaries {
		if name == b {
			return true
		}
	}
	return false
}

// MachineKey names a machine in boot windows, events, logs and the node
// configuration: "namespace/name".
func MachineKey(namespace, name string) string { return namespace + "/" + name }

// Route is what a request path of the HTTP boot service asks for. Its value
// is the first element of the route's paths, and the label of the service's
// request metrics.
type Route string

// The routes. Every path outside them is RouteOther.
const (
	// RouteScript: /boot/<mac>.ipxe, a machine's iPXE script.
	RouteScript Route = "boot"
	// RouteArtifact: /artifacts/<digest>, a kernel, initrd or rootfs.
	RouteArtifact Route = "artifacts"
	// RouteBinary: /ipxe/<name>, an iPXE binary for UEFI HTTP boot.
	RouteBinary Route = "ipxe"
	// RouteSecret: /secret/<mac>, the per-boot secret of a booting machine
	// (a second initrd image; package bootsecret).
	RouteSecret Route = "secret"
	// RouteConfig: /config/<mac>, a machine's node configuration.
	RouteConfig Route = "config"
	// RouteReport: /report, where a booted machine reports.
	RouteReport Route = "report"
	// RouteHeartbeat: /heartbeat, where a running node's agent asks
	// whether to reboot and tells whether it needs to.
	RouteHeartbeat Route = "heartbeat"
	// RouteDiscovery: /discovery, where the agent of a machine booted in
	// discovery mode (no Machine claims its MAC) reports its hardware.
	RouteDiscovery Route = "discovery"
	// RouteHealthz: /healthz.
	RouteHealthz Route = "healthz"
	// RouteMetrics: /metrics.
	RouteMetrics Route = "metrics"
	// RouteOther: anything else.
	RouteOther Route = "other"
)

// The path shapes.
const (
	scriptPrefix   = "/" + string(RouteScript) + "/"
	scriptSuffix   = ".ipxe"
	artifactPrefix = "/" + string(RouteArtifact) + "/"
	binaryPrefix   = "/" + string(RouteBinary) + "/"
	configPrefix   = "/" + string(RouteConfig) + "/"
	secretPrefix   = "/" + string(RouteSecret) + "/"
	reportPath     = "/" + string(RouteReport)
	heartbeatPath  = "/" + string(RouteHeartbeat)
	discoveryPath  = "/" + string(RouteDiscovery)
	healthzPath    = "/" + string(RouteHealthz)
	metricsPath    = "/" + string(RouteMetrics)
)

// Parse names the route of a request path and its argument: the MAC of a
// script or configuration, the digest of an artifact, the name of a binary
// ("" for the others). The argument is as the client sent it, unchecked:
// the handler validates it. Only these exact shapes match; the prefixes are
// disjoint, so no path matches two.
func Parse(path string) (Route, string) {
	switch {
	case path == healthzPath:
		return RouteHealthz, ""
	case path == metricsPath:
		return RouteMetrics, ""
	case path == reportPath:
		return RouteReport, ""
	case path == heartbeatPath:
		return RouteHeartbeat, ""
	case path == discoveryPath:
		return RouteDiscovery, ""
	case strings.HasPrefix(path, scriptPrefix) && strings.HasSuffix(path, scriptSuffix):
		return RouteScript, strings.TrimSuffix(strings.TrimPrefix(path, scriptPrefix), scriptSuffix)
	case strings.HasPrefix(path, artifactPrefix):
		return RouteArtifact, strings.TrimPrefix(path, artifactPrefix)
	case strings.HasPrefix(path, configPrefix):
		return RouteConfig, strings.TrimPrefix(path, configPrefix)
	case strings.HasPrefix(path, secretPrefix):
		return RouteSecret, strings.TrimPrefix(path, secretPrefix)
	case strings.HasPrefix(path, binaryPrefix):
		return RouteBinary, strings.TrimPrefix(path, binaryPrefix)
	default:
		return RouteOther, ""
	}
}

// Base is where booting machines reach the HTTP boot service:
// http://<host>[:port], without a trailing slash. It is configuration,
// never a request's Host header, so that a client cannot redirect the
// downloads of others.
type Base string

// NewBase is the base URL of the service at ip (IPv4) and port; port 0 or
// 80 leaves the port out.
func NewBase(ip net.IP, port int) Base {
	host := ip.String()
	if port != 0 && port != 80 {
		host += ":" + strconv.Itoa(port)
	}
	return Base("http://" + host)
}

// ParseBase accepts only http://<IPv4 or host name>[:port]: the URL is
// pasted into iPXE scripts and kernel command lines, so it gets the same
// scrutiny as a kernel argument.
func ParseBase(u string) (Base, error) {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok || rest == "" {
		return "", fmt.Errorf("base URL %q must be http://host[:port]", u)
	}
	host := rest
	if h, p, err := net.SplitHostPort(rest); err == nil {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", fmt.Errorf("base URL %q has a bad port", u)
		}
		host = h
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return "", fmt.Errorf("base URL %q must be http://host[:port]", u)
		}
	}
	return Base(u), nil
}

// String is the base URL itself.
func (b Base) String() string { return string(b) }

// Script is the URL of the iPXE script of the machine with mac, in the
// lower-case colon-separated form (net.HardwareAddr's) the API stores.
func (b Base) Script(mac net.HardwareAddr) string {
	return string(b) + scriptPrefix + mac.String() + scriptSuffix
}

// Artifact is the URL of a cached artifact, by digest (sha256:<hex>).
func (b Base) Artifact(digest string) string { return string(b) + artifactPrefix + digest }

// Binary is the URL of an iPXE binary, by name.
func (b Base) Binary(name string) string { return string(b) + binaryPrefix + name }

// Config is the URL of the node configuration of the machine with mac, as
// the agent names it (the lower-case colon form).
func (b Base) Config(mac string) string { return string(b) + configPrefix + mac }

// Secret is the URL of the boot secret of the machine whose MAC is mac,
// which may be an iPXE expansion such as ${netX/mac} in a script.
func (b Base) Secret(mac string) string { return string(b) + secretPrefix + mac }

// Report is the URL the boot report is posted to.
func (b Base) Report() string { return string(b) + reportPath }

// Heartbeat is the URL the agent's heartbeats are posted to.
func (b Base) Heartbeat() string { return string(b) + heartbeatPath }

// Discovery is the URL a discovery-mode agent posts its hardware to.
func (b Base) Discovery() string { return string(b) + discoveryPath }
