package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

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
