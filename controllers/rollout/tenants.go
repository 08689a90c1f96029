package rollout

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// Tenants gives the rollout a tenant cluster's Nodes, as a watch last saw
// them, and a client of its API server to cordon, evict and uncordon with.
type Tenants interface {
	Nodes(ctx context.Context, tenant types.NamespacedName) (kubernetes.Interface, []*corev1.Node, error)
}

// CachedTenants reaches each tenant through the manager's tenant cache: the
// Nodes come from the tenant's shared Node informer (which machinenode
// watches too), so a pass costs the tenant no request, and the client is
// the cache's connection under the rollout's own user agent.
type CachedTenants struct {
	Cache *tenantcache.Cache
}

// UserAgent names the rollout in the tenants' audit logs.
const UserAgent = "kubefarm-rollout"

// nodesSyncTimeout bounds the wait for a tenant's first Node list, the
// first time a pass needs it: the pass fails (and retries) rather than
// hold a worker on a tenant that does not answer.
const nodesSyncTimeout = 10 * time.Second

// Nodes implements Tenants. Its errors name the TenantCluster.
func (t CachedTenants) Nodes(ctx context.Context, tenant types.NamespacedName) (kubernetes.Interface, []*corev1.Node, error) {
	tc, err := t.Cache.Get(ctx, tenant)
	if err != nil {
		return nil, nil, err
	}
	cs, err := tc.Client(UserAgent)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := tc.NodeList(ctx, nodesSyncTimeout)
	if err != nil {
		return nil, nil, err
	}
	return cs, nodes, nil
}
