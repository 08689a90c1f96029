package desired

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

func nodePort(tc *v1alpha1.TenantCluster) { tc.Spec.APIServer.Expose.Type = v1alpha1.ExposeNodePort }

// TestKubernetesServiceEndpoints: with a NodePort API server Service, the
// tenant's kubernetes Service points at the node address and node port
// that nodes use, the API servers' own endpoint reconciler is off, and
// with the other types neither happens.
func TestKubernetesServiceEndpoints(t *testing.T) {
	for _, tt := range []struct {
		name     string
		mod      func(*v1alpha1.TenantCluster)
		endpoint string
		want     bool // kubefarm writes the endpoints
		addr     string
		family   discoveryv1.AddressType
	}{
		{"NodePort, IPv4", nodePort, "https://10.0.0.5:31443", true, "10.0.0.5", discoveryv1.AddressTypeIPv4},
		{"NodePort, IPv6", nodePort, "https://[2001:db8::5]:31443", true, "2001:db8::5", discoveryv1.AddressTypeIPv6},
		{"LoadBalancer", nil, "https://10.0.0.5:6443", false, "", ""},
		{"ExternalIP", func(tc *v1alpha1.TenantCluster) {
			tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "10.0.0.5"}
		}, "https://10.0.0.5:6443", false, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*v1alpha1.TenantCluster)
			if tt.mod != nil {
				mods = append(mods, tt.mod)
			}
			c := addonCluster(t, mods...)
			in := allAddons()
			in.Endpoint = tt.endpoint
			objs := mustAddons(t, c, in)
			var eps *corev1.Endpoints //lint:ignore SA1019 the v1 Endpoints kubefarm writes beside the slice
			var slice *discoveryv1.EndpointSlice
			for _, o := range objs {
				switch v := o.(type) {
				case *corev1.Endpoints: //lint:ignore SA1019 as above
					eps = v
				case *discoveryv1.EndpointSlice:
					slice = v
				}
			}
			flags, err := APIServerFlags(c)
			if err != nil {
				t.Fatal(err)
			}
			reconciler, set := flagMap(t, flags)["endpoint-reconciler-type"]
			if !tt.want {
				if eps != nil || slice != nil || set {
					t.Errorf("endpoints %v, slice %v, --endpoint-reconciler-type set %v: want none of them", eps, slice, set)
				}
				return
			}
			if reconciler != "none" {
				t.Errorf("--endpoint-reconciler-type=%q, want none", reconciler)
			}
			if eps == nil || slice == nil {
				t.Fatalf("endpoints %v, slice %v: want both", eps, slice)
			}
			if eps.Namespace != "default" || eps.Name != "kubernetes" || eps.Labels[discoveryv1.LabelSkipMirror] != "true" ||
				len(eps.Subsets) != 1 || eps.Subsets[0].Addresses[0].IP != tt.addr || eps.Subsets[0].Ports[0].Port != 31443 ||
				eps.Subsets[0].Ports[0].Name != "https" {
				t.Errorf("endpoints %+v", eps)
			}
			if slice.Namespace != "default" || slice.Name != "kubernetes" || slice.Labels[discoveryv1.LabelServiceName] != "kubernetes" ||
				slice.Labels[discoveryv1.LabelManagedBy] == "" || slice.AddressType != tt.family ||
				len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != tt.addr || !*slice.Endpoints[0].Conditions.Ready ||
				len(slice.Ports) != 1 || *slice.Ports[0].Port != 31443 || *slice.Ports[0].Name != "https" {
				t.Errorf("slice %+v", slice)
			}
			if slice.Labels[LabelManagedBy] != managedBy || eps.Labels[LabelManagedBy] != managedBy {
				t.Error("not labelled as kubefarm's, so pruning would never remove them")
			}
		})
	}
	for _, bad := range []string{"https://node.example.com:31443", "https://10.0.0.5", "http://10.0.0.5:31443"} {
		if _, err := KubernetesServiceEndpoints(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: error %v, want one naming it", bad, err)
		}
	}
	c := resolveTC(t, nodePort, func(tc *v1alpha1.TenantCluster) {
		tc.Spec.APIServer.ExtraArgs = map[string]string{"endpoint-reconciler-type": "lease"}
	})
	if _, err := APIServerFlags(c); err == nil {
		t.Error("--endpoint-reconciler-type could be overridden")
	}
}
