package rollout

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

// tenantNodes is the rollout's one way into the pool's tenant: a client to
// cordon, evict and uncordon with, and the tenant's Nodes as the planner
// reads them, by name. The Nodes are watched (Tenants), not listed per
// pass: a pass runs when a Machine changes or every few seconds while
// updates are in flight, and the watch still shows it the cordons and
// readiness the rollout did not cause.
func (r *Reconciler) tenantNodes(ctx context.Context, pool *v1alpha1.NodePool) (kubernetes.Interface, map[string]*plan.Node, error) {
	cs, list, err := r.Tenants.Nodes(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: pool.Spec.Cluster})
	if err != nil {
		return nil, nil, err
	}
	nodes := make(map[string]*plan.Node, len(list))
	for _, n := range list {
		nodes[n.Name] = nodeFacts(n)
	}
	return cs, nodes, nil
}

// nodeFacts is what the planner reads of a Node.
func nodeFacts(n *corev1.Node) *plan.Node {
	f := &plan.Node{Unschedulable: n.Spec.Unschedulable, BootID: n.Status.NodeInfo.BootID, Labels: n.Labels}
	if v, ok := n.Annotations[v1alpha1.AnnotationRebootHold]; ok {
		f.RebootHold = &v
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			f.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return f
}
