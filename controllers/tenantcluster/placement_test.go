package tenantcluster_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// TestPlacedWorkloadsAdmitted: the workloads and Service of a tenant with
// every placement, resource, Service and audit setting in use, and the
// kubernetes Service endpoints of a NodePort tenant, are what a real API
// server accepts (server-side dry run: its validation of pod
// templates, anti-affinity terms, resource limits and node ports), and
// carry those settings once admitted.
func TestPlacedWorkloadsAdmitted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, Port: 6443, NodePort: 31443, KonnectivityNodePort: 31132,
		Annotations: map[string]string{"example.com/owner": "team-a"}}
	tc.Spec.APIServer.Audit = v1alpha1.AuditSpec{Mode: v1alpha1.AuditFile, MaxSizeMB: 10}
	tc.Spec.Placement = v1alpha1.PlacementSpec{
		NodeSelector:      map[string]string{"example.com/control-planes": "true"},
		Tolerations:       []corev1.Toleration{{Key: "example.com/control-planes", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		PriorityClassName: "tenant-control-plane",
		Spread:            v1alpha1.SpreadRequired,
	}
	tc.Spec.Etcd.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("300Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	c, err := desired.Resolve(tc, desired.Options{Images: desired.Images{Registry: "r.example.com", EtcdTag: "3.6.5-0", KonnectivityTag: "v0.34.0"},
		ObservedExternalAddress: "192.0.2.10"})
	if err != nil {
		t.Fatal(err)
	}
	config, err := desired.ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := desired.EtcdStatefulSet(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := desired.APIServerDeployment(c, config, nil)
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := desired.ControllerManagerDeployment(c, config, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := desired.APIServerService(c)
	// The kubernetes Service's endpoints the NodePort add-ons write in the
	// tenant (checked here in this namespace rather than default).
	eps, err := desired.KubernetesServiceEndpoints("https://192.0.2.10:31443")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range eps {
		o.SetNamespace(ns)
	}
	for _, obj := range append([]client.Object{config, sts, api, kcm, svc}, eps...) {
		if err := env.Client.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("the API server refuses %T %s: %v", obj, obj.GetName(), err)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" && p.NodePort != 31443 {
			t.Errorf("admitted Service's https node port %d, want 31443", p.NodePort)
		}
	}
	if got := sts.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("admitted etcd memory limit %s", got)
	}
	if pod := api.Spec.Template.Spec; pod.PriorityClassName != "tenant-control-plane" ||
		len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("admitted API server pod: priority %q, anti-affinity %+v", pod.PriorityClassName, pod.Affinity.PodAntiAffinity)
	}
}
