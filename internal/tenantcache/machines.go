package tenantcache

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MachineNodeIndex indexes Machines by the node they are in a tenant:
// "<spec.cluster>/<spec.hostname>" (see machineNodeKey). The cache scopes a
// field index of a namespaced kind by namespace, so a lookup with
// InNamespace(the TenantCluster's namespace) finds a tenant's node in O(1),
// however many Machines the admin cluster holds.
const MachineNodeIndex = "kubefarm.io/machine-node"

// machineNodeKey is the MachineNodeIndex value of node hostname of
// TenantCluster cluster. Neither name can hold a "/", so keys are unique.
func machineNodeKey(cluster, hostname string) string { return cluster + "/" + hostname }

var (
	indexedMu sync.Mutex
	// indexed are the indexers MachineNodeIndex is registered on: every
	// controller that looks nodes up registers it, and a cache refuses
	// a second index of one name.
	indexed = map[client.FieldIndexer]bool{}
)

// IndexMachines registers MachineNodeIndex on the manager's cache, once
// per cache however many controllers ask.
func IndexMachines(ctx context.Context, indexer client.FieldIndexer) error {
	indexedMu.Lock()
	defer indexedMu.Unlock()
	if indexed[indexer] {
		return nil
	}
	if err := indexer.IndexField(ctx, &kubefarmv1.Machine{}, MachineNodeIndex, func(o client.Object) []string {
		m := o.(*kubefarmv1.Machine)
		return []string{machineNodeKey(m.Spec.Cluster, m.Spec.Hostname)}
	}); err != nil {
		return fmt.Errorf("indexing Machines by %s: %w", MachineNodeIndex, err)
	}
	indexed[indexer] = true
	return nil
}

// MachinesOfNode are the Machines whose hostname is node in tenant, from
// the index. More than one is a misconfiguration the caller must refuse to
// guess about: either could be the node.
func MachinesOfNode(ctx context.Context, reader client.Reader, tenant types.NamespacedName, node string) ([]kubefarmv1.Machine, error) {
	list := &kubefarmv1.MachineList{}
	if err := reader.List(ctx, list, client.InNamespace(tenant.Namespace),
		client.MatchingFields{MachineNodeIndex: machineNodeKey(tenant.Name, node)}); err != nil {
		return nil, fmt.Errorf("looking up the Machine of node %q: %w", node, err)
	}
	return list.Items, nil
}
