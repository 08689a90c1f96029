package tenantcache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certinformers "k8s.io/client-go/informers/certificates/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Tenant is the connection of one TenantCluster: its credential, its
// clients and its shared informers, all stopped together.
type Tenant struct {
	key        types.NamespacedName
	tc         *kubefarmv1.TenantCluster
	cfg        *rest.Config
	credential string
	clientset  kubernetes.Interface

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	informers map[string]cache.SharedIndexInformer
	clients   map[string]kubernetes.Interface
	// health is the last probe's failure; nil before the first probe and
	// while the API server answers.
	health error
	// suspect is signalled when a watch fails: the probe runs again.
	suspect chan struct{}
	// stopping: cancelled; no informer starts any more.
	stopping bool
	// queues are the Watches' queues in this tenant; stopWorkers shut
	// them down.
	queues      map[*Workers]workqueue.TypedRateLimitingInterface[string]
	stopWorkers []func()
}

// start connects to tc with cfg: the probe and every Watch's worker run in
// the background, and nothing waits for the tenant to answer, so that one
// unreachable tenant does not slow the others. Called under c.mu.
func (c *Cache) start(tc *kubefarmv1.TenantCluster, cfg *rest.Config, fp string) (*Tenant, error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the client of TenantCluster %s: %w", key, err)
	}
	logger := log.Log.WithName("tenantcache").WithValues("tenantCluster", key.String())
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	t := &Tenant{key: key, tc: tc.DeepCopy(), cfg: cfg, credential: fp, clientset: cs, ctx: ctx, cancel: cancel,
		suspect:   make(chan struct{}, 1),
		informers: map[string]cache.SharedIndexInformer{}, clients: map[string]kubernetes.Interface{cfg.UserAgent: cs}}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.probe(c.opts.HealthInterval, c.opts.HealthTimeout) }()
	for _, w := range c.watches {
		if err := w.start(t); err != nil {
			t.stop()
			return nil, fmt.Errorf("starting %s in TenantCluster %s: %w", w.watch.Name, key, err)
		}
	}
	return t, nil
}

// stop cancels everything of the tenant and returns once every goroutine
// that acts (the workers, the probe) has, so that nothing acts with the old
// credential after it; the informers stop on their own.
func (t *Tenant) stop() {
	t.mu.Lock()
	t.stopping = true
	stops := t.stopWorkers
	t.mu.Unlock()
	t.cancel()
	for _, s := range stops {
		s()
	}
	t.wg.Wait()
}

// Key names the TenantCluster.
func (t *Tenant) Key() types.NamespacedName { return t.key }

// Object is the TenantCluster as it was when the connection started; only
// its identity (name, namespace, UID) is meant to be read, for lookups and
// Events.
func (t *Tenant) Object() *kubefarmv1.TenantCluster { return t.tc }

// Client is a client of the tenant's API server that names itself
// userAgent in the tenant's audit log. It shares the connection's
// transport (client-go keys TLS transports by credential, not user agent).
func (t *Tenant) Client(userAgent string) (kubernetes.Interface, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cs, ok := t.clients[userAgent]; ok {
		return cs, nil
	}
	cfg := rest.CopyConfig(t.cfg)
	cfg.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the client of TenantCluster %s: %w", t.key, err)
	}
	t.clients[userAgent] = cs
	return cs, nil
}

// Healthy is nil unless the tenant's API server did not answer the last
// probe; then an error naming the TenantCluster and the server.
func (t *Tenant) Healthy() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.health != nil {
		return fmt.Errorf("TenantCluster %s: its API server %s did not answer the last health check: %w", t.key, t.cfg.Host, t.health)
	}
	return nil
}

