package nodeconfig

import (
	"fmt"
	"net/netip"
	"slices"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
)

// BootLink names, in a HostNetwork, the interface the machine booted from.
const BootLink = "boot"

// Network is a machine's links as kubefarm-agent sets them up: the pool's
// hostNetwork, or its tag's, with each addressFromBoot rule turned into this
// machine's address and its own entry's addresses applied.
type Network struct {
	kubefarmv1.HostNetwork `json:",inline"`
	// Addresses are the static addresses of bonds and VLANs by link name,
	// in CIDR form.
	Addresses map[string][]string `json:"addresses,omitempty"`
}

// NamedTag is one of a machine's tags, by name, in its entry's order.
type NamedTag struct {
	Name string
	Spec kubefarmv1.TagSpec
}

// PoolTags are the pool's tags called names, with their specs, in names'
// order (machineconfig.Tags gives a machine's).
func PoolTags(pool *kubefarmv1.NodePool, names []string) []NamedTag {
	out := make([]NamedTag, 0, len(names))
	for _, t := range names {
		out = append(out, NamedTag{Name: t, Spec: pool.Spec.Tags[t]})
	}
	return out
}

// ResolveNetwork decides a machine's Network from its pool's hostNetwork,
// its tags and its entry (nil for a machine the pool does not list), and
// the machine's boot address. Nil when neither the pool nor a tag has a
// hostNetwork: the node image's own network files apply.
func ResolveNetwork(pool *kubefarmv1.HostNetwork, tags []NamedTag, entry *kubefarmv1.MachineEntry, boot netip.Addr) (*Network, error) {
	spec, from := pool, "spec.hostNetwork"
	for _, t := range tags {
		if t.Spec.HostNetwork == nil {
			continue
		}
		if spec != pool {
			return nil, fmt.Errorf("tags %s and %s both have a hostNetwork: a machine may have one", from, t.Name)
		}
		spec, from = t.Spec.HostNetwork, t.Name
	}
	if spec == nil {
		if entry != nil && len(entry.Addresses) > 0 {
			return nil, fmt.Errorf("machine %s: addresses need a hostNetwork that has their links", entry.Name)
		}
		return nil, nil
	}
	n := &Network{HostNetwork: *spec.DeepCopy()}
	for _, v := range spec.VLANs {
		if v.AddressFromBoot == "" {
			continue
		}
		a, err := AddressFromBoot(v.AddressFromBoot, boot)
		if err != nil {
			return nil, fmt.Errorf("%s: vlans[%s].addressFromBoot: %w", from, v.Name, err)
		}
		n.setAddress(v.Name, a.String())
	}
	if entry != nil {
		for _, a := range entry.Addresses {
			if !n.hasLink(a.Link) {
				return nil, fmt.Errorf("machine %s: addresses[%s]: %s has no bond or VLAN %q", entry.Name, a.Link, from, a.Link)
			}
			p, err := netip.ParsePrefix(a.Address)
			if err != nil || !p.Addr().Is4() {
				return nil, fmt.Errorf("machine %s: addresses[%s]: %q is not an IPv4 address with its prefix length", entry.Name, a.Link, a.Address)
			}
			n.setAddress(a.Link, p.String())
		}
	}
	return n, nil
}

// MachineNetwork is machine m's Network in its pool: ResolveNetwork of the
// pool's hostNetwork, m's effective tags (machineconfig.Tags), m's entry in
// the pool (none for a machine the pool does not list) and m's IP. One
// function, so that kubefarm-pxe's /config and the serving-certificate
// approver agree on a machine's addresses. A machine without an IP (none
// yet) fails only an addressFromBoot rule, which says so.
func MachineNetwork(m *kubefarmv1.Machine, pool *kubefarmv1.NodePool) (*Network, error) {
	ip, _ := netip.ParseAddr(m.Spec.IP)
	tags := PoolTags(pool, machineconfig.Tags(pool, m.Spec.Tags))
	n, err := ResolveNetwork(pool.Spec.HostNetwork, tags, machineconfig.Entry(pool, m.Name), ip)
	if err != nil {
		return nil, fmt.Errorf("machine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return n, nil
}

// NodeAddress is the node's own address when its nodeLink has a static one:
// the kubelet's --node-ip, its InternalIP and so an address its serving
// certificate asks for. The zero Addr when the node keeps its boot address
// (no nodeLink, or one without an address).
func (n *Network) NodeAddress() netip.Addr {
	if n == nil || n.NodeLink == "" || len(n.Addresses[n.NodeLink]) == 0 {
		return netip.Addr{}
	}
	p, err := netip.ParsePrefix(n.Addresses[n.NodeLink][0])
	if err != nil {
		return netip.Addr{}
	}
	return p.Addr()
}

// setAddress makes addr the link's one static address: a machine's own
// entry replaces the link's rule.
func (n *Network) setAddress(link, addr string) {
	if n.Addresses == nil {
		n.Addresses = map[string][]string{}
	}
	n.Addresses[link] = []string{addr}
}

func (n *Network) hasLink(name string) bool {
	return slices.ContainsFunc(n.Bonds, func(b kubefarmv1.Bond) bool { return b.Name == name }) ||
		slices.ContainsFunc(n.VLANs, func(v kubefarmv1.VLAN) bool { return v.Name == name })
}

// AddressFromBoot is the boot address's host part in subnet: with
// 10.29.0.0/16, 10.28.3.4 becomes 10.29.3.4/16. The subnet's own network
// and broadcast addresses are refused.
func AddressFromBoot(subnet string, boot netip.Addr) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 subnet with its host bits zero", subnet)
	}
	if !boot.Is4() {
		return netip.Prefix{}, fmt.Errorf("boot address %s is not IPv4", boot)
	}
	if p.Bits() >= 31 {
		return netip.Prefix{}, fmt.Errorf("subnet %s has no host part to take", subnet)
	}
	net, host := p.Addr().As4(), boot.As4()
	bits := p.Bits()
	var out [4]byte
	allZero, allOne := true, true
	for i := range out {
		// mask is the network part of this byte.
		mask := byte(0)
		switch {
		case bits >= 8*(i+1):
			mask = 0xff
		case bits > 8*i:
			mask = byte(0xff << (8 - (bits - 8*i)))
		}
		out[i] = net[i]&mask | host[i]&^mask
		hostBits := host[i] &^ mask
		allZero = allZero && hostBits == 0
		allOne = allOne && hostBits == ^mask
	}
	if allZero || allOne {
		return netip.Prefix{}, fmt.Errorf("boot address %s has host part all zeros or all ones in %s", boot, subnet)
	}
	return netip.PrefixFrom(netip.AddrFrom4(out), bits), nil
}
