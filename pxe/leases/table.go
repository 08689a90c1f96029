package leases

import (
	"net"
	"sync"
)

type macKey [6]byte

func keyOf(mac net.HardwareAddr) (macKey, bool) {
	var k macKey
	if len(mac) != 6 {
		return k, false
	}
	copy(k[:], mac)
	return k, true
}

type ipKey [4]byte

func ipKeyOf(ip net.IP) (ipKey, bool) {
	var k ipKey
	ip4 := ip.To4()
	if ip4 == nil {
		return k, false
	}
	copy(k[:], ip4)
	return k, true
}

// Table is the lease index: MAC -> lease and IP -> lease, plus machine -> its
// MACs and IPs so that a machine's leases are replaced or removed as a whole.
// Safe for concurrent use.
type Table struct {
	mu        sync.RWMutex
	byMAC     map[macKey]*Lease
	byIP      map[ipKey]*Lease
	byMachine map[string][]macKey
	ipsOf     map[string][]ipKey
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{byMAC: map[macKey]*Lease{}, byIP: map[ipKey]*Lease{},
		byMachine: map[string][]macKey{}, ipsOf: map[string][]ipKey{}}
}

// LookupIP returns a lease of the machine that holds a static IP (of its
// MACs, the first the machine lists). The returned lease is shared and must
// not be modified. It does not allocate.
//
// If two machines claim one IP (the API forbids it; an edit can pass through
// such a state), the one written last is found, and after it is deleted the
// other is found again only once it is next written.
func (t *Table) LookupIP(ip net.IP) (*Lease, bool) {
	k, ok := ipKeyOf(ip)
	if !ok {
		return nil, false
	}
	t.mu.RLock()
	l, ok := t.byIP[k]
	t.mu.RUnlock()
	return l, ok
}

// Lookup returns the lease of a MAC. The returned lease is shared and must
// not be modified. It does not allocate.
func (t *Table) Lookup(mac net.HardwareAddr) (*Lease, bool) {
	k, ok := keyOf(mac)
	if !ok {
		return nil, false
	}
	t.mu.RLock()
	l, ok := t.byMAC[k]
	t.mu.RUnlock()
	return l, ok
}

// Upsert replaces every lease of a machine with leases (which should all name
// that machine). MACs the machine no longer has are removed. If another
// machine holds one of the MACs (the admission webhook forbids it, but
// objects can pass through such states during an edit), the newest writer
// wins and the other machine keeps its remaining MACs.
func (t *Table) Upsert(machine string, leases []Lease) {
	if len(leases) == 0 {
		t.Delete(machine)
		return
	}
	keys := make([]macKey, 0, len(leases))
	stored := make([]*Lease, 0, len(leases))
	for i := range leases {
		k, ok := keyOf(leases[i].MAC)
		if !ok {
			continue
		}
		l := leases[i] // copy: the table owns its leases
		l.Machine = machine
		keys = append(keys, k)
		stored = append(stored, &l)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(machine)
	for i, k := range keys {
		if prev, ok := t.byMAC[k]; ok && prev.Machine != machine {
			t.dropKeyLocked(prev.Machine, k)
		}
		t.byMAC[k] = stored[i]
	}
	if len(keys) > 0 {
		t.byMachine[machine] = keys
	}
	var ips []ipKey
	for _, l := range stored {
		k, ok := ipKeyOf(l.IP)
		if !ok || containsIP(ips, k) {
			continue
		}
		ips = append(ips, k)
		t.byIP[k] = l
	}
	if len(ips) > 0 {
		t.ipsOf[machine] = ips
	}
}

func containsIP(ips []ipKey, k ipKey) bool {
	for _, o := range ips {
		if o == k {
			return true
		}
	}
	return false
}

// Delete removes every lease of a machine.
func (t *Table) Delete(machine string) {
	t.mu.Lock()
	t.removeLocked(machine)
	t.mu.Unlock()
}

// Len is the number of MACs with a lease.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byMAC)
}

// MachineMACs returns the MACs a machine holds leases for.
func (t *Table) MachineMACs(machine string) []net.HardwareAddr {
	t.mu.RLock()
	defer t.mu.RUnlock()
	keys := t.byMachine[machine]
	out := make([]net.HardwareAddr, 0, len(keys))
	for _, k := range keys {
		out = append(out, net.HardwareAddr(append([]byte(nil), k[:]...)))
	}
	return out
}

func (t *Table) removeLocked(machine string) {
	for _, k := range t.byMachine[machine] {
		// Only remove keys still owned by this machine: another machine
		// may have taken the MAC over since.
		if l, ok := t.byMAC[k]; ok && l.Machine == machine {
			delete(t.byMAC, k)
		}
	}
	delete(t.byMachine, machine)
	t.dropIPsLocked(machine)
}

// dropIPsLocked removes the IP entries machine still owns.
func (t *Table) dropIPsLocked(machine string) {
	for _, k := range t.ipsOf[machine] {
		if l, ok := t.byIP[k]; ok && l.Machine == machine {
			delete(t.byIP, k)
		}
	}
	delete(t.ipsOf, machine)
}

// dropKeyLocked forgets that owner holds k, after another machine took it.
func (t *Table) dropKeyLocked(owner string, k macKey) {
	keys := t.byMachine[owner]
	for i, o := range keys {
		if o == k {
			keys = append(keys[:i:i], keys[i+1:]...)
			break
		}
	}
	if len(keys) == 0 {
		delete(t.byMachine, owner)
		t.dropIPsLocked(owner)
		return
	}
	t.byMachine[owner] = keys
	// The IP entries may point at the lease of the MAC that moved: point
	// them at a lease the owner still has.
	for _, ik := range t.ipsOf[owner] {
		if l, ok := t.byIP[ik]; ok && l.Machine == owner && l.MAC != nil {
			if mk, _ := keyOf(l.MAC); mk == k {
				t.byIP[ik] = t.byMAC[keys[0]]
			}
		}
	}
}
