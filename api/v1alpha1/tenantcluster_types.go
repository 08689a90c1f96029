package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantClusterSpec describes one tenant Kubernetes control plane that runs as
// pods in the TenantCluster's namespace of the admin cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.apiServer) || !has(self.apiServer.expose) || self.apiServer.expose.type != 'ExternalIP' || has(self.apiServer.expose.externalIP)",fieldPath=".apiServer.expose.externalIP",message="externalIP is required when apiServer.expose.type is ExternalIP"
type TenantClusterSpec struct {
	// Version is the Kubernetes version of the control plane, for example
	// v1.34.4. A version several minors ahead is reached one minor at a
	// time (each minor between at the patch kubefarm pins for it, the API
	// server first), each step held while a Node's kubelet would fall more
	// than three minors behind (the VersionRolledOut condition says why);
	// downgrades are rejected (docs/versions.md).
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	// +required
	Version string `json:"version"`

	// APIServer configures kube-apiserver and how it is exposed.
	// +optional
	// +kubebuilder:default={}
	APIServer APIServerSpec `json:"apiServer,omitempty"`

	// ControllerManager configures kube-controller-manager.
	// +optional
	ControllerManager ComponentSpec `json:"controllerManager,omitempty"`

	// Scheduler configures kube-scheduler.
	// +optional
	Scheduler ComponentSpec `json:"scheduler,omitempty"`

	// Etcd configures the tenant's etcd cluster.
	// +optional
	// +kubebuilder:default={}
	Etcd EtcdSpec `json:"etcd,omitempty"`

	// Network holds the tenant's service and pod networks and DNS domain.
	// +optional
	// +kubebuilder:default={}
	Network ClusterNetwork `json:"network,omitempty"`

	// Konnectivity carries control-plane-to-node traffic (logs, exec,
	// webhooks) through agents on the nodes, so nodes need no route to the
	// admin cluster's pod network.
	// +optional
	// +kubebuilder:default={}
	Konnectivity KonnectivitySpec `json:"konnectivity,omitempty"`

	// KubeProxy selects how Services are implemented on the tenant's nodes.
	// +optional
	// +kubebuilder:default={}
	KubeProxy KubeProxySpec `json:"kubeProxy,omitempty"`

	// Addons switches the optional tenant add-ons.
	// +optional
	// +kubebuilder:default={}
	Addons AddonsSpec `json:"addons,omitempty"`

	// PodSecurity sets the tenant API server's cluster-wide Pod Security
	// admission defaults.
	// +optional
	// +kubebuilder:default={}
	PodSecurity PodSecurityDefaults `json:"podSecurity,omitempty"`

	// Placement says where in the admin cluster the control plane pods
	// run and how they are spread.
	// +optional
	// +kubebuilder:default={}
	Placement PlacementSpec `json:"placement,omitempty"`

	// VolumeReclaimPolicy says what happens to etcd's volumes when the
	// TenantCluster is deleted.
	// +optional
	// +kubebuilder:default=Retain
	VolumeReclaimPolicy VolumeReclaimPolicy `json:"volumeReclaimPolicy,omitempty"`
}

// VolumeReclaimPolicy is Retain or Delete.
// +kubebuilder:validation:Enum=Retain;Delete
type VolumeReclaimPolicy string

const (
	VolumeReclaimRetain VolumeReclaimPolicy = "Retain"
	VolumeReclaimDelete VolumeReclaimPolicy = "Delete"
)

