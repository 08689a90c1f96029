package leases

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Syncer keeps a Table in step with a controller-runtime cache.
//
// Every event is reduced to "recompute machine X" and the recompute reads the
// latest Machine and NodePool from the cache under one lock. Informer handlers
// for Machines and NodePools run on different goroutines; deriving from the
// objects carried by the events instead could let an older pool event write
// over a newer machine event.
type Syncer struct {
	cache cache.Cache
	table *Table
	log   logr.Logger

	mu     sync.Mutex
	errors atomic.Uint64
	// networks holds each pool's parsed spec.network for the
	// resourceVersion it was parsed from (under mu), so the leases of a
	// pool's machines share one Network (mask, router, DNS) instead of
	// parsing and holding a copy each.
	networks map[types.NamespacedName]parsedNetwork

	// registrations of the handlers: each knows when the informer's
	// initial list has been delivered to it.
	registrations []toolscache.ResourceEventHandlerRegistration
}

// NewSyncer registers the event handlers on c. Call it before c.Start, so
// that the initial lists go through them before the replica is ready. ctx
// bounds only this registration; the handlers outlive it.
func NewSyncer(ctx context.Context, c cache.Cache, t *Table, log logr.Logger) (*Syncer, error) {
	s := &Syncer{cache: c, table: t, log: log, networks: map[types.NamespacedName]parsedNetwork{}}
	// Handlers read the in-memory cache only; they run for as long as the
	// cache does, so they must not inherit a setup context.
	hctx := context.Background()
	mi, err := c.GetInformer(ctx, &kubefarmv1.Machine{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("machine informer: %w", err)
	}
	onMachine := func(obj any) {
		if key, ok := objectKey(obj); ok {
			s.resync(hctx, key)
		}
	}
	mreg, err := mi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onMachine,
		UpdateFunc: func(_, obj any) { onMachine(obj) },
		DeleteFunc: onMachine,
	})
	if err != nil {
		return nil, err
	}

	pi, err := c.GetInformer(ctx, &kubefarmv1.NodePool{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("nodepool informer: %w", err)
	}
	onPool := func(obj any) {
		if key, ok := objectKey(obj); ok {
			s.resyncPool(hctx, key)
		}
	}
	preg, err := pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onPool,
		UpdateFunc: func(_, obj any) { onPool(obj) },
		DeleteFunc: onPool,
	})
	if err != nil {
		return nil, err
	}
	s.registrations = []toolscache.ResourceEventHandlerRegistration{mreg, preg}
	return s, nil
}

// HasSynced says whether every Machine and NodePool of the informers'
// initial lists has gone through the handlers, i.e. the lease table holds
// every machine known at start. A synced cache alone does not mean that:
// handlers run after the cache has the objects, and a replica that reported
// ready in between would ignore known machines as unknown.
func (s *Syncer) HasSynced() bool {
	for _, r := range s.registrations {
		if !r.HasSynced() {
			return false
		}
	}
	return len(s.registrations) > 0
}

// Errors counts objects whose leases could not be derived.
func (s *Syncer) Errors() uint64 { return s.errors.Load() }

// objectKey accepts live objects and the tombstones of deletes the informer
// missed while disconnected.
func objectKey(obj any) (types.NamespacedName, bool) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return types.NamespacedName{}, false
	}
	return client.ObjectKeyFromObject(o), true
}

func (s *Syncer) resyncPool(ctx context.Context, pool types.NamespacedName) {
	// A pool gone from the cache takes its parsed network along, whether or
	// not Machines of it are left to resync.
	if err := s.cache.Get(ctx, pool, &kubefarmv1.NodePool{}); apierrors.IsNotFound(err) {
		s.mu.Lock()
		delete(s.networks, pool)
		s.mu.Unlock()
	}
	var machines kubefarmv1.MachineList
	// Only the keys and spec.pool are read: no deep copy of the
	// namespace's machines. The namespace's machines are scanned instead
	// of read from a field index by pool: pool events are rare, and such
	// an index keeps every Machine's key twice (per namespace and for all),
	// about 1 MB with 20,000 Machines.
	if err := s.cache.List(ctx, &machines, client.InNamespace(pool.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		s.errors.Add(1)
		s.log.Error(err, "listing the machines of a pool", "pool", pool)
		return
	}
	for i := range machines.Items {
		if m := &machines.Items[i]; m.Spec.Pool == pool.Name {
			s.resync(ctx, client.ObjectKeyFromObject(m))
		}
	}
}

// resync recomputes one machine's leases from the cache's current objects.
func (s *Syncer) resync(ctx context.Context, key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mkey := MachineKey(key.Namespace, key.Name)

	var m kubefarmv1.Machine
	if err := s.cache.Get(ctx, key, &m); err != nil {
		if apierrors.IsNotFound(err) {
			s.table.Delete(mkey)
			return
		}
		s.errors.Add(1)
		s.log.Error(err, "reading machine from cache", "machine", key)
		return
	}
	var p kubefarmv1.NodePool
	poolKey := types.NamespacedName{Namespace: key.Namespace, Name: m.Spec.Pool}
	if err := s.cache.Get(ctx, poolKey, &p); err != nil {
		if apierrors.IsNotFound(err) {
			// Without its pool there is no network to describe. The pool's
			// add event resyncs the machine if the pool appears later.
			s.table.Delete(mkey)
			return
		}
		s.errors.Add(1)
		s.log.Error(err, "reading pool from cache", "machine", key, "pool", m.Spec.Pool)
		return
	}
	pn, ok := s.networks[poolKey]
	if !ok || pn.resourceVersion != p.ResourceVersion {
		pn.resourceVersion = p.ResourceVersion
		pn.network, pn.err = NetworkOf(&p)
		s.networks[poolKey] = pn
	}
	err := pn.err
	var leases []Lease
	if err == nil {
		leases, err = FromObjectsOn(&m, &p, pn.network)
	}
	if err != nil {
		// Keep serving the last good leases: a machine that boots with a
		// known-good configuration beats one that cannot boot at all, and
		// the error is visible in logs and the error count.
		s.errors.Add(1)
		s.log.Error(err, "deriving leases; keeping the previous ones", "machine", key)
		return
	}
	s.table.Upsert(mkey, leases)
}

// parsedNetwork is NetworkOf of one version of a pool.
type parsedNetwork struct {
	resourceVersion string
	network         Network
	err             error
}
