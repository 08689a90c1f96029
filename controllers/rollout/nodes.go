package rollout

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

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
