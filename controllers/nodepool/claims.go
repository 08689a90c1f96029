package nodepool

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
)

// Cache indexes of the address claims (docs/addresses.md).
const (
	// ClaimHolderIndex indexes AddressClaims by their holder's
	// namespace/pool, so that a pool finds the claims it holds, also once
	// the pool is gone.
	ClaimHolderIndex = "kubefarm.io/claim-holder-pool"
	// PoolClaimIndex indexes NodePools by the names of the claims their
	// entries need, so that a claim that goes away wakes the pools waiting
	// for its address.
	PoolClaimIndex = "kubefarm.io/nodepool-claim"
)

func holderKey(namespace, pool string) string { return namespace + "/" + pool }

// indexClaims registers ClaimHolderIndex and PoolClaimIndex.
func indexClaims(indexer client.FieldIndexer) error {
	if err := indexer.IndexField(context.Background(), &v1alpha1.AddressClaim{}, ClaimHolderIndex, func(o client.Object) []string {
		h := o.(*v1alpha1.AddressClaim).Spec.Holder
		return []string{holderKey(h.Namespace, h.Pool)}
	}); err != nil {
		return fmt.Errorf("indexing AddressClaims by holder: %w", err)
	}
	if err := indexer.IndexField(context.Background(), &v1alpha1.NodePool{}, PoolClaimIndex, func(o client.Object) []string {
		var names []string
		for _, m := range o.(*v1alpha1.NodePool).Spec.Machines {
			for _, mac := range m.MACs {
				// The builder lowercases MACs; the index must name the
				// claim the builder's Machine will need.
				names = append(names, v1alpha1.AddressClaimName(v1alpha1.AddressMAC, strings.ToLower(mac)))
			}
			names = append(names, v1alpha1.AddressClaimName(v1alpha1.AddressIPv4, m.IP))
		}
		return names
	}); err != nil {
		return fmt.Errorf("indexing NodePools by address claim: %w", err)
	}
	return nil
}

// poolsOfClaim maps a claim to its holder's pool (which releases it, also
// when the pool is gone: every claim is listed at start-up, so claims left
// by a pool deleted while the manager was down are released then) and to
// the pools whose entries need its address (a deleted claim may be theirs
// to take now).
func poolsOfClaim(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		claim := o.(*v1alpha1.AddressClaim)
		h := claim.Spec.Holder
		reqs := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: h.Namespace, Name: h.Pool}}}
		pools := &v1alpha1.NodePoolList{}
		if err := c.List(ctx, pools, client.MatchingFields{PoolClaimIndex: claim.Name}); err != nil {
			log.FromContext(ctx).Error(err, "listing the NodePools that need an address", "claim", claim.Name)
			return reqs
		}
		for _, p := range pools.Items {
			if p.Namespace != h.Namespace || p.Name != h.Pool {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
			}
		}
		return reqs
	}
}

// addressConflict is an address one of the pool's entries needs and another
// holder has.
type addressConflict struct {
	machine string
	claim   *v1alpha1.AddressClaim
	holder  v1alpha1.AddressHolder
}

func (c addressConflict) String() string {
	return fmt.Sprintf("%s %s of %s is held by %s", c.claim.Spec.Kind, c.claim.Spec.Address, c.machine, c.holder)
}

// claimAddresses makes sure every address of want is claimed for it, and
// returns the addresses another holder has. A claim this pool's entry holds
// is read from the cache, so a pass that changes nothing writes nothing; a
// missing one is created, and the create is what decides between two pools
// that want one address: the API server admits one create and answers
// AlreadyExists to the other, which then reads the winner from the API
// server itself (the cache may not have the claim yet). A claim the cache
// shows held by another is a conflict until that claim's deletion wakes the
// pool (poolsOfClaim).
func (r *Reconciler) claimAddresses(ctx context.Context, want *v1alpha1.Machine) ([]addressConflict, error) {
	var conflicts []addressConflict
	for _, c := range desired.Claims(want) {
		held := &v1alpha1.AddressClaim{}
		err := r.Client.Get(ctx, client.ObjectKey{Name: c.Name}, held)
		if apierrors.IsNotFound(err) {
			err = r.Client.Create(ctx, c)
			if err == nil {
				continue
			}
			if !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating AddressClaim %s for Machine %s/%s: %w", c.Name, want.Namespace, want.Name, err)
			}
			err = r.APIReader.Get(ctx, client.ObjectKey{Name: c.Name}, held)
		}
		if err != nil {
			return nil, fmt.Errorf("reading AddressClaim %s: %w", c.Name, err)
		}
		if held.Spec.Holder != c.Spec.Holder {
			conflicts = append(conflicts, addressConflict{machine: want.Name, claim: c, holder: held.Spec.Holder})
		}
	}
	return conflicts, nil
}

// releaseClaims deletes the claims the pool namespace/name holds that none
// of want needs (all of them when the pool is gone or going) and whose
// Machine no longer uses the address, read from the API server: a claim is
// never freed while a Machine that holds it still lists the address, so
// another pool cannot take an address that is still served. A claim still
// in use is kept; the Machine's deletion or update wakes the pool again
// (it owns the Machine). The delete carries the claim's UID: a claim is
// immutable, so the same UID is the same holder.
func (r *Reconciler) releaseClaims(ctx context.Context, namespace, name string, want []*v1alpha1.Machine) error {
	held := &v1alpha1.AddressClaimList{}
	if err := r.Client.List(ctx, held, client.MatchingFields{ClaimHolderIndex: holderKey(namespace, name)}); err != nil {
		return fmt.Errorf("listing the AddressClaims of NodePool %s/%s: %w", namespace, name, err)
	}
	cached, live := map[string]*v1alpha1.Machine{}, map[string]*v1alpha1.Machine{}
	for _, c := range desired.Unwanted(held.Items, want) {
		// The cache first: a Machine it still shows using the address
		// keeps the claim without a call (its deletion wakes the pool
		// again), which matters while a pool of 250 is being deleted and
		// every Machine's deletion brings a pass. Only a claim about to be
		// freed costs a read from the API server, which decides.
		m, err := holder(ctx, r.Client, cached, namespace, c)
		if err != nil {
			return err
		}
		if desired.Uses(m, c) {
			continue
		}
		if m, err = holder(ctx, r.APIReader, live, namespace, c); err != nil {
			return err
		}
		if desired.Uses(m, c) {
			continue
		}
		if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("releasing AddressClaim %s of %s: %w", c.Name, c.Spec.Holder, err)
		}
		log.FromContext(ctx).V(1).Info("released an address", "claim", c.Name, "holder", c.Spec.Holder.String())
	}
	return nil
}

// holder reads the Machine that holds c through reader, once per pass
// (seen), nil when it does not exist.
func holder(ctx context.Context, reader client.Reader, seen map[string]*v1alpha1.Machine,
	namespace string, c *v1alpha1.AddressClaim) (*v1alpha1.Machine, error) {
	name := c.Spec.Holder.Machine
	if m, ok := seen[name]; ok {
		return m, nil
	}
	m := &v1alpha1.Machine{}
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); {
	case apierrors.IsNotFound(err):
		m = nil
	case err != nil:
		return nil, fmt.Errorf("reading Machine %s/%s, the holder of AddressClaim %s: %w", namespace, name, c.Name, err)
	}
	seen[name] = m
	return m, nil
}
