// Package fetchguard decides which addresses kubefarm-pxe may connect to
// when it fetches a BootImage's artifacts, and enforces it on every
// connection those fetches make. kubefarm-manager's rollout notifications
// (internal/notify) go through the same guard: their URL is a pool
// author's choice too.
//
// A BootImage's author chooses the URLs and the OCI repository, and so
// whatever those redirect to. kubefarm-pxe runs on the admin cluster's
// nodes in their network namespace; without a check a hostile author could
// make it fetch from loopback, the cloud's metadata service, the admin
// cluster's Services, Pods and API server, and read the answer back from
// the cache.
//
// Decide is the pure verdict on one address. Guard applies it in a
// net.Dialer's Control hook, which runs after DNS resolution and before
// connect(2), with the address actually being connected to: a name
// resolving to a denied address, a redirect to one, a registry's token
// realm or blob redirect pointing at one are all refused the same way,
// without a single packet sent to it.
package fetchguard

import (
	"fmt"
	"net/netip"
)

// Classes of refused addresses, as Refused names them.
const (
	ClassAPIServer   = "the admin cluster's API server"
	ClassLoopback    = "loopback"
	ClassLinkLocal   = "link-local"
	ClassUnspecified = "unspecified"
	ClassMulticast   = "multicast"
	ClassMetadata    = "cloud metadata service"
	// ClassDenied is a prefix of the operator's deny list
	// (--fetch-denied-cidrs: the admin cluster's Service and Pod ranges).
	ClassDenied = "denied range"
)

// Rule refuses the addresses of Prefix as Class.
type Rule struct {
	Prefix netip.Prefix
	Class  string
}

// DefaultDenied are the rules every Guard starts from: addresses that are
// never an artifact source in their own right. Link-local covers the
// metadata services at 169.254.169.254 (AWS, GCP, Azure, OpenStack); the
// metadata rules name the two outside it.
func DefaultDenied() []Rule {
	return []Rule{
		{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
		{netip.MustParsePrefix("::1/128"), ClassLoopback},
		{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
		{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
		// 0.0.0.0/8 is "this network": Linux connects 0.0.0.0 to the
		// local host, like loopback.
		{netip.MustParsePrefix("0.0.0.0/8"), ClassUnspecified},
		{netip.MustParsePrefix("::/128"), ClassUnspecified},
		{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
		{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
		{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata},  // AWS IMDS over IPv6
		{netip.MustParsePrefix("100.100.100.200/32"), ClassMetadata}, // Alibaba Cloud
	}
}

// Policy is what Decide checks an address against.
type Policy struct {
	// Always are refused whatever Allowed says: the API server's own
	// addresses, which are never an artifact source, even inside a range
	// an operator opened for a registry.
	Always []Rule
	// Denied are refused unless Allowed holds the address.
	Denied []Rule
	// Allowed are the operator's exceptions to Denied.
	Allowed []netip.Prefix
}

// Decision is Decide's verdict.
type Decision struct {
	Allowed bool
	// Rule is the rule that refused the address (when !Allowed).
	Rule Rule
	// Addr is the address decided on, IPv4-mapped IPv6 unmapped and
	// without a zone.
	Addr netip.Addr
}

// Reason says why the address is refused, e.g. "127.0.0.1 is a loopback
// address (127.0.0.0/8)"; empty when it is allowed.
func (d Decision) Reason() string {
	if d.Allowed {
		return ""
	}
	if !d.Addr.IsValid() {
		return "not an IP address"
	}
	switch d.Rule.Class {
	case ClassAPIServer:
		return fmt.Sprintf("%s is %s", d.Addr, d.Rule.Class)
	case ClassDenied:
		return fmt.Sprintf("%s is in a denied range (%s)", d.Addr, d.Rule.Prefix)
	}
	article := "a"
	if d.Rule.Class == ClassUnspecified {
		article = "an"
	}
	return fmt.Sprintf("%s is %s %s address (%s)", d.Addr, article, d.Rule.Class, d.Rule.Prefix)
}

// Decide is the verdict on connecting to addr: refused by the first rule
// of Always that holds it; else allowed when a prefix of Allowed holds it;
// else refused by the first rule of Denied that holds it; else allowed.
//
// An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is decided as the IPv4
// address it is: connecting to it reaches that address. Zones are dropped
// (fe80::1%eth0 is link-local whatever the interface). An invalid address
// is refused.
func Decide(addr netip.Addr, p Policy) Decision {
	addr = addr.Unmap().WithZone("")
	if !addr.IsValid() {
		return Decision{Addr: addr}
	}
	for _, r := range p.Always {
		if r.Prefix.Contains(addr) {
			return Decision{Rule: r, Addr: addr}
		}
	}
	for _, a := range p.Allowed {
		if a.Contains(addr) {
			return Decision{Allowed: true, Addr: addr}
		}
	}
	for _, r := range p.Denied {
		if r.Prefix.Contains(addr) {
			return Decision{Rule: r, Addr: addr}
		}
	}
	return Decision{Allowed: true, Addr: addr}
}
