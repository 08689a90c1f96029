package tenantcluster

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// stubNodes is a tenant whose Nodes run the kubelets of versions, counting
// the reads; err fails them.
type stubNodes struct {
	versions map[string]string
	err      error
	reads    int
}

func (n *stubNodes) NodeList(context.Context, types.NamespacedName) ([]*corev1.Node, error) {
	n.reads++
	if n.err != nil {
		return nil, n.err
	}
	var nodes []*corev1.Node
	for name, v := range n.versions {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: v}}})
	}
	return nodes, nil
}

// TestPlanVersionSteps walks planVersion through an upgrade of two minors,
// v1.32.4 (below the window, left by the previous kubefarm release) to
// v1.34.4, which envtest cannot stage (the webhook admits no v1.32
// cluster): the pass's version is v1.33.4 first, then, after that step,
// v1.34.4 once the kubelets allow it, and the Nodes are read only before a
// step starts.
func TestPlanVersionSteps(t *testing.T) {
	nodes := &stubNodes{versions: map[string]string{"w-1": "v1.30.0"}}
	apiServer := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-apiserver"}}
	r := &Reconciler{TenantNodes: nodes}
	pass := func(t *testing.T, observed, running string) (*scope, metav1.Condition) {
		t.Helper()
		apiServer.Spec.Template.Spec.Containers = []corev1.Container{{Name: desired.ComponentAPIServer, Image: "registry.k8s.io/kube-apiserver:" + running}}
		r.Client = fake.NewClientBuilder().WithObjects(apiServer.DeepCopy()).Build()
		tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Spec: v1alpha1.TenantClusterSpec{Version: "v1.34.4"}, Status: v1alpha1.TenantClusterStatus{ObservedVersion: observed}}
		s := &scope{tc: tc, cluster: &desired.Cluster{Namespace: "ns", Name: "c", Version: tc.Spec.Version}}
		if _, err := r.planVersion(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionVersionRolledOut)
		if c == nil {
			t.Fatal("no VersionRolledOut condition")
		}
		return s, *c
	}
	check := func(t *testing.T, s *scope, c metav1.Condition, version, reason, msg string) {
		t.Helper()
		if s.cluster.Version != version || c.Reason != reason || c.Message != msg {
			t.Errorf("the pass runs %s, condition %s %q; want %s, %s %q", s.cluster.Version, c.Reason, c.Message, version, reason, msg)
		}
	}

	s, c := pass(t, "v1.32.4", "v1.32.4")
	check(t, s, c, "v1.33.4", v1alpha1.ReasonUpgradingStep, "v1.32.4 -> v1.33.4 on the way to v1.34.4 (this step and 1 more)")
	// The step has begun: the kubelets are not read again.
	reads := nodes.reads
	s, c = pass(t, "v1.32.4", "v1.33.4")
	check(t, s, c, "v1.33.4", v1alpha1.ReasonUpgradingStep, "v1.32.4 -> v1.33.4 on the way to v1.34.4 (this step and 1 more)")
	if nodes.reads != reads {
		t.Errorf("the Nodes were read during a step already begun")
	}
	// v1.33.4 runs everywhere: the next step, held by w-1's kubelet.
	s, c = pass(t, "v1.33.4", "v1.33.4")
	check(t, s, c, "v1.33.4", v1alpha1.ReasonKubeletSkew, "v1.33.4 -> v1.34.4 held: kube-apiserver v1.34 would be more than 3 minors ahead "+
		"of the kubelet of node w-1 (v1.30.0); boot them with a kubelet of v1.31 or later first (on the way to v1.34.4)")
	nodes.versions["w-1"] = "v1.31.2"
	s, c = pass(t, "v1.33.4", "v1.33.4")
	check(t, s, c, "v1.34.4", v1alpha1.ReasonUpgradingStep, "v1.33.4 -> v1.34.4 (the last step)")
	s, c = pass(t, "v1.34.4", "v1.34.4")
	check(t, s, c, "v1.34.4", v1alpha1.ReasonRolledOut, "every component runs v1.34.4")
	if c.Status != metav1.ConditionTrue {
		t.Errorf("VersionRolledOut is %s at the target", c.Status)
	}

	// A tenant whose Nodes cannot be read holds the step (fail closed).
	nodes.err = errors.New("TenantCluster ns/c: not answering")
	s, c = pass(t, "v1.33.4", "v1.33.4")
	check(t, s, c, "v1.33.4", v1alpha1.ReasonNodesUnreadable, "the upgrade from v1.33.4 to v1.34.4 is held: the tenant's Nodes could not be read "+
		"to check their kubelets' skew: TenantCluster ns/c: not answering")
}

func TestImageVersion(t *testing.T) {
	d := &appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: desired.ComponentKonnectivity, Image: "registry.k8s.io/kas-network-proxy/proxy-server:v0.34.0"},
		{Name: desired.ComponentAPIServer, Image: "localhost:5000/kube-apiserver:v1.34.4"},
	}
	if got := imageVersion(d, desired.ComponentAPIServer); got != "v1.34.4" {
		t.Errorf("imageVersion = %q", got)
	}
	if got := imageVersion(nil, desired.ComponentAPIServer); got != "" {
		t.Errorf("imageVersion(nil) = %q", got)
	}
}
