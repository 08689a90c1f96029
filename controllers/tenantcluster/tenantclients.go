package tenantcluster

import (
	"crypto/sha256"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// DialTenant makes a client of a tenant API server from its REST config.
type DialTenant func(*rest.Config) (client.Client, error)

// dialTenant is the DialTenant of the manager: a plain client of the
// tenant's API server.
func dialTenant(cfg *rest.Config) (client.Client, error) {
	return client.New(cfg, client.Options{})
}

// TenantClients keeps one client per TenantCluster from one pass to the
// next, as Cluster API's cluster cache keeps one per Cluster: a pass every
// AddonsResync per tenant would otherwise build a client (and its REST
// mapper, whose discovery it fills again) every time. A client is
// rebuilt when the credential it was made from changes (the super-admin
// certificate renewed, or a TenantCluster recreated under the same name on
// new PKI), and forgotten when its TenantCluster is deleted. A failed dial
// is not kept: the next pass dials again.
//
// The methods are safe for concurrent use. A nil *TenantClients keeps
// nothing and dials every time.
type TenantClients struct {
	dial DialTenant

	mu        sync.Mutex
	byCluster map[types.NamespacedName]tenantClient
}

type tenantClient struct {
	credential [sha256.Size]byte
	client     client.Client
}

// NewTenantClients returns an empty cache that makes clients with dial;
// nil dials the tenant's API server (tests pass a dialer that reaches
// their stand-in).
func NewTenantClients(dial DialTenant) *TenantClients {
	if dial == nil {
		dial = dialTenant
	}
	return &TenantClients{dial: dial, byCluster: map[types.NamespacedName]tenantClient{}}
}

// Get returns the client of the TenantCluster cluster for cfg: the one
// kept for it when cfg carries the same address and credential, else a
// new one, which replaces it.
func (t *TenantClients) Get(cluster types.NamespacedName, cfg *rest.Config) (client.Client, error) {
	if t == nil {
		return dialTenant(cfg)
	}
	credential := restconfig.Fingerprint(cfg)
	t.mu.Lock()
	kept, ok := t.byCluster[cluster]
	t.mu.Unlock()
	if ok && kept.credential == credential {
		return kept.client, nil
	}
	c, err := t.dial(cfg)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.byCluster[cluster] = tenantClient{credential: credential, client: c}
	t.mu.Unlock()
	return c, nil
}

// Forget drops the client of a TenantCluster.
func (t *TenantClients) Forget(cluster types.NamespacedName) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.byCluster, cluster)
	t.mu.Unlock()
}

// Len is how many clients are kept.
func (t *TenantClients) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byCluster)
}
