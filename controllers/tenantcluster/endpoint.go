package tenantcluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The endpoint arithmetic: which address and port the admin cluster
// published for the API server Service, fed back into the builders and
// reported as status.endpoint.

// observedAddress is the address the admin cluster published for the API
// server Service, fed back into the builders (certificate SANs, advertise
// address): the first load balancer ingress, or for NodePort the node
// address chosen by nodeAddress. Empty while unknown.
func observedAddress(svc *corev1.Service, nodeAddr string) string {
	if svc == nil {
		return ""
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return in.IP
			}
			if in.Hostname != "" {
				return in.Hostname
			}
		}
	case corev1.ServiceTypeNodePort:
		return nodeAddr
	}
	return ""
}

// endpointPort is the port clients use on the external address: the node
// port for NodePort (the Service port exists only inside the admin
// cluster), else the Service port. Zero while the node port is unallocated.
func endpointPort(svc *corev1.Service, servicePort int32) int32 {
	if svc == nil {
		return 0
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort {
		return servicePort
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == servicePort {
			return p.NodePort
		}
	}
	return 0
}

// endpointURL is status.endpoint: https://address:port, or "" while either
// is unknown.
func endpointURL(address string, port int32) string {
	if address == "" || port == 0 {
		return ""
	}
	if strings.Contains(address, ":") { // IPv6 literal
		return fmt.Sprintf("https://[%s]:%d", address, port)
	}
	return fmt.Sprintf("https://%s:%d", address, port)
}

// nodeAddress picks the address NodePort clients use: among Ready nodes,
// sorted by name so the choice is stable across reconciles (a change would
// reissue the serving certificate and roll the API servers), the first
// ExternalIP, else the first InternalIP.
func nodeAddress(nodes []corev1.Node) string {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	pick := func(t corev1.NodeAddressType) string {
		for _, n := range sorted {
			if !nodeReady(&n) {
				continue
			}
			for _, a := range n.Status.Addresses {
				if a.Type == t && a.Address != "" {
					return a.Address
				}
			}
		}
		return ""
	}
	if a := pick(corev1.NodeExternalIP); a != "" {
		return a
	}
	return pick(corev1.NodeInternalIP)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
