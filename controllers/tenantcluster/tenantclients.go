package tenantcluster

import (
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
	cache *restconfig.Cache[types.NamespacedName, client.Client]
}

// NewTenantClients returns an empty cache that makes clients with dial;
// nil dials the tenant's API server (tests pass a dialer that reaches
// their stand-in).
func NewTenantClients(dial DialTenant) *TenantClients {
	if dial == nil {
		dial = dialTenant
	}
	return &TenantClients{cache: restconfig.NewCache[types.NamespacedName, client.Client](dial)}
}

// Get returns the client of the TenantCluster cluster for cfg: the one
// kept for it when cfg carries the same address and credential, else a
// new one, which replaces it.
func (t *TenantClients) Get(cluster types.NamespacedName, cfg *rest.Config) (client.Client, error) {
	if t == nil {
		return dialTenant(cfg)
	}
	return t.cache.Get(cluster, cfg)
}

// Forget drops the client of a TenantCluster.
func (t *TenantClients) Forget(cluster types.NamespacedName) {
	if t != nil {
		t.cache.Forget(cluster)
	}
}

// Len is how many clients are kept.
func (t *TenantClients) Len() int {
	if t == nil {
		return 0
	}
	return t.cache.Len()
}
