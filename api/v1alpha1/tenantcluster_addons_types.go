package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// KonnectivitySpec configures the Konnectivity server sidecar and agents.
type KonnectivitySpec struct {
	// Enabled runs konnectivity-server beside kube-apiserver and the agent
	// DaemonSet in the tenant.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// Resources replace konnectivity-server's default requests
	// (docs/placement.md).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// KubeProxyMode is iptables, ipvs, nftables, or none (a CNI replaces kube-proxy).
// +kubebuilder:validation:Enum=iptables;ipvs;nftables;none
type KubeProxyMode string

// KubeProxySpec configures kube-proxy in the tenant.
type KubeProxySpec struct {
	// Mode of kube-proxy; none deploys no kube-proxy.
	// +optional
	// +kubebuilder:default=iptables
	Mode KubeProxyMode `json:"mode,omitempty"`
}

// AddonsSpec switches tenant add-ons.
type AddonsSpec struct {
	// CoreDNS deploys cluster DNS.
	// +optional
	// +kubebuilder:default=true
	CoreDNS *bool `json:"coreDNS,omitempty"`

	// ProbeHostPolicy deploys a ValidatingAdmissionPolicy that rejects Pods
	// whose probes or lifecycle hooks set `host`, which would let a tenant
	// make the kubelet connect anywhere (SSRF).
	// +optional
	// +kubebuilder:default=true
	ProbeHostPolicy *bool `json:"probeHostPolicy,omitempty"`
}
