package leases

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
)

// DefaultLeaseTime applies when a pool does not set one (the API defaults it
// to 1h as well; this covers objects written before the default existed).
const DefaultLeaseTime = time.Hour

// Option is a raw DHCPv4 option added to a machine's replies.
type Option struct {
	Code  uint8
	Value []byte
}

// Lease is everything a DHCP reply for one MAC needs. A Lease stored in a
// Table is never modified afterwards: readers share it without copying.
type Lease struct {
	MAC       net.HardwareAddr
	IP        net.IP // 4-byte form
	Mask      net.IPMask
	Router    net.IP // nil when the pool has no gateway
	DNS       []net.IP
	Domain    string
	Hostname  string
	LeaseTime time.Duration
	// ExtraOptions come from the machine's tags, sorted by code.
	ExtraOptions []Option
	// Pool is the NodePool's name; Machine is "namespace/name", empty for
	// a lease of a pool's dynamic range.
	Pool    string
	Machine string
	// Dynamic marks a lease of a pool's dynamic range (package
	// pxe/dynamic): a MAC of no Machine, so there is no boot script for it.
	Dynamic bool
}

// Network is what a pool's spec.network says about every lease of the pool,
// parsed once: FromObjects and the dynamic range build leases from it.
type Network struct {
	Subnet    *net.IPNet // IPv4, masked
	Router    net.IP     // nil when the pool has no gateway
	DNS       []net.IP
	Domain    string
	LeaseTime time.Duration
	Pool      string
}

// NetworkOf parses pool.spec.network.
func NetworkOf(pool *kubefarmv1.NodePool) (Network, error) {
	netw := pool.Spec.Network
	_, subnet, err := net.ParseCIDR(netw.Subnet)
	if err != nil || subnet.IP.To4() == nil {
		return Network{}, fmt.Errorf("pool subnet %q is not an IPv4 CIDR", netw.Subnet)
	}
	subnet.IP = subnet.IP.To4()
	var router net.IP
	if netw.Gateway != "" {
		if router = net.ParseIP(netw.Gateway).To4(); router == nil {
			return Network{}, fmt.Errorf("pool gateway %q is not IPv4", netw.Gateway)
		}
	}
	dns := make([]net.IP, 0, len(netw.DNS))
	for _, s := range netw.DNS {
		d := net.ParseIP(s).To4()
		if d == nil {
			return Network{}, fmt.Errorf("pool DNS server %q is not IPv4", s)
		}
		dns = append(dns, d)
	}
	leaseTime := DefaultLeaseTime
	if netw.LeaseTime != nil && netw.LeaseTime.Duration > 0 {
		leaseTime = netw.LeaseTime.Duration
	}
	return Network{Subnet: subnet, Router: router, DNS: dns, Domain: netw.Domain, LeaseTime: leaseTime, Pool: pool.Name}, nil
}

// Lease is the lease of mac at ip on this network, without tag options
// and without a machine.
func (n Network) Lease(mac net.HardwareAddr, ip net.IP, hostname string) Lease {
	return Lease{
		MAC: mac, IP: ip.To4(), Mask: n.Subnet.Mask, Router: n.Router, DNS: n.DNS,
		Domain: n.Domain, Hostname: hostname, LeaseTime: n.LeaseTime, Pool: n.Pool,
	}
}

// reservedCodes are options the DHCP server sets itself (the API rejects
// them too) plus framing and relay codes a tag must never inject.
var reservedCodes = map[uint8]bool{
	0: true, 1: true, 3: true, 6: true, 12: true, 15: true, 51: true, 53: true,
	54: true, 60: true, 66: true, 67: true, 82: true, 255: true,
}

// MachineKey is the key Table uses for a machine.
func MachineKey(namespace, name string) string { return namespace + "/" + name }

// FromObjects builds the leases of a machine, one per MAC. It fails when the
// objects are inconsistent (machine not in that pool, address outside the
// subnet, a malformed tag option), so that a bad object is reported and never
// half-served.
func FromObjects(machine *kubefarmv1.Machine, pool *kubefarmv1.NodePool) ([]Lease, error) {
	if err := belongs(machine, pool); err != nil {
		return nil, err
	}
	netw, err := NetworkOf(pool)
	if err != nil {
		return nil, err
	}
	return FromObjectsOn(machine, pool, netw)
}

