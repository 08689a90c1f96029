package inventory

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// Inventory is kubefarm-pxe's table of Machines: one compact record per
// Machine, indexed by name, boot MAC and static IP, with each Machine's
// static lease derived against its NodePool. It is the store of a client-go
// Reflector on Machines (Add, Update, Delete, Replace, Resync), so a decoded
// Machine lives only as long as the event that carried it, and it follows
// the NodePools through an informer of the controller-runtime cache. Safe
// for concurrent use; lookups take a read lock.
type Inventory struct {
	log    logr.Logger
	errors atomic.Uint64

	mu    sync.RWMutex
	byKey map[types.NamespacedName]*record
	byMAC owners[mac]
	byIP  owners[[4]byte]
	pools map[types.NamespacedName]*poolState

	machinesSynced atomic.Bool
	poolEvents     toolscache.ResourceEventHandlerRegistration
}

// poolState is one version of a NodePool, parsed once for its machines.
type poolState struct {
	pool    *kubefarmv1.NodePool // the cached object, read only
	network leases.Network
	// options are the DHCP options of each tag list the pool's machines
	// carry (key: the tags joined by NUL), resolved once per pool version.
	options map[string]tagOptions
}

type tagOptions struct {
	options []leases.Option
	err     error
}

// New is an Inventory following the NodePools of c. It registers its
// informer handler, so call it before c starts; Machines come from Run.
func New(ctx context.Context, c cache.Cache, log logr.Logger) (*Inventory, error) {
	inv := newInventory(log)
	pi, err := c.GetInformer(ctx, &kubefarmv1.NodePool{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("nodepool informer: %w", err)
	}
	inv.poolEvents, err = pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { inv.setPool(obj) },
		UpdateFunc: func(_, obj any) { inv.setPool(obj) },
		DeleteFunc: func(obj any) { inv.removePool(obj) },
	})
	if err != nil {
		return nil, err
	}
	return inv, nil
}

func newInventory(log logr.Logger) *Inventory {
	return &Inventory{
		log:   log,
		byKey: map[types.NamespacedName]*record{},
		byMAC: newOwners[mac](),
		byIP:  newOwners[[4]byte](),
		pools: map[types.NamespacedName]*poolState{},
	}
}

// ListWatch lists and watches the Machines of namespace (all when empty)
// through c, for Run. Each Machine is slimmed as it arrives: at start the
// reflector holds the whole first list (or the stream of its initial
// events) before the inventory sees any of it, and a Machine's managed
// fields and annotations alone can outweigh the rest of it.
func ListWatch(c client.WithWatch, namespace string) toolscache.ListerWatcher {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l := &kubefarmv1.MachineList{}
			if err := c.List(ctx, l, client.InNamespace(namespace), &client.ListOptions{Raw: &o}); err != nil {
				return nil, err
			}
			for i := range l.Items {
				slim(&l.Items[i])
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := c.Watch(ctx, &kubefarmv1.MachineList{}, client.InNamespace(namespace), &client.ListOptions{Raw: &o})
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				// A bookmark is left whole: the one that ends the initial
				// events says so in an annotation the reflector reads.
				if m, ok := e.Object.(*kubefarmv1.Machine); ok && e.Type != watch.Bookmark {
					slim(m)
				}
				return e, true
			}), nil
		},
	}
}

// slim drops in place what newRecord does not read of a Machine.
func slim(m *kubefarmv1.Machine) {
	m.ManagedFields, m.Annotations, m.Labels, m.OwnerReferences, m.Finalizers = nil, nil, nil, nil, nil
	m.Spec.Power = nil
	m.Status.History = nil
}

// Run keeps the inventory in step with the Machines lw lists and watches
// until ctx is done. When the API server goes away the reflector retries
// and the inventory keeps answering with what it last knew: machines must
// keep booting while the admin cluster is down.
func (inv *Inventory) Run(ctx context.Context, lw toolscache.ListerWatcher) {
	r := toolscache.NewReflectorWithOptions(lw, &kubefarmv1.Machine{}, inv, toolscache.ReflectorOptions{Name: "kubefarm-pxe machines"})
	r.RunWithContext(ctx)
}

// HasSynced says whether every Machine of the first list and every NodePool
// of the cache's first list are in, with the leases derived: what a replica
// waits for before it answers DHCP.
func (inv *Inventory) HasSynced() bool {
	return inv.machinesSynced.Load() && inv.poolEvents != nil && inv.poolEvents.HasSynced()
}

// Errors counts the Machines and NodePools whose lease could not be derived
// (the last good one is kept) since start.
func (inv *Inventory) Errors() uint64 { return inv.errors.Load() }

