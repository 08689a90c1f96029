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
// leases so that a machine's leases are replaced or removed as a whole (its
// MACs and IPs are the leases'). Safe for concurrent use.
type Table struct {
	mu        sync.RWMutex
	byMAC     map[macKey]*Lease
	byIP      map[ipKey]*Lease
	byMachine map[string][]*Lease
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{byMAC: map[macKey]*Lease{}, byIP: map[ipKey]*Lease{}, byMachine: map[string][]*Lease{}}
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
	stored := make([]*Lease, 0, len(leases))
	for i := range leases {
		if _, ok := keyOf(leases[i].MAC); !ok {
			continue
		}
		l := leases[i] // copy: the table owns its leases
		l.Machine = machine
		stored = append(stored, &l)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(machine)
	for _, l := range stored {
		k, _ := keyOf(l.MAC)
		if prev, ok := t.byMAC[k]; ok && prev.Machine != machine {
			t.dropKeyLocked(prev.Machine, k)
		}
		t.byMAC[k] = l
	}
	if len(stored) > 0 {
		t.byMachine[machine] = stored
	}
	for i, l := range stored {
		k, ok := ipKeyOf(l.IP)
		if !ok || hasIP(stored[:i], k) {
			continue
		}
		t.byIP[k] = l
	}
}

// hasIP says whether one of leases has the IP k.
func hasIP(leases []*Lease, k ipKey) bool {
	for _, l := range leases {
		if o, ok := ipKeyOf(l.IP); ok && o == k {
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
	held := t.byMachine[machine]
	out := make([]net.HardwareAddr, 0, len(held))
	for _, l := range held {
		out = append(out, net.HardwareAddr(append([]byte(nil), l.MAC...)))
	}
	return out
}

func (t *Table) removeLocked(machine string) {
	held := t.byMachine[machine]
	for _, l := range held {
		// Only remove keys still owned by this machine: another machine
		// may have taken the MAC over since.
		k, _ := keyOf(l.MAC)
		if cur, ok := t.byMAC[k]; ok && cur.Machine == machine {
			delete(t.byMAC, k)
		}
	}
	delete(t.byMachine, machine)
	t.dropIPsLocked(machine, held)
}

// dropIPsLocked removes the IP entries of held, the leases machine had,
// that machine still owns.
func (t *Table) dropIPsLocked(machine string, held []*Lease) {
	for _, l := range held {
		if k, ok := ipKeyOf(l.IP); ok {
			if cur, ok := t.byIP[k]; ok && cur.Machine == machine {
				delete(t.byIP, k)
			}
		}
	}
}

// dropKeyLocked forgets that owner holds k, after another machine took it.
func (t *Table) dropKeyLocked(owner string, k macKey) {
	held := t.byMachine[owner]
	var moved *Lease
	rest := held
	for i, l := range held {
		if o, _ := keyOf(l.MAC); o == k {
			moved = l
			rest = append(held[:i:i], held[i+1:]...)
			break
		}
	}
	if len(rest) == 0 {
		delete(t.byMachine, owner)
		t.dropIPsLocked(owner, held)
		return
	}
	t.byMachine[owner] = rest
	// The IP entries may point at the lease of the MAC that moved: point
	// them at a lease the owner still has.
	for _, l := range held {
		if ik, ok := ipKeyOf(l.IP); ok && t.byIP[ik] == moved && moved != nil {
			t.byIP[ik] = rest[0]
		}
	}
}
