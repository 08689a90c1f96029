package desired

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"time"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
)

// Catch-all Machines: a pool whose spec.network.dynamicRange.unknownMachines
// is Join gets a Machine for every MAC that took an address from its range
// and no Machine claims (kubefarm's catchall example, dnsmasq's
// dhcp-generate-names). The Machine is named after the MAC, keeps the
// leased address as its static IP, and has no entry in spec.machines: the
// pool rebuilds it from the Machine itself on every pass (CatchAllMember
// with Existing), so it survives the lease, reboots and rollouts.

// CatchAllHostname is the hostname of a catch-all machine: its MAC with
// dashes (aa-bb-cc-dd-ee-ff), the name dnsmasq's dhcp-generate-names makes.
func CatchAllHostname(mac string) string { return strings.ReplaceAll(strings.ToLower(mac), ":", "-") }

// CatchAllName is the name of the catch-all Machine of mac in pool:
// <pool>-<mac with dashes>, at most 63+1+17 characters since a pool name
// is a label value (Machines refuses longer ones).
func CatchAllName(pool, mac string) string {
	return machineconfig.MachineName(pool, CatchAllHostname(mac))
}

// LeaseJoins tells whether lease l, read at now, asks for a catch-all
// Machine in pool: the pool's range says Join, the lease is of this pool
// and inside its range, not declined, not being deleted, bound and
// unexpired.
//
// Bound is spec.boundTime, which kubefarm-pxe writes when it acknowledges
// a REQUEST (pxe/dynamic) and clears when the address is offered afresh or
// declined: a bare OFFER (the client may take another server's offer, or
// none) makes no Machine, whatever the pool's lease time. A lease that has
// lapsed makes no new Machine (its client is gone), which is also why a
// Machine once made never depends on its lease again. expireTime is
// compared with the manager's clock: skew from kubefarm-pxe's only moves
// the moment a lapsed lease stops making Machines.
func LeaseJoins(pool *kubefarmv1.NodePool, l *kubefarmv1.DHCPLease, now time.Time) bool {
	if pool == nil || l == nil || !joins(pool) || l.Namespace != pool.Namespace || l.Spec.Pool != pool.Name ||
		l.Spec.Declined || !l.DeletionTimestamp.IsZero() {
		return false
	}
	if l.Spec.BoundTime == nil || !l.Spec.ExpireTime.After(now) {
		return false
	}
	ip, err := netip.ParseAddr(l.Spec.IP)
	return err == nil && inRange(pool, ip) && validMAC(l.Spec.MAC)
}

// joins: the pool's range makes Machines for unknown MACs.
func joins(pool *kubefarmv1.NodePool) bool {
	r := pool.Spec.Network.DynamicRange
	return r != nil && r.UnknownMachines == kubefarmv1.UnknownJoin
}

// rangeBounds is the pool's dynamic range as numbers; ok false without a
// (parsable) range.
func rangeBounds(pool *kubefarmv1.NodePool) (start, end uint32, ok bool) {
	r := pool.Spec.Network.DynamicRange
	if r == nil {
		return 0, 0, false
	}
	s, err1 := netip.ParseAddr(r.Start)
	e, err2 := netip.ParseAddr(r.End)
	if err1 != nil || err2 != nil || !s.Is4() || !e.Is4() || u32(e) < u32(s) {
		return 0, 0, false
	}
	return u32(s), u32(e), true
}

func inRange(pool *kubefarmv1.NodePool, ip netip.Addr) bool {
	s, e, ok := rangeBounds(pool)
	return ok && ip.Is4() && u32(ip) >= s && u32(ip) <= e
}

// RangeSize is the number of addresses of the pool's dynamic range, 0
// without one: the most catch-all Machines a pool makes.
func RangeSize(pool *kubefarmv1.NodePool) int {
	s, e, ok := rangeBounds(pool)
	if !ok {
		return 0
	}
	return int(e-s) + 1
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// CatchAllMember is a MAC that joins the pool through its catch-all range,
// with its address.
type CatchAllMember struct {
	MAC, IP string
	// Existing: the pool's catch-all Machine of this MAC exists (MAC and
	// IP are read from it). It is kept whatever the pool's range and
	// policy are now; a new member (from a lease LeaseJoins accepted)
	// becomes a Machine only while the pool says Join and has fewer
	// catch-all Machines than its range has addresses.
	Existing bool
}

// CatchAll builds the catch-all Machines of pool from members, beside
// entries (the Machines of spec.machines, from Machines), and names the
// existing catch-all Machines to delete (retired). It expects a pool
// Machines accepted.
//
// Entries win: a member whose MAC or IP an entry has is dropped, and an
// existing one is retired, unless the entry's Machine has the member's
// very name (an entry named after the MAC, as enrolling a catch-all
// machine under its generated name gives): then that one object becomes
// the entry's Machine and nothing is deleted. A MAC or IP two members
// share goes to the first: existing Machines before leases, then by MAC.
// A member whose MAC or IP is malformed is dropped.
//
// The result is in name order, so the same inputs give the same Machines.
func CatchAll(pool *kubefarmv1.NodePool, entries []*kubefarmv1.Machine, members []CatchAllMember) (out []*kubefarmv1.Machine, retired []string) {
	entryMAC, entryIP, entryName := map[string]string{}, map[string]string{}, map[string]bool{}
	for _, m := range entries {
		for _, mac := range m.Spec.MACs {
			entryMAC[mac] = m.Name
		}
		entryIP[m.Spec.IP] = m.Name
		entryName[m.Name] = true
	}
	ordered := slices.Clone(members)
	slices.SortStableFunc(ordered, func(a, b CatchAllMember) int {
		if a.Existing != b.Existing {
			if a.Existing {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.MAC, b.MAC), cmp.Compare(a.IP, b.IP))
	})
	limit := 0
	if joins(pool) {
		limit = RangeSize(pool)
	}
	owner := ownerRef(pool)
	seenName, seenMAC, seenIP := map[string]bool{}, map[string]string{}, map[string]bool{}
	for _, mem := range ordered {
		mac := strings.ToLower(mem.MAC)
		name := CatchAllName(pool.Name, mac)
		if entryName[name] {
			// The entry's Machine is this object now.
			continue
		}
		if _, ok := entryMAC[mac]; ok || entryIP[mem.IP] != "" {
			if mem.Existing {
				retired = append(retired, name)
			}
			continue
		}
		if seenName[CatchAllHostname(mac)] || seenIP[mem.IP] {
			continue
		}
		if !mem.Existing && len(out) >= limit {
			continue
		}
		if !mem.Existing {
			ip, err := netip.ParseAddr(mem.IP)
			if err != nil || !inRange(pool, ip) {
				continue
			}
		}
		e := &kubefarmv1.MachineEntry{Name: CatchAllHostname(mac), MACs: []string{mac}, IP: mem.IP}
		m, err := machine(pool, e, owner, seenName, seenMAC)
		if err != nil {
			continue
		}
		seenIP[mem.IP] = true
		m.Labels[kubefarmv1.LabelCatchAll] = "true"
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *kubefarmv1.Machine) int { return cmp.Compare(a.Name, b.Name) })
	slices.Sort(retired)
	return out, retired
}
