package tenantcluster

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// NewTenantCache is the manager's tenant cache (internal/tenantcache),
// connecting to each tenant with the internal admin kubeconfig this
// controller writes (InternalAdminKubeconfigSecretName): it exists once the
// tenant's PKI does, points at the API server's in-cluster address, and
// changes when the PKI does, which is exactly when a connection must
// start, reach the tenant, and restart. reader is the manager's cache.
func NewTenantCache(reader client.Reader) (*tenantcache.Cache, error) {
	return tenantcache.New(reader, tenantcache.Options{
		KubeconfigSecret: InternalAdminKubeconfigSecretName,
		KubeconfigKey:    AdminKubeconfigKey,
	})
}

// DialTenant makes a client of a tenant API server from its REST config.
type DialTenant func(*rest.Config) (client.Client, error)

// dialTenant is the DialTenant of the manager: a plain client of the
// tenant's API server.
func dialTenant(cfg *rest.Config) (client.Client, error) {
	return client.New(cfg, client.Options{})
}

// TenantClients keeps one client per TenantCluster from one pass to the
// next (a tenantcache.Clients): a pass every AddonsResync per tenant would
// otherwise build a client (and its REST mapper, whose discovery it fills
// again) every time. It is not the tenant cache's connection because the
// add-ons are written as the super-admin (tenantRESTConfig), the only
// identity with permissions before kubefarm's bindings exist in the tenant,
// and the cache connects with the internal admin kubeconfig those bindings
// empower. A client is rebuilt when the credential it was made from
// changes (the super-admin certificate renewed, or a TenantCluster
// recreated under the same name on new PKI), and forgotten when its
// TenantCluster is deleted. A failed dial is not kept: the next pass dials
// again.
//
// The methods are safe for concurrent use. A nil *TenantClients keeps
// nothing and dials every time.
type TenantClients struct {
	clients *tenantcache.Clients[client.Client]
}

// NewTenantClients returns an empty cache that makes clients with dial;
// nil dials the tenant's API server (tests pass a dialer that reaches
// their stand-in).
func NewTenantClients(dial DialTenant) *TenantClients {
	if dial == nil {
		dial = dialTenant
	}
	return &TenantClients{clients: tenantcache.NewClients[client.Client](dial)}
}

// Get returns the client of the TenantCluster cluster for cfg: the one
// kept for it when cfg carries the same address and credential, else a
// new one, which replaces it.
func (t *TenantClients) Get(cluster types.NamespacedName, cfg *rest.Config) (client.Client, error) {
	if t == nil {
		return dialTenant(cfg)
	}
	return t.clients.Get(cluster, cfg)
}

// Forget drops the client of a TenantCluster.
func (t *TenantClients) Forget(cluster types.NamespacedName) {
	if t != nil {
		t.clients.Forget(cluster)
	}
}

// Len is how many clients are kept.
func (t *TenantClients) Len() int {
	if t == nil {
		return 0
	}
	return t.clients.Len()
}
