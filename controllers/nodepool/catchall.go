package nodepool

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
)

// LeasePoolIndex indexes DHCPLeases by namespace/spec.pool, so that a pass
// reads its own pool's leases, not the namespace's.
const LeasePoolIndex = "kubefarm.io/dhcplease-pool"

func indexLeases(indexer client.FieldIndexer) error {
	if err := indexer.IndexField(context.Background(), &v1alpha1.DHCPLease{}, LeasePoolIndex, func(o client.Object) []string {
		l := o.(*v1alpha1.DHCPLease)
		return []string{holderKey(l.Namespace, l.Spec.Pool)}
	}); err != nil {
		return fmt.Errorf("indexing DHCPLeases by pool: %w", err)
	}
	return nil
}

// poolOfLease maps a lease to its pool: an acknowledged lease of a Join
// pool becomes a Machine within one pass.
func poolOfLease(_ context.Context, o client.Object) []reconcile.Request {
	l := o.(*v1alpha1.DHCPLease)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}}}
}

// buildCatchAll adds the pool's catch-all Machines to the desired ones:
// those that exist (kept whatever the leases do now) and, for a Join pool,
// one per lease desired.LeaseJoins accepts whose MAC and address no other
// Machine has claimed (docs/addresses.md). Without that check a MAC a
// Machine of another pool holds would show as an address conflict of this
// pool; it is simply not an unknown machine.
func (r *Reconciler) buildCatchAll(ctx context.Context, s *scope) (bool, error) {
	pool := s.pool
	existing := &v1alpha1.MachineList{}
	if err := r.Client.List(ctx, existing, client.InNamespace(pool.Namespace),
		client.MatchingLabels{v1alpha1.LabelPool: pool.Name}, client.HasLabels{v1alpha1.LabelCatchAll}); err != nil {
		return false, fmt.Errorf("listing the catch-all Machines of NodePool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	var members []desired.CatchAllMember
	for i := range existing.Items {
		m := &existing.Items[i]
		if !metav1.IsControlledBy(m, pool) || !m.DeletionTimestamp.IsZero() || len(m.Spec.MACs) != 1 {
			continue
		}
		members = append(members, desired.CatchAllMember{MAC: m.Spec.MACs[0], IP: m.Spec.IP, Existing: true})
	}
	if rng := pool.Spec.Network.DynamicRange; rng != nil && rng.UnknownMachines == v1alpha1.UnknownJoin {
		leases := &v1alpha1.DHCPLeaseList{}
		if err := r.Client.List(ctx, leases, client.InNamespace(pool.Namespace),
			client.MatchingFields{LeasePoolIndex: holderKey(pool.Namespace, pool.Name)}); err != nil {
			return false, fmt.Errorf("listing the DHCPLeases of NodePool %s/%s: %w", pool.Namespace, pool.Name, err)
		}
		now := r.Now()
		for i := range leases.Items {
			l := &leases.Items[i]
			if !desired.LeaseJoins(pool, l, now) {
				continue
			}
			free, err := r.unclaimed(ctx, pool, l)
			if err != nil {
				return false, err
			}
			if free {
				members = append(members, desired.CatchAllMember{MAC: l.Spec.MAC, IP: l.Spec.IP})
			}
		}
	}
	machines, retired := desired.CatchAll(pool, s.desired, members)
	s.desired = append(s.desired, machines...)
	s.retired = make(map[string]bool, len(retired))
	for _, n := range retired {
		s.retired[n] = true
	}
	return false, nil
}

// unclaimed tells whether the lease's MAC and address are free for the
// catch-all Machine of its MAC: no claim, or a claim that Machine holds.
// Claims are read from the cache; a stale read costs at worst a claim
// conflict in this pass, which the next one clears.
func (r *Reconciler) unclaimed(ctx context.Context, pool *v1alpha1.NodePool, l *v1alpha1.DHCPLease) (bool, error) {
	holder := v1alpha1.AddressHolder{Namespace: pool.Namespace, Pool: pool.Name, Machine: desired.CatchAllName(pool.Name, l.Spec.MAC)}
	for _, c := range []struct {
		kind v1alpha1.AddressKind
		addr string
	}{{v1alpha1.AddressMAC, l.Spec.MAC}, {v1alpha1.AddressIPv4, l.Spec.IP}} {
		name := v1alpha1.AddressClaimName(c.kind, c.addr)
		held := &v1alpha1.AddressClaim{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Name: name}, held); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("reading AddressClaim %s: %w", name, err)
		case held.Spec.Holder != holder:
			return false, nil
		}
	}
	return true, nil
}
