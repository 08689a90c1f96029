package desired

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TestPlacement: every control plane pod gets spec.placement, its replicas
// kept apart by hostname (preferred or required) and spread across zones.
func TestPlacement(t *testing.T) {
	tol := corev1.Toleration{Key: "kubefarm.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, tt := range []struct {
		name      string
		placement v1alpha1.PlacementSpec
		required  bool
	}{
		{name: "default: preferred, nowhere in particular"},
		{name: "required, on chosen nodes", required: true, placement: v1alpha1.PlacementSpec{
			NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane-host": ""}, Tolerations: []corev1.Toleration{tol},
			PriorityClassName: "tenant-control-plane", Spread: v1alpha1.SpreadRequired,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.Placement = tt.placement })
			for name, tpl := range workloads(t, c, nil) {
				pod := tpl.Spec
				if !reflect.DeepEqual(pod.NodeSelector, tt.placement.NodeSelector) && len(pod.NodeSelector)+len(tt.placement.NodeSelector) > 0 {
					t.Errorf("%s: nodeSelector %v", name, pod.NodeSelector)
				}
				if len(pod.Tolerations) != len(tt.placement.Tolerations) || len(pod.Tolerations) > 0 && pod.Tolerations[0] != tol {
					t.Errorf("%s: tolerations %v", name, pod.Tolerations)
				}
				if pod.PriorityClassName != tt.placement.PriorityClassName {
					t.Errorf("%s: priorityClassName %q", name, pod.PriorityClassName)
				}
				anti := pod.Affinity.PodAntiAffinity
				var term corev1.PodAffinityTerm
				if tt.required {
					if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
						t.Fatalf("%s: anti-affinity %+v, want one required term", name, anti)
					}
					term = anti.RequiredDuringSchedulingIgnoredDuringExecution[0]
				} else {
					if len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
						t.Fatalf("%s: anti-affinity %+v, want one preferred term", name, anti)
					}
					term = anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
				}
				if term.TopologyKey != corev1.LabelHostname || !reflect.DeepEqual(term.LabelSelector.MatchLabels, tpl.Labels) &&
					!selects(term.LabelSelector.MatchLabels, tpl.Labels) {
					t.Errorf("%s: anti-affinity term %+v does not keep this component's replicas apart by hostname", name, term)
				}
				if len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].TopologyKey != corev1.LabelTopologyZone ||
					pod.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.ScheduleAnyway ||
					!selects(pod.TopologySpreadConstraints[0].LabelSelector.MatchLabels, tpl.Labels) {
					t.Errorf("%s: topology spread %+v", name, pod.TopologySpreadConstraints)
				}
			}
		})
	}
}