// probe asks the API server's /readyz when the connection starts, every
// interval while it answers, at once when a list of one of its informers
// fails (suspect), and with a backoff from firstBackoff to interval while
// it does not answer, until the tenant stops. The informers alone cannot
// tell: a reflector whose server refuses connections retries its watch
// with a backoff of its own and reports nothing.
func (t *Tenant) probe(interval, timeout time.Duration) {
	logger := log.FromContext(t.ctx)
	backoff := firstBackoff
	for {
		ctx, cancel := context.WithTimeout(t.ctx, timeout)
		err := t.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		cancel()
		if t.ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		was := t.health
		t.health = err
		t.mu.Unlock()
		var wait <-chan time.Time
		var suspect <-chan struct{}
		switch {
		case err != nil:
			if was == nil {
				logger.Info("the tenant's API server does not answer; retrying with backoff", "server", t.cfg.Host, "error", err.Error())
			}
			wait, backoff = time.After(backoff), min(2*backoff, interval)
		default:
			if was != nil {
				logger.Info("the tenant's API server answers again", "server", t.cfg.Host)
			}
			backoff = firstBackoff
			suspect = t.suspect
			wait = time.After(interval)
		}
		select {
		case <-t.ctx.Done():
			return
		case <-wait:
		case <-suspect:
		}
	}
}

// Source is a kind of the tenant the cache keeps a shared informer of.
type Source struct {
	name string
	new  func(kubernetes.Interface) cache.SharedIndexInformer
}

// Nodes is the tenant's Nodes, without their image lists (most of a Node's
// status, which no controller reads) and without managed fields but
// kubefarm's own (machinenode reads the labels it owns).
var Nodes = Source{name: "Nodes", new: func(cs kubernetes.Interface) cache.SharedIndexInformer {
	i := coreinformers.NewNodeInformer(cs, 0, cache.Indexers{})
	_ = i.SetTransform(func(o any) (any, error) {
		if n, ok := o.(*corev1.Node); ok {
			n.ManagedFields = slices.DeleteFunc(n.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool {
				return !strings.HasPrefix(mf.Manager, "kubefarm-")
			})
			n.Status.Images = nil
		}
		return o, nil
	})
	return i
}}

// CSRs is the tenant's CertificateSigningRequests of signer, without their
// managed fields (most of a CSR after its request). The tenant's API
// server filters by signer (a field selector cannot say "either", hence
// one informer per signer), so the manager neither receives nor keeps
// other signers' requests.
func CSRs(signer string) Source {
	selector := "spec.signerName=" + signer
	return Source{name: "CertificateSigningRequests of " + signer, new: func(cs kubernetes.Interface) cache.SharedIndexInformer {
		i := certinformers.NewFilteredCertificateSigningRequestInformer(cs, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = selector })
		_ = i.SetTransform(func(o any) (any, error) {
			if csr, ok := o.(*certificatesv1.CertificateSigningRequest); ok {
				csr.ManagedFields = nil
			}
			return o, nil
		})
		return i
	}}
}

// informer is the tenant's shared informer of src, made and started on
// first use.
func (t *Tenant) informer(src Source) (cache.SharedIndexInformer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.informers[src.name]; ok {
		return i, nil
	}
	if t.stopping {
		return nil, fmt.Errorf("TenantCluster %s: %w", t.key, errClosed)
	}
	i := src.new(t.clientset)
	logger := log.FromContext(t.ctx)
	// The reflector retries with a backoff by itself; without this the
	// only trace of an unreachable tenant would be silence.
	if err := i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		logger.Info("watching the tenant's "+src.name+" failed; retrying", "error", err.Error())
		select {
		case t.suspect <- struct{}{}:
		default:
		}
	}); err != nil {
		return nil, err
	}
	t.informers[src.name] = i
	// Not waited for by stop: an informer only reads, its handlers only
	// add to queues stop has shut down, and a reflector backing off from a
	// server that refuses connections may take its backoff (up to half a
	// minute) to notice the cancellation.
	go i.RunWithContext(t.ctx)
	return i, nil
}

// Store is the store of the tenant's shared informer of src (started if it
// was not); it may not have synced yet.
func (t *Tenant) Store(src Source) (cache.Store, error) {
	i, err := t.informer(src)
	if err != nil {
		return nil, err
	}
	return i.GetStore(), nil
}

// NodeList is the tenant's Nodes from the shared informer, waiting for its
// first list at most until ctx is done or timeout.
func (t *Tenant) NodeList(ctx context.Context, timeout time.Duration) ([]*corev1.Node, error) {
	i, err := t.informer(Nodes)
	if err != nil {
		return nil, err
	}
	if !i.HasSynced() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			if err := t.Healthy(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("TenantCluster %s: its Nodes were not listed within %s", t.key, timeout)
		}
	}
	objs := i.GetStore().List()
	nodes := make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		nodes = append(nodes, o.(*corev1.Node))
	}
	return nodes, nil
}
