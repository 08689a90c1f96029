package dynamic

import (
	"context"
	"fmt"
	"net"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// pool is what the allocator needs of a catch-all NodePool, copied out of
// the cache.
type pool struct {
	namespace, name string
	uid             types.UID
	rng             Range
	netw            leases.Network
	prefix          int
}

func (p *pool) key() string { return p.namespace + "/" + p.name }

func (p *pool) ownerRef() []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: kubefarmv1.GroupVersion.String(), Kind: "NodePool", Name: p.name, UID: p.uid,
	}}
}

// catchAllPools lists the pools with a usable dynamic range. Pools whose
// range or network does not parse (the API rejects them; objects written
// before a rule existed could still hold one) and pools being deleted are
// left out.
func (a *Allocator) catchAllPools(ctx context.Context) ([]*pool, error) {
	var list kubefarmv1.NodePoolList
	// Only read, never modified or kept: no deep copy.
	if err := a.cache.List(ctx, &list, client.MatchingFields{RangeIndex: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing NodePools with a dynamic range: %w", err)
	}
	out := make([]*pool, 0, len(list.Items))
	for i := range list.Items {
		np := &list.Items[i]
		if np.DeletionTimestamp != nil {
			continue
		}
		rng, err := ParseRange(np)
		if err != nil {
			continue
		}
		netw, err := leases.NetworkOf(np)
		if err != nil {
			continue
		}
		ones, _ := netw.Subnet.Mask.Size()
		out = append(out, &pool{namespace: np.Namespace, name: np.Name, uid: np.UID, rng: rng, netw: netw, prefix: ones})
	}
	return out, nil
}

// selectPool picks the pool that serves a packet: the one whose subnet
// contains the relay address (giaddr) when the packet was relayed, else the
// server's own address. When several subnets contain it, the most specific
// (longest prefix) wins, then namespace/name order, so every replica picks
// the same pool.
func selectPool(pools []*pool, relay, local net.IP) (*pool, error) {
	addr := local
	if r := relay.To4(); r != nil && !r.IsUnspecified() {
		addr = r
	}
	if addr.To4() == nil {
		return nil, fmt.Errorf("%w: no IPv4 address to match (relay %v, local %v)", ErrNoPool, relay, local)
	}
	var match []*pool
	for _, p := range pools {
		if p.netw.Subnet.Contains(addr) {
			match = append(match, p)
		}
	}
	if len(match) == 0 {
		return nil, fmt.Errorf("%w for %s", ErrNoPool, addr)
	}
	sort.Slice(match, func(i, j int) bool {
		if match[i].prefix != match[j].prefix {
			return match[i].prefix > match[j].prefix
		}
		return match[i].key() < match[j].key()
	})
	return match[0], nil
}