// selects: every label of sel is on labels with its value.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// TestResources: each container has its default requests until the spec
// gives its own, which then replace them whole, limits included, for that
// container only.
func TestResources(t *testing.T) {
	defaults := map[string][2]string{
		ComponentAPIServer: {"100m", "256Mi"}, ComponentKonnectivity: {"10m", "32Mi"}, ComponentEtcd: {"50m", "64Mi"},
		ComponentControllerManager: {"50m", "64Mi"}, ComponentScheduler: {"20m", "32Mi"},
	}
	containers := func(c *Cluster) map[string]corev1.ResourceRequirements {
		out := map[string]corev1.ResourceRequirements{}
		for _, tpl := range workloads(t, c, nil) {
			for _, ctr := range tpl.Spec.Containers {
				out[ctr.Name] = ctr.Resources
			}
		}
		return out
	}
	got := containers(resolveTC(t))
	if len(got) != len(defaults) {
		t.Fatalf("containers %v", got)
	}
	for name, want := range defaults {
		r := got[name]
		if r.Requests.Cpu().String() != want[0] || r.Requests.Memory().String() != want[1] || len(r.Limits) != 0 {
			t.Errorf("%s: resources %v, want requests %v and no limits", name, r, want)
		}
	}

	own := &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
	want := *own.DeepCopy()
	c := resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.Etcd.Resources = own })
	// The resolved Cluster shares no memory with the spec.
	own.Requests[corev1.ResourceMemory] = resource.MustParse("9Gi")
	got = containers(c)
	if !reflect.DeepEqual(got[ComponentEtcd], want) {
		t.Errorf("etcd resources %v, want %v", got[ComponentEtcd], want)
	}
	if r := got[ComponentAPIServer]; r.Requests.Cpu().String() != "100m" {
		t.Errorf("the API server's resources changed with etcd's: %v", r)
	}

	for _, tt := range []struct {
		name string
		mod  func(*v1alpha1.TenantCluster)
		want string
	}{
		{"a request above its limit", func(tc *v1alpha1.TenantCluster) {
			tc.Spec.Scheduler.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			}
		}, "spec.scheduler.resources.requests[memory]"},
		{"a resource claim", func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.Resources = &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}, "spec.apiServer.resources.claims"},
		{"a bad node selector", func(tc *v1alpha1.TenantCluster) {
			tc.Spec.Placement.NodeSelector = map[string]string{"not a key": "x"}
		}, "spec.placement.nodeSelector"},
		{"a bad priority class", func(tc *v1alpha1.TenantCluster) { tc.Spec.Placement.PriorityClassName = "Not_A_Name" }, "spec.placement.priorityClassName"},
		{"an unknown spread", func(tc *v1alpha1.TenantCluster) { tc.Spec.Placement.Spread = "Sometimes" }, "spec.placement.spread"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(newTC(tt.mod), testOptions())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestServiceExtras: fixed node ports, a load balancer class and
// annotations reach the Service, each only with the type it belongs to.
func TestServiceExtras(t *testing.T) {
	class := "metallb.io/pool-a"
	t.Run("NodePort with fixed ports", func(t *testing.T) {
		svc := APIServerService(resolveTC(t, func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, NodePort: 31443, KonnectivityNodePort: 31132,
				Annotations: map[string]string{"example.com/owner": "team-a"}}
		}))
		ports := map[string]int32{}
		for _, p := range svc.Spec.Ports {
			ports[p.Name] = p.NodePort
		}
		if ports["https"] != 31443 || ports["konnectivity"] != 31132 {
			t.Errorf("node ports %v", ports)
		}
		if svc.Annotations["example.com/owner"] != "team-a" || svc.Spec.LoadBalancerClass != nil {
			t.Errorf("annotations %v, class %v", svc.Annotations, svc.Spec.LoadBalancerClass)
		}
	})
	t.Run("NodePort without fixed ports leaves them to the admin cluster", func(t *testing.T) {
		svc := APIServerService(resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Type = v1alpha1.ExposeNodePort }))
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				t.Errorf("port %s has node port %d", p.Name, p.NodePort)
			}
		}
	})
	t.Run("LoadBalancer with a class", func(t *testing.T) {
		svc := APIServerService(resolveTC(t, func(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.LoadBalancerClass = &class }))
		if svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass != class || svc.Annotations != nil {
			t.Errorf("class %v annotations %v", svc.Spec.LoadBalancerClass, svc.Annotations)
		}
	})
	off := false
	for _, tt := range []struct {
		name   string
		expose v1alpha1.APIServerExpose
		konn   *bool
		want   string
	}{
		{"a node port on a LoadBalancer", v1alpha1.APIServerExpose{NodePort: 31443}, nil, "spec.apiServer.expose.nodePort"},
		{"a Konnectivity node port on a LoadBalancer", v1alpha1.APIServerExpose{KonnectivityNodePort: 31132}, nil, "spec.apiServer.expose.konnectivityNodePort"},
		{"a Konnectivity node port without Konnectivity", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, KonnectivityNodePort: 31132}, &off, "only with Konnectivity enabled"},
		{"one node port twice", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, NodePort: 31443, KonnectivityNodePort: 31443}, nil, "Duplicate value"},
		{"a class on a NodePort", v1alpha1.APIServerExpose{Type: v1alpha1.ExposeNodePort, LoadBalancerClass: &class}, nil, "spec.apiServer.expose.loadBalancerClass"},
		{"a bad class", v1alpha1.APIServerExpose{LoadBalancerClass: ptrTo("not a class!")}, nil, "spec.apiServer.expose.loadBalancerClass"},
		{"a bad annotation", v1alpha1.APIServerExpose{Annotations: map[string]string{"bad key!": "x"}}, nil, "spec.apiServer.expose.annotations"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Resolve(newTC(func(tc *v1alpha1.TenantCluster) {
				tc.Spec.APIServer.Expose = tt.expose
				tc.Spec.Konnectivity.Enabled = tt.konn
			}), testOptions())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}
