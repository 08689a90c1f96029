package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TenantClusterSpec describes one tenant Kubernetes control plane that runs as
// pods in the TenantCluster's namespace of the admin cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.apiServer) || !has(self.apiServer.expose) || self.apiServer.expose.type != 'ExternalIP' || has(self.apiServer.expose.externalIP)",fieldPath=".apiServer.expose.externalIP",message="externalIP is required when apiServer.expose.type is ExternalIP"
type TenantClusterSpec struct {
	// Version is the Kubernetes version of the control plane, for example
	// v1.34.4. Upgrades move one minor version at a time; downgrades are
	// rejected.
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

// APIServerSpec configures kube-apiserver.
type APIServerSpec struct {
	ComponentSpec `json:",inline"`

	// Replicas is the number of kube-apiserver pods.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Replicas *int32 `json:"replicas,omitempty"`

	// Expose says how clients and nodes reach the API server.
	// +optional
	// +kubebuilder:default={}
	Expose APIServerExpose `json:"expose,omitempty"`

	// CertSANs are extra names and addresses for the serving certificate.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	CertSANs []string `json:"certSANs,omitempty"`

	// Audit configures the API server's audit log (docs/audit.md).
	// +optional
	// +kubebuilder:default={}
	Audit AuditSpec `json:"audit,omitempty"`
}

// AuditMode is where the API server writes its audit events.
// +kubebuilder:validation:Enum=File;Stdout;None
type AuditMode string

const (
	// AuditFile writes JSON lines to a file on a volume of the API server
	// pod, rotated by size (maxSizeMB, maxBackups).
	AuditFile AuditMode = "File"
	// AuditStdout writes JSON lines to the API server container's standard
	// output (its own log goes to standard error), where the node's log
	// collection picks them up.
	AuditStdout AuditMode = "Stdout"
	// AuditNone turns auditing off.
	AuditNone AuditMode = "None"
)

// AuditSpec configures the audit log of kube-apiserver.
type AuditSpec struct {
	// Mode is File, Stdout or None.
	// +optional
	// +kubebuilder:default=File
	Mode AuditMode `json:"mode,omitempty"`

	// Policy replaces kubefarm's default audit policy: an audit.k8s.io/v1
	// Policy object (apiVersion, kind and rules), checked as kube-apiserver
	// loads it, unknown fields refused. Empty uses the default, which
	// records who read or changed what (Metadata), the request bodies of
	// changes (Request), never the contents of Secrets, ConfigMaps or
	// tokens, and not the health checks, Events or node heartbeats.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	Policy *runtime.RawExtension `json:"policy,omitempty"`

	// MaxSizeMB is the size in megabytes at which the File mode's log is
	// rotated.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MaxSizeMB int32 `json:"maxSizeMB,omitempty"`

	// MaxBackups is how many rotated files the File mode keeps besides the
	// current one. The volume is sized (maxBackups+2) x maxSizeMB.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	MaxBackups *int32 `json:"maxBackups,omitempty"`
}

// ExposeType is how the API server Service is published.
// +kubebuilder:validation:Enum=LoadBalancer;NodePort;ExternalIP
type ExposeType string

const (
	ExposeLoadBalancer ExposeType = "LoadBalancer"
	ExposeNodePort     ExposeType = "NodePort"
	ExposeExternalIP   ExposeType = "ExternalIP"
)

// APIServerExpose publishes the API server and the Konnectivity agent port.
type APIServerExpose struct {
	// Type is LoadBalancer, NodePort or ExternalIP.
	// +optional
	// +kubebuilder:default=LoadBalancer
	Type ExposeType `json:"type,omitempty"`

	// ExternalIP is the fixed address of the API server, required for
	// ExternalIP and used as the advertise address when set.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	ExternalIP string `json:"externalIP,omitempty"`

	// Port is the API server port on the Service.
	// +optional
	// +kubebuilder:default=6443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// NodePort fixes the API server's node port (type NodePort only);
	// empty lets the admin cluster allocate one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	NodePort int32 `json:"nodePort,omitempty"`

	// KonnectivityNodePort fixes the Konnectivity agents' node port (type
	// NodePort with Konnectivity only).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	KonnectivityNodePort int32 `json:"konnectivityNodePort,omitempty"`

	// LoadBalancerClass selects the load balancer implementation (type
	// LoadBalancer only). The admin cluster refuses to change it once set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LoadBalancerClass *string `json:"loadBalancerClass,omitempty"`

	// Annotations of the API server Service, for example the address pool
	// of a MetalLB or a cloud load balancer's options.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// EtcdSpec configures the tenant's etcd.
// +kubebuilder:validation:XValidation:rule="has(self.restoreFrom) == has(oldSelf.restoreFrom)",message="restoreFrom can only be set when the TenantCluster is created, and stays"
type EtcdSpec struct {
	// Replicas is 1 or 3. Three tolerates the loss of one member. It can
	// change at any time: kubefarm then changes etcd's membership one
	// member at a time through etcd's member API (a new member joins as a
	// learner and votes once it has caught up; a member leaves after the
	// leadership has moved off it), with quorum checked before each step,
	// and reports the progress in the EtcdScaling condition. During the
	// change the API servers use member 0 only, so a change rolls them
	// twice (see docs/etcd.md, Scaling).
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Enum=1;3
	Replicas int32 `json:"replicas,omitempty"`

	// Resources replace the members' default requests (docs/placement.md).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// StorageSize is the size of each member's volume.
	// +optional
	// +kubebuilder:default="2Gi"
	StorageSize *resource.Quantity `json:"storageSize,omitempty"`

	// StorageClassName of the members' volumes; empty uses the default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Backup takes scheduled snapshots of etcd with a CronJob
	// (docs/etcd.md, "Backup"). Unset takes none.
	// +optional
	Backup *EtcdBackup `json:"backup,omitempty"`

	// RestoreFrom bootstraps etcd from a snapshot instead of empty: every
	// member restores it into its empty volume before it first starts. It
	// is read only while etcd has never started (no member was ever ready
	// and no member volumes exist), can only be set when the TenantCluster
	// is created, and cannot change afterwards.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable: a snapshot is restored only when the TenantCluster is created"
	RestoreFrom *EtcdRestoreSource `json:"restoreFrom,omitempty"`
}

// EtcdBackup configures scheduled etcd snapshots: a CronJob in the tenant's
// namespace streams a snapshot from a healthy member with the etcd client
// API, verifies it, writes it to a PersistentVolumeClaim (or uploads it to
// an S3-compatible bucket) and keeps the newest Retain of them.
// +kubebuilder:validation:XValidation:rule="!has(self.s3) || !has(self.volume) || !has(self.volume.claimName)",message="volume.claimName and s3 are exclusive: snapshots go to one place"
type EtcdBackup struct {
	// Schedule in cron syntax (the CronJob's), in TimeZone.
	// +optional
	// +kubebuilder:default="0 */6 * * *"
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=100
	Schedule string `json:"schedule,omitempty"`

	// TimeZone of the schedule, an IANA name such as Europe/Berlin; empty
	// is the admin cluster's kube-controller-manager's time zone.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone *string `json:"timeZone,omitempty"`

	// Suspend stops new snapshots; the existing ones are kept.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Retain is how many snapshots of this tenant are kept; older ones are
	// deleted after each successful snapshot.
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retain *int32 `json:"retain,omitempty"`

	// Volume is where snapshots are written (unless S3 is set).
	// +optional
	Volume EtcdBackupVolume `json:"volume,omitempty"`

	// S3 uploads the snapshots to an S3-compatible bucket instead of a
	// claim; each run stages its snapshot in an emptyDir and keeps the
	// newest Retain objects of this tenant in the bucket.
	// +optional
	S3 *EtcdBackupS3 `json:"s3,omitempty"`
}

// EtcdBackupS3 is an S3-compatible bucket for etcd snapshots.
type EtcdBackupS3 struct {
	// Endpoint is the S3 API's URL, https://host[:port] (http:// only for
	// a store reachable without TLS, such as one in the admin cluster;
	// requests are signed, the snapshots travel in the clear).
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=263
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name; it must exist.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// Prefix starts the objects' keys, ending in "/": empty is
	// "<namespace>/<tenant>/". Retention only ever deletes objects under
	// it whose names are exactly what kubefarm writes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket; empty lets the client find it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// CredentialsSecret names a Secret in the tenant's namespace with the
	// keys accessKeyID and secretAccessKey. They reach the backup pod as
	// environment variables only.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret"`

	// CAConfigMap names a ConfigMap in the tenant's namespace whose key
	// ca.crt holds the CA certificates the endpoint's TLS certificate is
	// checked against; empty uses the tools image's system roots.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CAConfigMap string `json:"caConfigMap,omitempty"`
}

// EtcdBackupVolume is the PersistentVolumeClaim snapshots are written to.
type EtcdBackupVolume struct {
	// ClaimName of an existing claim in the tenant's namespace. Empty:
	// kubefarm creates "<tenant>-etcd-backup" of Size from
	// StorageClassName. Either way the claim is never deleted by kubefarm,
	// not even with the TenantCluster: snapshots are what a restore after
	// a deletion needs.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// Size of the claim kubefarm creates (ignored with ClaimName).
	// +optional
	// +kubebuilder:default="10Gi"
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the claim kubefarm creates (ignored with
	// ClaimName); empty uses the default class.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// EtcdRestoreSource names a snapshot taken by kubefarm's etcd backup.
type EtcdRestoreSource struct {
	// ClaimName is the PersistentVolumeClaim, in the tenant's namespace,
	// that holds the snapshot (for example "<tenant>-etcd-backup"). Every
	// member mounts it read-only while it restores: with several members on
	// different nodes the claim must allow that (ReadOnlyMany or
	// ReadWriteMany), or the members must share a node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// Snapshot is the file name in the claim, as status.backup.lastSnapshot
	// reported it (for example "tenant-a-20261124T030000Z.db").
	// +required
	// +kubebuilder:validation:MinLength=4
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*\.db$`
	Snapshot string `json:"snapshot"`
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
	// EncryptionKeyRotated.
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

// EtcdBackupStatus is what the backup CronJob's runs reported.
type EtcdBackupStatus struct {
	// LastSnapshot is the newest snapshot that was taken and verified.
	// +optional
	LastSnapshot *EtcdSnapshot `json:"lastSnapshot,omitempty"`
	// LastFailureTime is when the newest failed run ended.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// LastRunTime is when the newest run kubefarm reported on ended,
	// successful or not.
	// +optional
	LastRunTime *metav1.Time `json:"lastRunTime,omitempty"`
	// LastRunJob is that run's Job.
	// +optional
	LastRunJob string `json:"lastRunJob,omitempty"`
}

// EtcdSnapshot describes one snapshot: a file on a claim, or an object in
// a bucket.
type EtcdSnapshot struct {
	// ClaimName is the claim the file is on (empty for S3).
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// Bucket and Object locate the snapshot in S3 (spec.etcd.backup.s3).
	// +optional
	Bucket string `json:"bucket,omitempty"`
	// +optional
	Object string `json:"object,omitempty"`
	// File is the snapshot's file name in the claim: what
	// spec.etcd.restoreFrom.snapshot takes. For S3, the object's name
	// after the prefix.
	File string `json:"file"`
	// SizeBytes is the file's size.
	SizeBytes int64 `json:"sizeBytes"`
	// Revision is etcd's revision the snapshot holds.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Time is when it was taken.
	Time metav1.Time `json:"time"`
	// Job is the backup run that took it.
	// +optional
	Job string `json:"job,omitempty"`
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
