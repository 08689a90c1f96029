package desired

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The endpoints of the tenant's own `kubernetes` Service with a NodePort
// API server Service. kube-apiserver publishes <advertise-address>:
// <secure-port> there, and has no separate advertised port: with NodePort
// that is the node's address on port 6443, where nothing of this tenant
// listens (on an admin node, usually the admin cluster's own API server),
// so pods in the tenant could not reach their API server through
// kubernetes.default. kubefarm therefore turns the API servers' endpoint
// reconciler off (--endpoint-reconciler-type=none) and writes the
// endpoints itself: the node's address and the node port, which is what
// nodes use too.

const (
	kubernetesServiceName = "kubernetes"
	// endpointSliceManager marks the EndpointSlice as kubefarm's, so the
	// EndpointSlice controllers leave it alone.
	endpointSliceManager = "tenantcluster-controller.kubefarm.io"
)

// KubernetesServiceEndpoints are the Endpoints and EndpointSlice of the
// tenant's `kubernetes` Service for the external endpoint nodes use
// (https://<node address>:<node port>). The Endpoints are marked not to be
// mirrored: the EndpointSlice is written alongside.
func KubernetesServiceEndpoints(endpoint string) ([]client.Object, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("endpoint %q: must be an https URL", endpoint)
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: a NodePort endpoint's host must be an IP address: %w", endpoint, err)
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("endpoint %q: no port", endpoint)
	}
	addrType := discoveryv1.AddressTypeIPv4
	if addr.Is6() {
		addrType = discoveryv1.AddressTypeIPv6
	}
	name, proto, p := "https", corev1.ProtocolTCP, int32(port)
	// The v1 Endpoints API is deprecated, but kube-apiserver still keeps
	// both for this Service, and older clients read it.
	//lint:ignore SA1019 see above
	eps := &corev1.Endpoints{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"},
		ObjectMeta: addonMeta(metav1.NamespaceDefault, kubernetesServiceName,
			map[string]string{discoveryv1.LabelSkipMirror: "true"}),
		//lint:ignore SA1019 see above
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: addr.String()}},
			Ports:     []corev1.EndpointPort{{Name: name, Port: p, Protocol: proto}},
		}},
	}
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: addonMeta(metav1.NamespaceDefault, kubernetesServiceName, map[string]string{
			discoveryv1.LabelServiceName: kubernetesServiceName,
			discoveryv1.LabelManagedBy:   endpointSliceManager,
		}),
		AddressType: addrType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &p, Protocol: &proto}},
	}
	return []client.Object{eps, slice}, nil
}

// KubernetesServiceEndpointNames are empty objects naming what
// KubernetesServiceEndpoints writes, for pruning once the Service is no
// longer NodePort (the API servers' reconciler then writes them again).
func KubernetesServiceEndpointNames() []client.Object {
	objs, _ := KubernetesServiceEndpoints("https://192.0.2.1:1")
	return objs
}
