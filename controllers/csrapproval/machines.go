package csrapproval

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// MachineNodeIndex is the Machine index the workers look nodes up by
// (tenantcache.MachineNodeIndex): every CSR is decided without a list scan.
const MachineNodeIndex = tenantcache.MachineNodeIndex

// IndexMachines registers MachineNodeIndex on the manager's cache.
func IndexMachines(ctx context.Context, indexer client.FieldIndexer) error {
	return tenantcache.IndexMachines(ctx, indexer)
}

// machineFinder finds the Machine that is a node of a tenant, in the admin
// cluster's cache.
type machineFinder struct {
	reader client.Reader
}

// find returns the Machine that is node of tenant and the identity it may
// have certified. ok is false when no Machine is that node, and also when
// more than one is: two Machines sharing a hostname in one tenant is a
// misconfiguration, and either could be the requester, so neither's
// addresses may be certified. err is a failure to read the cache, which is
// no answer: the caller retries rather than deny.
func (ms machineFinder) find(ctx context.Context, tenant types.NamespacedName, node string) (m *kubefarmv1.Machine, id Identity, ok bool, err error) {
	machines, err := tenantcache.MachinesOfNode(ctx, ms.reader, tenant, node)
	if err != nil {
		return nil, Identity{}, false, err
	}
	if len(machines) != 1 {
		return nil, Identity{}, false, nil
	}
	m = &machines[0]
	pool, err := ms.poolOf(ctx, m)
	if err != nil {
		return nil, Identity{}, false, err
	}
	return m, IdentityOf(m, pool), true, nil
}

// poolOf is m's NodePool, nil when it is gone (its Machines are being
// garbage collected): m then keeps its bare hostname and IP, which do not
// depend on the pool.
func (ms machineFinder) poolOf(ctx context.Context, m *kubefarmv1.Machine) (*kubefarmv1.NodePool, error) {
	pool := &kubefarmv1.NodePool{}
	switch err := ms.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Pool}, pool); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading NodePool %s of Machine %s: %w", m.Spec.Pool, m.Name, err)
	}
	return pool, nil
}
