package dynamic

import (
	"fmt"
	"hash/fnv"
	"iter"
	"net"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MaxRangeSize is the largest range served, as the NodePool webhook enforces.
const MaxRangeSize = 65536

// Range is a pool's parsed spec.network.dynamicRange, inclusive.
type Range struct {
	start, end uint32
	// network and broadcast of the subnet; never handed out (unless the
	// subnet is a /31 or /32, which has neither).
	network, broadcast uint32
	noEdges            bool
}

// ParseRange reads pool's dynamic range. Errors name the pool and the field.
func ParseRange(pool *kubefarmv1.NodePool) (Range, error) {
	name := pool.Namespace + "/" + pool.Name
	r := pool.Spec.Network.DynamicRange
	if r == nil {
		return Range{}, fmt.Errorf("pool %s: spec.network.dynamicRange is not set", name)
	}
	_, subnet, err := net.ParseCIDR(pool.Spec.Network.Subnet)
	if err != nil || subnet.IP.To4() == nil {
		return Range{}, fmt.Errorf("pool %s: spec.network.subnet %q is not an IPv4 CIDR", name, pool.Spec.Network.Subnet)
	}
	parse := func(field, s string) (uint32, error) {
		ip := net.ParseIP(s).To4()
		if ip == nil {
			return 0, fmt.Errorf("pool %s: spec.network.dynamicRange.%s %q is not an IPv4 address", name, field, s)
		}
		if !subnet.Contains(ip) {
			return 0, fmt.Errorf("pool %s: spec.network.dynamicRange.%s %s is outside spec.network.subnet %s", name, field, ip, subnet)
		}
		return u32(ip), nil
	}
	start, err := parse("start", r.Start)
	if err != nil {
		return Range{}, err
	}
	end, err := parse("end", r.End)
	if err != nil {
		return Range{}, err
	}
	if end < start {
		return Range{}, fmt.Errorf("pool %s: spec.network.dynamicRange.end %s is below start %s", name, r.End, r.Start)
	}
	if n := uint64(end) - uint64(start) + 1; n > MaxRangeSize {
		return Range{}, fmt.Errorf("pool %s: spec.network.dynamicRange.end %s: the range holds %d addresses, more than %d", name, r.End, n, MaxRangeSize)
	}
	ones, _ := subnet.Mask.Size()
	network := u32(subnet.IP.To4())
	return Range{
		start: start, end: end,
		network: network, broadcast: network | ^u32(net.IP(subnet.Mask)),
		noEdges: ones >= 31,
	}, nil
}

// Size is the number of addresses from start to end.
func (r Range) Size() int { return int(r.end-r.start) + 1 }

// Contains says whether ip is an address of the range that may be handed
// out: inside start..end and neither the subnet's network nor its broadcast
// address.
func (r Range) Contains(ip net.IP) bool {
	ip4 := ip.To4()
	if ip4 == nil {
		return false
	}
	v := u32(ip4)
	return v >= r.start && v <= r.end && r.usable(v)
}

func (r Range) usable(v uint32) bool {
	return r.noEdges || (v != r.network && v != r.broadcast)
}

// First is the offset into the range where mac's search starts: the 64-bit
// FNV-1a hash of the six bytes, modulo the size. It depends on nothing but
// the MAC and the range, so every replica computes the same one.
func (r Range) First(mac net.HardwareAddr) int {
	h := fnv.New64a()
	_, _ = h.Write(mac)
	return int(h.Sum64() % uint64(r.Size()))
}

// Candidates yields the addresses to try for mac, in the same order on
// every replica: from First(mac) upwards, wrapping to start, each address of
// the range once, without the network and broadcast addresses and without
// the addresses skip reports (the static machines' IPs).
func (r Range) Candidates(mac net.HardwareAddr, skip func(net.IP) bool) iter.Seq[net.IP] {
	return func(yield func(net.IP) bool) {
		size := uint32(r.Size())
		first := uint32(r.First(mac))
		for i := uint32(0); i < size; i++ {
			v := r.start + (first+i)%size
			if !r.usable(v) {
				continue
			}
			ip := ipOf(v)
			if skip != nil && skip(ip) {
				continue
			}
			if !yield(ip) {
				return
			}
		}
	}
}

func u32(ip net.IP) uint32 {
	return uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
}

func ipOf(v uint32) net.IP { return net.IP{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// LeaseName is the DHCPLease object name of ip in pool: <pool>-a-b-c-d. One
// address of a pool has one name, so creating the object claims the address.
func LeaseName(pool string, ip net.IP) string {
	ip4 := ip.To4()
	return fmt.Sprintf("%s-%d-%d-%d-%d", pool, ip4[0], ip4[1], ip4[2], ip4[3])
}
