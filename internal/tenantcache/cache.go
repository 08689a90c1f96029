package tenantcache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// Defaults of Options.
const (
	DefaultUserAgent      = "kubefarm-manager"
	DefaultHealthInterval = time.Minute
	DefaultHealthTimeout  = 10 * time.Second
	// firstBackoff is the first wait before probing a tenant that did not
	// answer again; it doubles up to HealthInterval.
	firstBackoff = 2 * time.Second
)

// Options configure a Cache.
type Options struct {
	// KubeconfigSecret names, in the TenantCluster's namespace, the Secret
	// holding the manager's credential of TenantCluster cluster (the
	// TenantCluster controller's internal admin kubeconfig). It must be
	// cluster + a fixed suffix: Secrets are mapped back to their tenant
	// by that suffix.
	KubeconfigSecret func(cluster string) string
	// KubeconfigKey is the key of the kubeconfig in that Secret.
	KubeconfigKey string
	// UserAgent names the shared informers and the health probe in the
	// tenants' audit logs; empty is DefaultUserAgent. Clients name
	// themselves (Tenant.Client).
	UserAgent string
	// HealthInterval is how often an answering tenant is probed, and the
	// longest wait between two probes of one that does not; zero is
	// DefaultHealthInterval.
	HealthInterval time.Duration
	// HealthTimeout bounds one probe; zero is DefaultHealthTimeout.
	HealthTimeout time.Duration
}

// Cache holds the connection of every tenant the manager reaches (see the
// package comment). Make it with New, register it with SetupWithManager
// (the consumers' SetupWithManager do, once), and register every Watch
// before the manager starts. The methods are safe for concurrent use.
type Cache struct {
	reader client.Reader
	opts   Options

	setupOnce sync.Once
	setupErr  error

	mu      sync.Mutex
	tenants map[types.NamespacedName]*Tenant
	watches []*Workers
	// started: a tenant connected, so no Watch can be added any more;
	// closed: the manager is stopping, no tenant starts any more.
	started, closed bool
}

// New is an empty cache reading TenantClusters and their credential
// Secrets with reader (the manager's cache).
func New(reader client.Reader, opts Options) (*Cache, error) {
	if opts.KubeconfigSecret == nil || opts.KubeconfigKey == "" {
		return nil, errors.New("tenant cache: the credential Secret's name and key are required")
	}
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	return &Cache{reader: reader, opts: opts, tenants: map[types.NamespacedName]*Tenant{}}, nil
}

var errClosed = errors.New("the manager is stopping")

// Get is the connection of tenant, started now if none runs (first use):
// an error naming the TenantCluster when it has no usable credential or
// its API server did not answer the last probe.
func (c *Cache) Get(ctx context.Context, tenant types.NamespacedName) (*Tenant, error) {
	c.mu.Lock()
	t := c.tenants[tenant]
	c.mu.Unlock()
	if t == nil {
		var err error
		if t, err = c.connect(ctx, tenant); err != nil {
			return nil, err
		}
		if t == nil {
			return nil, fmt.Errorf("TenantCluster %s is gone or being deleted", tenant)
		}
	}
	if err := t.Healthy(); err != nil {
		return nil, err
	}
	return t, nil
}

// connect makes the connection of tenant match its credential Secret now:
// nil when there is no live TenantCluster (after stopping any
// connection), an error when the credential is missing or unusable.
func (c *Cache) connect(ctx context.Context, key types.NamespacedName) (*Tenant, error) {
	tc, cfg, err := c.credential(ctx, key)
	if err != nil || tc == nil {
		c.stop(key)
		return nil, err
	}
	t, _, err := c.ensure(tc, cfg)
	return t, err
}

// ensure makes the connection of tc run with cfg: kept when it already
// does, else started, after the one with the previous credential stopped.
func (c *Cache) ensure(tc *kubefarmv1.TenantCluster, cfg *rest.Config) (_ *Tenant, started bool, _ error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	fp := restconfig.FingerprintString(cfg)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, errClosed
	}
	if t := c.tenants[key]; t != nil {
		if t.credential == fp {
			return t, false, nil
		}
		// Under the lock: a tenant's old and new connections never run
		// at the same time. Stop is quick: it cancels and waits for
		// goroutines whose every request is bound to that context.
		t.stop()
		delete(c.tenants, key)
	}
	t, err := c.start(tc, cfg, fp)
	if err != nil {
		return nil, false, err
	}
	c.started = true
	c.tenants[key] = t
	return t, true, nil
}

// stop stops the connection of tenant, if one runs; it reports whether one
// did. When it returns, nothing acts for the tenant any more.
func (c *Cache) stop(tenant types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tenants[tenant]
	if !ok {
		return false
	}
	t.stop()
	delete(c.tenants, tenant)
	return true
}

// Running names the tenants connected, each with the fingerprint of the
// credential it runs with (a SHA-256, hex), so that a test or a debug
// endpoint can tell a restart from a connection that kept running.
func (c *Cache) Running() map[types.NamespacedName]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[types.NamespacedName]string, len(c.tenants))
	for k, t := range c.tenants {
		out[k] = t.credential
	}
	return out
}

// Start is the manager Runnable: it waits for the manager to stop, then
// stops every connection.
func (c *Cache) Start(ctx context.Context) error {
	<-ctx.Done()
	c.mu.Lock()
	c.closed = true
	all := maps.Clone(c.tenants)
	clear(c.tenants)
	c.mu.Unlock()
	for _, t := range all {
		t.stop()
	}
	return nil
}

// NeedLeaderElection: only the leader acts in the tenants.
func (c *Cache) NeedLeaderElection() bool { return true }