// belongs checks that machine is one of pool's.
func belongs(machine *kubefarmv1.Machine, pool *kubefarmv1.NodePool) error {
	if machine == nil || pool == nil {
		return fmt.Errorf("machine and pool are required")
	}
	if machine.Namespace != pool.Namespace || machine.Spec.Pool != pool.Name {
		return fmt.Errorf("machine %s/%s belongs to pool %q, not %s/%s",
			machine.Namespace, machine.Name, machine.Spec.Pool, pool.Namespace, pool.Name)
	}
	return nil
}

// StaticIP is a machine's static address (spec.ip) in its 4-byte form,
// once it is known to be IPv4 and inside the network's subnet.
func (n Network) StaticIP(s string) (net.IP, error) {
	ip := net.ParseIP(s).To4()
	if ip == nil {
		return nil, fmt.Errorf("machine IP %q is not IPv4", s)
	}
	if !n.Subnet.Contains(ip) {
		return nil, fmt.Errorf("machine IP %s is outside the pool subnet %s", ip, n.Subnet)
	}
	return ip, nil
}

// FromObjectsOn is FromObjects with the pool's network already parsed
// (NetworkOf(pool)): the leases share its mask, router and DNS slices, so
// a caller that keeps leases of many machines of one pool keeps them once.
func FromObjectsOn(machine *kubefarmv1.Machine, pool *kubefarmv1.NodePool, netw Network) ([]Lease, error) {
	if err := belongs(machine, pool); err != nil {
		return nil, err
	}
	ip, err := netw.StaticIP(machine.Spec.IP)
	if err != nil {
		return nil, err
	}
	extra, err := TagOptions(pool, machine.Spec.Tags)
	if err != nil {
		return nil, fmt.Errorf("machine %s/%s: %w", machine.Namespace, machine.Name, err)
	}

	out := make([]Lease, 0, len(machine.Spec.MACs))
	for _, s := range machine.Spec.MACs {
		mac, err := net.ParseMAC(s)
		if err != nil || len(mac) != 6 {
			return nil, fmt.Errorf("machine %s/%s: MAC %q is not an Ethernet address", machine.Namespace, machine.Name, s)
		}
		l := netw.Lease(mac, ip, machine.Spec.Hostname)
		l.ExtraOptions = extra
		l.Machine = MachineKey(machine.Namespace, machine.Name)
		out = append(out, l)
	}
	return out, nil
}

// TagOptions are the DHCP options of the machine's tags, resolved as every
// part of kubefarm resolves tags (internal/machineconfig: the pool's `all`
// tag first, a later tag overriding an earlier one for the same code), and
// turned into wire bytes here, where the wire's limits are known.
func TagOptions(pool *kubefarmv1.NodePool, machineTags []string) ([]Option, error) {
	resolved, err := machineconfig.Resolve(pool, machineTags)
	if err != nil {
		return nil, err
	}
	if len(resolved.DHCPOptions) == 0 {
		return nil, nil
	}
	out := make([]Option, 0, len(resolved.DHCPOptions))
	for _, o := range resolved.DHCPOptions {
		if o.Code < 1 || o.Code > 254 || reservedCodes[uint8(o.Code)] {
			return nil, fmt.Errorf("option %d cannot be set by a tag", o.Code)
		}
		v, err := ParseOptionValue(o.Value)
		if err != nil {
			return nil, fmt.Errorf("tag option %d: %w", o.Code, err)
		}
		out = append(out, Option{Code: uint8(o.Code), Value: v})
	}
	return out, nil
}

// ParseOptionValue reads the API's option value: hex bytes after "0x", text
// otherwise. One option carries at most 255 bytes on the wire.
func ParseOptionValue(s string) ([]byte, error) {
	var v []byte
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		b, err := hex.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("bad hex value: %w", err)
		}
		v = b
	} else {
		v = []byte(s)
	}
	if len(v) == 0 || len(v) > 255 {
		return nil, fmt.Errorf("value must be 1 to 255 bytes, got %d", len(v))
	}
	return v, nil
}