// ComponentSpec holds settings common to control plane components.
type ComponentSpec struct {
	// ExtraArgs are added to the component's flags and win over the flags
	// kubefarm derives, except for the flags kubefarm needs to keep the
	// cluster secure and reachable (documented per component).
	// +optional
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`

	// Resources replace the component's default requests (docs/placement.md
	// lists them with what they were measured on); limits are set only if
	// given here.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// SpreadPolicy says how strictly replicas of one component are kept on
// different admin nodes.
// +kubebuilder:validation:Enum=Preferred;Required
type SpreadPolicy string

const (
	// SpreadPreferred: the scheduler prefers different nodes, and still
	// runs replicas side by side on a small admin cluster.
	SpreadPreferred SpreadPolicy = "Preferred"
	// SpreadRequired: no two replicas of a component on one node; a
	// replica without a free node stays Pending.
	SpreadRequired SpreadPolicy = "Required"
)

// PlacementSpec places the control plane pods in the admin cluster.
type PlacementSpec struct {
	// NodeSelector restricts the control plane pods to admin nodes with
	// these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the control plane pods, for admin nodes tainted for
	// them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName of the control plane pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Spread of the replicas of each component (API servers, etcd members,
	// controller managers, schedulers) over admin nodes (by hostname).
	// Across zones (topology.kubernetes.io/zone) they are always spread as
	// far as the scheduler can.
	// +optional
	// +kubebuilder:default=Preferred
	Spread SpreadPolicy `json:"spread,omitempty"`
}

// ClusterNetwork holds the tenant's networks.
type ClusterNetwork struct {
	// ServiceCIDR is the range ClusterIPs are allocated from. It cannot change
	// after creation: every Service and certificate depends on it.
	// +optional
	// +kubebuilder:default="10.96.0.0/12"
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.96.0.0/12"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// PodCIDR is the range pod addresses come from.
	// +optional
	// +kubebuilder:default="10.244.0.0/16"
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.244.0.0/16"
	PodCIDR string `json:"podCIDR,omitempty"`

	// ClusterDomain is the DNS domain of Services. Immutable.
	// +optional
	// +kubebuilder:default="cluster.local"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	ClusterDomain string `json:"clusterDomain,omitempty"`

	// DNSServiceIP is the ClusterIP of the cluster DNS Service; empty means
	// the tenth address of ServiceCIDR.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	DNSServiceIP string `json:"dnsServiceIP,omitempty"`
}

// PodSecurityLevel is a Pod Security Standards level.
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

// PodSecurityDefaults are the cluster-wide Pod Security admission defaults.
type PodSecurityDefaults struct {
	// Enforce level; Pods violating it are rejected.
	// +optional
	// +kubebuilder:default=baseline
	Enforce PodSecurityLevel `json:"enforce,omitempty"`
	// Audit level; violations are recorded in the audit log.
	// +optional
	// +kubebuilder:default=restricted
	Audit PodSecurityLevel `json:"audit,omitempty"`
	// Warn level; violations are returned as warnings to the client.
	// +optional
	// +kubebuilder:default=restricted
	Warn PodSecurityLevel `json:"warn,omitempty"`
}

// TenantClusterStatus is what the controller observed.
type TenantClusterStatus struct {
	// Conditions: Ready, EtcdReady, APIServerReady, CertificatesReady, AddonsReady,
	// EncryptionKeyRotated, CARotated, EtcdBackedUp, EtcdScaling and
	// VersionRolledOut (TenantClusterConditionTypes).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Endpoint is the URL clients use to reach the tenant API server.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ObservedVersion is the Kubernetes version every control plane component runs.
	// +optional
	ObservedVersion string `json:"observedVersion,omitempty"`

	// AdminKubeconfigSecret names the Secret, in this namespace, that holds
	// the tenant's admin kubeconfig under the key `kubeconfig`.
	// +optional
	AdminKubeconfigSecret string `json:"adminKubeconfigSecret,omitempty"`

	// Backup reports the etcd snapshots (spec.etcd.backup).
	// +optional
	Backup *EtcdBackupStatus `json:"backup,omitempty"`
}

// TenantCluster is a tenant Kubernetes control plane run as pods in its namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tc;tcs,categories=kubefarm
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenantCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   TenantClusterSpec   `json:"spec"`
	Status TenantClusterStatus `json:"status,omitempty"`
}

// TenantClusterList is a list of TenantClusters.
//
// +kubebuilder:object:root=true
type TenantClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantCluster `json:"items"`
}
