package dynamic

// Lookups of current leases for the HTTP side: which pool's range holds a
// MAC (the boot script of a machine no Machine claims), and which MAC holds
// an address (the discovery report's source). Both read the cache's
// indexes only, never the API server: they answer requests any host on the
// boot network can send. The replica's own writes the cache has not shown
// yet count too (written.go): a machine asks right after its ACK.

import (
	"context"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Held is a current lease of a pool's dynamic range.
type Held struct {
	// Namespace and Pool name the NodePool whose range the address is of.
	Namespace, Pool string
	// MAC (lower-case colon form) and IP (dotted quad) of the lease.
	MAC, IP string
}

// PoolKey is the pool's namespace/name.
func (h Held) PoolKey() string { return h.Namespace + "/" + h.Pool }

// LeaseOfMAC is the current lease of mac (lower-case colon form) in any
// pool: unexpired, not declined, in its pool's range; the one that expires
// last when the MAC holds several (one per boot network).
func (a *Allocator) LeaseOfMAC(ctx context.Context, mac string) (Held, bool) {
	return a.current(ctx, MACIndex, mac)
}

// LeaseOfIP is the current lease of ip (dotted quad), as LeaseOfMAC.
func (a *Allocator) LeaseOfIP(ctx context.Context, ip string) (Held, bool) {
	return a.current(ctx, IPIndex, ip)
}

func (a *Allocator) current(ctx context.Context, index, value string) (Held, bool) {
	var list kubefarmv1.DHCPLeaseList
	if err := a.cache.List(ctx, &list, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return Held{}, false
	}
	cached := make([]*kubefarmv1.DHCPLease, len(list.Items))
	for i := range list.Items {
		cached[i] = &list.Items[i]
	}
	match := func(l *kubefarmv1.DHCPLease) bool { return l.Spec.IP == value }
	if index == MACIndex {
		match = func(l *kubefarmv1.DHCPLease) bool { return l.Spec.MAC == value }
	}
	inCache := func(key types.NamespacedName) (string, bool) {
		var l kubefarmv1.DHCPLease
		if a.cache.Get(ctx, key, &l, client.UnsafeDisableDeepCopy) != nil {
			return "", false
		}
		return l.ResourceVersion, true
	}
	now := a.now()
	var best *kubefarmv1.DHCPLease
	for _, l := range a.written.overlay(cached, match, inCache) {
		if l.Spec.Declined || !l.Spec.ExpireTime.After(now) || !a.inRange(ctx, l) {
			continue
		}
		if best == nil || l.Spec.ExpireTime.After(best.Spec.ExpireTime.Time) {
			best = l
		}
	}
	if best == nil {
		return Held{}, false
	}
	return Held{Namespace: best.Namespace, Pool: best.Spec.Pool, MAC: best.Spec.MAC, IP: best.Spec.IP}, true
}

// inRange: l's pool exists, is not being deleted, and its range (as it is
// now) holds l's address, which is no static machine's.
func (a *Allocator) inRange(ctx context.Context, l *kubefarmv1.DHCPLease) bool {
	ip := net.ParseIP(l.Spec.IP)
	if ip == nil || a.isStatic(ip) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var np kubefarmv1.NodePool
	if err := a.cache.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, &np); err != nil || np.DeletionTimestamp != nil {
		return false
	}
	rng, err := ParseRange(&np)
	return err == nil && rng.Contains(ip)
}
