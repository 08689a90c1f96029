package tenantcache

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Watch is a controller that acts inside every connected tenant: the
// names of the objects of its Sources feed a queue per tenant, which one
// worker per tenant drains with Handle. One worker is enough (a tenant's
// nodes ask for a certificate about once a year each, join once per boot,
// and change labels or readiness rarely) and keeps a tenant's load on the
// manager, and the manager's on the tenant, at one request at a time.
type Watch struct {
	// Name names the controller in logs ("csrapproval").
	Name string
	// What names one key in the retry log line ("a CertificateSigningRequest").
	What string
	// Sources are the shared informers whose objects' names are queued
	// on every add, update and delete.
	Sources []Source
	// Synced, if set, runs once the Sources' first lists are complete,
	// before the worker: to queue keys the Sources cannot see (an absent
	// Node is only known absent then).
	Synced func(ctx context.Context, t *Tenant, enqueue func(key string)) error
	// Handle acts on one key; an error sends it back with the queue's
	// backoff, unless the tenant is stopping.
	Handle func(ctx context.Context, t *Tenant, key string) error
}

// Workers are the per-tenant queues and workers of one Watch.
type Workers struct {
	cache *Cache
	watch Watch
}

// AddWatch registers w; it runs in every tenant connected from now on.
// Register every Watch before the manager starts.
func (c *Cache) AddWatch(w Watch) (*Workers, error) {
	if w.Handle == nil || len(w.Sources) == 0 {
		return nil, fmt.Errorf("tenant cache: Watch %q needs Sources and Handle", w.Name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return nil, errors.New("tenant cache: a Watch added after a tenant connected would miss it")
	}
	ws := &Workers{cache: c, watch: w}
	c.watches = append(c.watches, ws)
	return ws, nil
}

// Running names the tenants whose worker runs, each with the fingerprint
// of the credential it runs with; a tenant is dropped only once its
// worker has returned.
func (ws *Workers) Running() map[types.NamespacedName]string { return ws.cache.Running() }

// Enqueue asks the worker of tenant to handle key; a no-op when the tenant
// is not connected (its connection's start goes over what it must).
func (ws *Workers) Enqueue(tenant types.NamespacedName, key string) {
	ws.cache.mu.Lock()
	t := ws.cache.tenants[tenant]
	ws.cache.mu.Unlock()
	if t == nil || key == "" {
		return
	}
	t.mu.Lock()
	q := t.queues[ws]
	t.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

// start runs ws's worker in tenant t.
func (ws *Workers) start(t *Tenant) error {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(o any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			queue.Add(key)
		}
	}
	handlers := cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { enqueue(o) }, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}
	synced := make([]cache.InformerSynced, 0, len(ws.watch.Sources))
	for _, src := range ws.watch.Sources {
		i, err := t.informer(src)
		if err != nil {
			queue.ShutDown()
			return err
		}
		reg, err := i.AddEventHandler(handlers)
		if err != nil {
			queue.ShutDown()
			return err
		}
		synced = append(synced, reg.HasSynced)
	}
	t.mu.Lock()
	if t.queues == nil {
		t.queues = map[*Workers]workqueue.TypedRateLimitingInterface[string]{}
	}
	t.queues[ws] = queue
	t.stopWorkers = append(t.stopWorkers, queue.ShutDown)
	t.mu.Unlock()

	ctx := log.IntoContext(t.ctx, log.FromContext(t.ctx).WithName(ws.watch.Name))
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			return
		}
		if ws.watch.Synced != nil {
			if err := ws.watch.Synced(ctx, t, func(key string) { queue.Add(key) }); err != nil {
				log.FromContext(ctx).Error(err, "after the tenant's first lists; keys are handled as they change")
			}
		}
		for ws.next(ctx, t, queue) {
		}
	}()
	return nil
}

// next handles the next key of queue; false once the queue is shut down.
func (ws *Workers) next(ctx context.Context, t *Tenant, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := ws.watch.Handle(ctx, t, key); err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "handling "+ws.watch.What+"; retrying", "name", key)
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}
