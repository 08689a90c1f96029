package tenantcache

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// Clients keeps one client (of any kind) per TenantCluster, made by dial
// from a REST config, and makes a new one when the config's identity
// changes (restconfig.Fingerprint): a renewed certificate, a recreated PKI,
// a new address. A failed dial is not kept. It is for callers that reach a
// tenant with another identity than the cache's connections (the
// TenantCluster controller's super-admin). Safe for concurrent use.
type Clients[T any] struct {
	cache *restconfig.Cache[types.NamespacedName, T]
}

// NewClients is an empty store whose clients dial makes.
func NewClients[T any](dial func(*rest.Config) (T, error)) *Clients[T] {
	return &Clients[T]{cache: restconfig.NewCache[types.NamespacedName, T](dial)}
}

// Get returns the client kept for tenant when cfg carries the same address
// and credential, else a new one, which replaces it.
func (c *Clients[T]) Get(tenant types.NamespacedName, cfg *rest.Config) (T, error) {
	return c.cache.Get(tenant, cfg)
}

// Forget drops the client of tenant.
func (c *Clients[T]) Forget(tenant types.NamespacedName) { c.cache.Forget(tenant) }

// Len is how many clients are kept.
func (c *Clients[T]) Len() int { return c.cache.Len() }
