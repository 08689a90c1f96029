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
// are the cached objects' own strings, so an entry costs a map slot and one
// small slice. Safe for concurrent use.
type addressIndex struct {
	mu          sync.RWMutex
	byMAC, byIP map[string][]types.NamespacedName
}

func newAddressIndex() *addressIndex {
	return &addressIndex{byMAC: map[string][]types.NamespacedName{}, byIP: map[string][]types.NamespacedName{}}
}

// update calls f, under the lock, with the map and key of each of m's
// addresses and m's name; a nil m (a tombstone without its object) is
// nothing to do. The addresses are its MACs (the API admits only the
// lower-case colon form, so the stored value is the key; NormalizeMAC makes
// the lookup side match) and its IP.
func (x *addressIndex) update(m *kubefarmv1.Machine, f func(index map[string][]types.NamespacedName, addr string, key types.NamespacedName)) {
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
func (x *addressIndex) add(m *kubefarmv1.Machine) {
	x.update(m, func(index map[string][]types.NamespacedName, addr string, key types.NamespacedName) {
		if owners := index[addr]; !slices.Contains(owners, key) {
			index[addr] = append(owners, key)
		}
	})
}

// remove forgets m under each of the addresses it had.
func (x *addressIndex) remove(m *kubefarmv1.Machine) {
	x.update(m, func(index map[string][]types.NamespacedName, addr string, key types.NamespacedName) {
		owners := slices.DeleteFunc(index[addr], func(k types.NamespacedName) bool { return k == key })
		if len(owners) == 0 {
			delete(index, addr)
		} else {
			index[addr] = owners
		}
	})
}

// ownersOfMAC and ownersOfIP are the Machines that claim an address, a copy.
func (x *addressIndex) ownersOfMAC(mac string) []types.NamespacedName { return x.owners(x.byMAC, mac) }
func (x *addressIndex) ownersOfIP(ip string) []types.NamespacedName   { return x.owners(x.byIP, ip) }

func (x *addressIndex) owners(index map[string][]types.NamespacedName, addr string) []types.NamespacedName {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Clone(index[addr])
}
