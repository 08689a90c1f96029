package httpboot

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// addressIndex maps each boot MAC and static IP of the cached Machines to
// the Machines that claim it: normally one, more only while an edit passes
// through a conflict the admission webhook would refuse. Its keys and names
// are the cached objects' own strings, and an address with one owner (all
// of them, but for conflicts) costs one map slot and no allocation of its
// own: a farm has tens of thousands. Safe for concurrent use.
type addressIndex struct {
	mu          sync.RWMutex
	byMAC, byIP owners
}

// owners are the Machines of each address, in two maps: one for the
// addresses with a single owner, one for the rest.
type owners struct {
	one  map[string]types.NamespacedName
	many map[string][]types.NamespacedName
}

func newOwners() owners {
	return owners{one: map[string]types.NamespacedName{}, many: map[string][]types.NamespacedName{}}
}

func newAddressIndex() *addressIndex {
	return &addressIndex{byMAC: newOwners(), byIP: newOwners()}
}

func (o owners) add(addr string, key types.NamespacedName) {
	if keys, ok := o.many[addr]; ok {
		if !slices.Contains(keys, key) {
			o.many[addr] = append(keys, key)
		}
		return
	}
	if cur, ok := o.one[addr]; ok && cur != key {
		delete(o.one, addr)
		o.many[addr] = []types.NamespacedName{cur, key}
		return
	}
	o.one[addr] = key
}

func (o owners) remove(addr string, key types.NamespacedName) {
	if keys, ok := o.many[addr]; ok {
		keys = slices.DeleteFunc(keys, func(k types.NamespacedName) bool { return k == key })
		switch len(keys) {
		case 1:
			delete(o.many, addr)
			o.one[addr] = keys[0]
		default:
			o.many[addr] = keys
		}
		return
	}
	if o.one[addr] == key {
		delete(o.one, addr)
	}
}

// of returns a copy of addr's owners.
func (o owners) of(addr string) []types.NamespacedName {
	if keys, ok := o.many[addr]; ok {
		return slices.Clone(keys)
	}
	if k, ok := o.one[addr]; ok {
		return []types.NamespacedName{k}
	}
	return nil
}

func (o owners) len() int { return len(o.one) + len(o.many) }

// update calls f, under the lock, with the owners and key of each of m's
// addresses and m's name; a nil m (a tombstone without its object) is
// nothing to do. The addresses are its MACs (the API admits only the
// lower-case colon form, so the stored value is the key; NormalizeMAC makes
// the lookup side match) and its IP.
func (x *addressIndex) update(m *kubefarmv1.Machine, f func(o owners, addr string, key types.NamespacedName)) {
	if m == nil {
		return
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, mac := range m.Spec.MACs {
		f(x.byMAC, mac, key)
	}
	if m.Spec.IP != "" {
		f(x.byIP, m.Spec.IP, key)
	}
}

// add indexes m under each of its addresses.
func (x *addressIndex) add(m *kubefarmv1.Machine) { x.update(m, owners.add) }

// remove forgets m under each of the addresses it had.
func (x *addressIndex) remove(m *kubefarmv1.Machine) { x.update(m, owners.remove) }

// sameAddresses tells whether a and b are the same Machine with the same
// MACs and IP, so an update from a to b leaves the index as it is.
func sameAddresses(a, b *kubefarmv1.Machine) bool {
	return a != nil && b != nil && a.Namespace == b.Namespace && a.Name == b.Name &&
		a.Spec.IP == b.Spec.IP && slices.Equal(a.Spec.MACs, b.Spec.MACs)
}

// ownersOfMAC and ownersOfIP are the Machines that claim an address, a copy.
func (x *addressIndex) ownersOfMAC(mac string) []types.NamespacedName {
	return x.ownersOf(x.byMAC, mac)
}
func (x *addressIndex) ownersOfIP(ip string) []types.NamespacedName { return x.ownersOf(x.byIP, ip) }

func (x *addressIndex) ownersOf(o owners, addr string) []types.NamespacedName {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return o.of(addr)
}