// Register registers kubefarm_pxe_inventory_machines and
// kubefarm_pxe_inventory_errors_total (Machines and Errors) on reg.
func (inv *Inventory) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kubefarm_pxe_inventory_machines",
			Help: "Machines the replica holds."}, func() float64 { return float64(inv.Machines()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kubefarm_pxe_inventory_errors_total",
			Help: "Machines and NodePools whose static lease could not be derived (the last good one is kept; the log names the object)."},
			func() float64 { return float64(inv.Errors()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Add, Update, Delete, Replace and Resync make the Inventory the
// Reflector's store (toolscache.ReflectorStore).

// Add records a Machine.
func (inv *Inventory) Add(obj any) error { return inv.Update(obj) }

// Update replaces a Machine's record.
func (inv *Inventory) Update(obj any) error {
	m, ok := obj.(*kubefarmv1.Machine)
	if !ok {
		return fmt.Errorf("inventory: %T is not a Machine", obj)
	}
	r := newRecord(m)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.putLocked(r, inv.byKey[r.key])
	return nil
}

// Delete forgets a Machine.
func (inv *Inventory) Delete(obj any) error {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return fmt.Errorf("inventory: %T is not an object", obj)
	}
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if old, ok := inv.byKey[key]; ok {
		inv.unindexLocked(old)
		delete(inv.byKey, key)
	}
	return nil
}

// Replace makes list the whole set of Machines (the reflector's list, at
// start and after a watch could not resume): records not in it go.
func (inv *Inventory) Replace(list []any, _ string) error {
	records := make([]*record, 0, len(list))
	for _, obj := range list {
		m, ok := obj.(*kubefarmv1.Machine)
		if !ok {
			return fmt.Errorf("inventory: %T is not a Machine", obj)
		}
		records = append(records, newRecord(m))
	}
	inv.mu.Lock()
	seen := make(map[types.NamespacedName]struct{}, len(records))
	for _, r := range records {
		seen[r.key] = struct{}{}
		inv.putLocked(r, inv.byKey[r.key])
	}
	for key, old := range inv.byKey {
		if _, ok := seen[key]; !ok {
			inv.unindexLocked(old)
			delete(inv.byKey, key)
		}
	}
	inv.mu.Unlock()
	inv.machinesSynced.Store(true)
	return nil
}

// Resync has nothing to do: no resync period is set.
func (inv *Inventory) Resync() error { return nil }

// putLocked stores r in place of old (nil for a new Machine), deriving its
// lease against its pool.
func (inv *Inventory) putLocked(r, old *record) {
	inv.deriveLocked(r, old)
	if old != nil {
		inv.unindexLocked(old)
	}
	inv.byKey[r.key] = r
	for _, m := range r.macs {
		inv.byMAC.add(m, r)
	}
	for _, ip := range r.addresses() {
		inv.byIP.add(ip, r)
	}
}

func (inv *Inventory) unindexLocked(r *record) {
	for _, m := range r.macs {
		inv.byMAC.remove(m, r)
	}
	for _, ip := range r.addresses() {
		inv.byIP.remove(ip, r)
	}
}

// deriveLocked sets r.dhcp from r and its pool. A Machine whose pool is not
// known has no lease (the pool's add event derives it). One that cannot
// derive a lease keeps the last good one (from old): a machine that boots
// with a known-good configuration beats one that cannot boot at all, and
// the error is logged and counted.
func (inv *Inventory) deriveLocked(r, old *record) {
	p, ok := inv.pools[types.NamespacedName{Namespace: r.key.Namespace, Name: r.pool}]
	if !ok {
		r.dhcp = facts{}
		return
	}
	f, err := p.derive(r)
	if err != nil {
		inv.errors.Add(1)
		inv.log.Error(err, "deriving the lease; keeping the previous one", "machine", r.key.String())
		if old != nil && old.dhcp.valid {
			r.dhcp = old.dhcp
		} else {
			r.dhcp = facts{}
		}
		return
	}
	r.dhcp = f
}

// derive is r's lease facts in this pool version.
func (p *poolState) derive(r *record) (facts, error) {
	if r.text != nil && len(r.text.macs) != len(r.macs) {
		return facts{}, fmt.Errorf("a MAC of %v is not an Ethernet address", r.text.macs)
	}
	ip, err := p.network.StaticIP(r.ipString())
	if err != nil {
		return facts{}, err
	}
	key := strings.Join(r.tags, "\x00")
	t, ok := p.options[key]
	if !ok {
		t.options, t.err = leases.TagOptions(p.pool, r.tags)
		p.options[key] = t
	}
	if t.err != nil {
		return facts{}, t.err
	}
	return facts{valid: true, ip: [4]byte(ip), hostname: r.hostname, options: t.options, pool: p}, nil
}

// setPool takes a NodePool's new version and derives its machines' leases
// again. A version whose network does not parse leaves the last good one.
func (inv *Inventory) setPool(obj any) {
	p, ok := obj.(*kubefarmv1.NodePool)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	netw, err := leases.NetworkOf(p)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if old, ok := inv.pools[key]; ok && old.pool.ResourceVersion == p.ResourceVersion {
		return
	}
	if err != nil {
		inv.errors.Add(1)
		inv.log.Error(err, "parsing the pool's network; keeping the previous one", "pool", key.String())
		return
	}
	inv.pools[key] = &poolState{pool: p, network: netw, options: map[string]tagOptions{}}
	inv.rederiveLocked(key)
}

// removePool withdraws the leases of a deleted pool's machines.
func (inv *Inventory) removePool(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	delete(inv.pools, key)
	inv.rederiveLocked(key)
}

// rederiveLocked replaces the record of each machine of pool with one
// derived against the pool's current state. A scan of all records: pool
// events are rare, and an index by pool would cost memory for every
// Machine.
func (inv *Inventory) rederiveLocked(pool types.NamespacedName) {
	var mine []*record
	for key, r := range inv.byKey {
		if key.Namespace == pool.Namespace && r.pool == pool.Name {
			mine = append(mine, r)
		}
	}
	for _, r := range mine {
		nr := *r
		inv.putLocked(&nr, r)
	}
}

// Lookup is the static lease of a boot MAC, for the DHCP server: built on
// each call from the Machine's record and its pool (one allocation), so
// no lease is stored per machine. A MAC that two Machines claim (which
// admission refuses) has none: either could be handed the other's
// identity.
func (inv *Inventory) Lookup(hw net.HardwareAddr) (*leases.Lease, bool) {
	if len(hw) != 6 {
		return nil, false
	}
	inv.mu.RLock()
	r, n := inv.byMAC.of(mac(hw))
	inv.mu.RUnlock()
	if n != 1 || !r.dhcp.valid {
		return nil, false
	}
	return r.lease(mac(hw)), true
}

// LookupIP is the static lease of an address, for the catch-all allocator,
// which must never hand out a Machine's address: any Machine claiming it
// with a lease answers.
func (inv *Inventory) LookupIP(ip net.IP) (*leases.Lease, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok || !a.Unmap().Is4() {
		return nil, false
	}
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	for _, r := range inv.byIP.all(a.Unmap().As4()) {
		if r.dhcp.valid && len(r.macs) > 0 {
			return r.lease(r.macs[0]), true
		}
	}
	return nil, false
}

// lease builds the static lease of r's MAC m with the pool network's own
// builder, as leases.FromObjectsOn does. Its MAC and IP slices point into
// the immutable record.
func (r *record) lease(m mac) *leases.Lease {
	f := &r.dhcp
	var hw net.HardwareAddr
	if i := slices.Index(r.macs, m); i >= 0 {
		hw = r.macs[i][:]
	}
	l := f.pool.network.Lease(hw, f.ip[:], f.hostname)
	l.ExtraOptions = f.options
	l.Machine = leases.MachineKey(r.key.Namespace, r.key.Name)
	return &l
}

// Len is the number of boot MACs with a lease.
func (inv *Inventory) Len() int {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	n := 0
	for _, r := range inv.byMAC.one {
		if r.dhcp.valid {
			n++
		}
	}
	return n
}

// Machines is the number of Machines held.
func (inv *Inventory) Machines() int {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return len(inv.byKey)
}

// ByMAC is the Machine with a boot MAC (any form net.ParseMAC reads), for
// the boot handlers; a MAC two Machines claim names none.
func (inv *Inventory) ByMAC(s string) (*kubefarmv1.Machine, bool) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return nil, false
	}
	inv.mu.RLock()
	r, n := inv.byMAC.of(mac(hw))
	inv.mu.RUnlock()
	return inv.unique("mac", s, r, n)
}

// ByIP is the Machine whose static address is ip (dotted quad). Pools in
// different namespaces may reuse an address on separate networks; an
// address that is not unique names no Machine.
func (inv *Inventory) ByIP(s string) (*kubefarmv1.Machine, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return nil, false
	}
	inv.mu.RLock()
	r, n := inv.byIP.of(a.As4())
	inv.mu.RUnlock()
	return inv.unique("ip", s, r, n)
}

func (inv *Inventory) unique(kind, addr string, r *record, n int) (*kubefarmv1.Machine, bool) {
	switch n {
	case 1:
		return r.machine(), true
	case 0:
		return nil, false
	default:
		inv.log.Info("several machines claim one address; not serving it as any of them", kind, addr, "machines", n)
		return nil, false
	}
}

// Machine is the named Machine as kubefarm-pxe reads it.
func (inv *Inventory) Machine(key types.NamespacedName) (*kubefarmv1.Machine, bool) {
	inv.mu.RLock()
	r, ok := inv.byKey[key]
	inv.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return r.machine(), true
}

// UID is a Machine's UID, for the Events about it.
func (inv *Inventory) UID(namespace, name string) (types.UID, bool) {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	r, ok := inv.byKey[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return "", false
	}
	return r.uid, true
}
