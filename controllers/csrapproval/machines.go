package csrapproval

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MachineNodeIndex indexes Machines by the node they are in a tenant:
// "<spec.cluster>/<spec.hostname>" (see machineNodeKey). The cache scopes a
// field index of a namespaced kind by namespace, so a lookup with
// InNamespace(the TenantCluster's namespace) finds a tenant's node in O(1),
// however many Machines the admin cluster holds: every CSR is decided
// without a list scan.
const MachineNodeIndex = "kubefarm.io/machine-node"

// machineNodeKey is the MachineNodeIndex value of node hostname of
// TenantCluster cluster. Neither name can hold a "/", so keys are unique.
func machineNodeKey(cluster, hostname string) string { return cluster + "/" + hostname }

// IndexMachines registers MachineNodeIndex on the manager's cache.
func IndexMachines(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &kubefarmv1.Machine{}, MachineNodeIndex, func(o client.Object) []string {
		m := o.(*kubefarmv1.Machine)
		return []string{machineNodeKey(m.Spec.Cluster, m.Spec.Hostname)}
	}); err != nil {
		return fmt.Errorf("indexing Machines by %s: %w", MachineNodeIndex, err)
	}
	return nil
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
	list := &kubefarmv1.MachineList{}
	if err := ms.reader.List(ctx, list, client.InNamespace(tenant.Namespace),
		client.MatchingFields{MachineNodeIndex: machineNodeKey(tenant.Name, node)}); err != nil {
		return nil, Identity{}, false, fmt.Errorf("looking up the Machine of node %q: %w", node, err)
	}
	if len(list.Items) != 1 {
		return nil, Identity{}, false, nil
	}
	m = &list.Items[0]
	domain, err := ms.domainOf(ctx, m)
	if err != nil {
		return nil, Identity{}, false, err
	}
	return m, IdentityOf(m, domain), true, nil
}

// domainOf is the DNS domain of m's pool's boot network. A pool that is gone
// (its Machines are being garbage collected) has none: m keeps its bare
// hostname and IP, which do not depend on the pool.
func (ms machineFinder) domainOf(ctx context.Context, m *kubefarmv1.Machine) (string, error) {
	pool := &kubefarmv1.NodePool{}
	switch err := ms.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Pool}, pool); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading NodePool %s of Machine %s: %w", m.Spec.Pool, m.Name, err)
	}
	return pool.Spec.Network.Domain, nil
}
