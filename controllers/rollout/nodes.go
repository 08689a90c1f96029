package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

// tenantNodes is the rollout's one way into the pool's tenant: a client to
// cordon, evict and uncordon with, and the tenant's Nodes as the planner
// reads them, by name.
func (r *Reconciler) tenantNodes(ctx context.Context, pool *v1alpha1.NodePool) (kubernetes.Interface, map[string]*plan.Node, error) {
	cs, err := r.Tenants.Clientset(ctx, pool.Namespace, pool.Spec.Cluster)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := listNodes(ctx, cs)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the Nodes of TenantCluster %s: %w", pool.Spec.Cluster, err)
	}
	return cs, nodes, nil
}

// nodeListPage bounds one page of the tenant's Node list.
const nodeListPage = 500

// listNodes reads the tenant's Nodes as the planner needs them, by name.
// They are read once per pass rather than watched: a pass runs when a
// Machine changes or every few seconds while updates are in flight, and a
// pool's budget must see cordons and readiness the rollout did not cause.
func listNodes(ctx context.Context, cs kubernetes.Interface) (map[string]*plan.Node, error) {
	out := map[string]*plan.Node{}
	opts := metav1.ListOptions{Limit: nodeListPage}
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			n := &list.Items[i]
			out[n.Name] = nodeFacts(n)
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// nodeFacts is what the planner reads of a Node.
func nodeFacts(n *corev1.Node) *plan.Node {
	f := &plan.Node{Unschedulable: n.Spec.Unschedulable, BootID: n.Status.NodeInfo.BootID, Labels: n.Labels}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			f.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return f
}
