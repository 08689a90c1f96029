package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaxMachinesPerPool bounds a pool so that its CEL rules stay within the API
// server's per-request cost budget; larger groups are split into several pools.
// The CEL rules left are linear in the machines. Uniqueness of MACs and IPs
// within a pool, quadratic in CEL (creating a 250-machine pool cost 670 ms
// of API server and etcd CPU with the IP rule, 43 ms without: `make bench`,
// docs/dhcp.md), is checked by the
// NodePool admission webhook in linear time instead, together with
// uniqueness across pools, which CEL cannot see at all; its errors name the
// machine that already has the address.
const MaxMachinesPerPool = 250

// NodePoolSpec describes a group of netbooted machines that join one tenant
// cluster with the same image, boot network and settings. Its shape follows a
// kubefarm `nodePools` entry.
//
// +kubebuilder:validation:XValidation:rule="!has(self.machines) || self.machines.all(m, cidr(self.network.subnet).containsIP(m.ip))",fieldPath=".machines",messageExpression="'every machine IP must be inside spec.network.subnet ' + self.network.subnet",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.network.gateway) || cidr(self.network.subnet).containsIP(self.network.gateway)",fieldPath=".network.gateway",message="gateway must be inside spec.network.subnet",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.network.dynamicRange) || !isIP(self.network.dynamicRange.start) || !isIP(self.network.dynamicRange.end) || (cidr(self.network.subnet).containsIP(self.network.dynamicRange.start) && cidr(self.network.subnet).containsIP(self.network.dynamicRange.end))",fieldPath=".network.dynamicRange",messageExpression="'start and end must be inside spec.network.subnet ' + self.network.subnet",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.machines) || !has(self.tags) || self.machines.all(m, !has(m.tags) || m.tags.all(t, t in self.tags))",fieldPath=".machines",message="machines may only use tags defined in spec.tags",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="has(self.tags) || !has(self.machines) || self.machines.all(m, !has(m.tags) || size(m.tags) == 0)",fieldPath=".machines",message="machines use tags but spec.tags defines none",reason=FieldValueInvalid
type NodePoolSpec struct {
	// Cluster is the name of the TenantCluster, in the same namespace, that
	// the machines join. Immutable: moving machines between clusters means
	// deleting them from one pool and adding them to another.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	Cluster string `json:"cluster"`

	// BootImage is the name of the BootImage the machines should run. Changing
	// it starts a rolling reboot-to-update within spec.rollout.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BootImage string `json:"bootImage"`

	// Network is the boot network the machines' DHCP leases describe.
	// +required
	Network BootNetwork `json:"network"`

	// Machines are the pool's servers.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=250
	Machines []MachineEntry `json:"machines,omitempty"`

	// Tags are named bundles of node labels, taints, kernel arguments and DHCP
	// options that machines opt into by name.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Tags map[string]TagSpec `json:"tags,omitempty"`

	// Labels are set on every node of the pool.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Taints are set on every node of the pool.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Taints []corev1.Taint `json:"taints,omitempty"`

	// KernelArgs are appended to every machine's kernel command line.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	KernelArgs []string `json:"kernelArgs,omitempty"`

	// Kubelet configures the kubelet of every machine of the pool.
	// +optional
	Kubelet KubeletSpec `json:"kubelet,omitempty"`

	// RegistryMirrors tell the machines' containerd where to pull the images
	// of a registry from, for example a farm's own mirror of registry.k8s.io.
	// kubefarm-agent writes them as containerd hosts.toml files at boot; a
	// registry without a mirror is pulled from directly.
	// +optional
	// +listType=map
	// +listMapKey=registry
	// +kubebuilder:validation:MaxItems=16
	RegistryMirrors []RegistryMirror `json:"registryMirrors,omitempty"`

	// Rollout governs how a new BootImage reaches the machines.
	// +optional
	// +kubebuilder:default={}
	Rollout RolloutStrategy `json:"rollout,omitempty"`

	// HostNetwork is how kubefarm-agent sets up the machines' links at
	// boot: bonds, VLANs, MTU, addresses derived from the boot address,
	// routes, and the node's link. A machine with a tag that has a
	// hostNetwork takes the tag's instead. Changes take effect at each
	// machine's next boot.
	// +optional
	HostNetwork *HostNetwork `json:"hostNetwork,omitempty"`

	// Host holds the host settings kubefarm-agent applies at every boot
	// (a kubefarm values file's ltsp.config): time zone, root's SSH keys and
	// password hash. Kernel modules and parameters are kernelArgs
	// (modules-load=..., read by systemd-modules-load).
	// +optional
	Host HostSettings `json:"host,omitempty"`
}

// HostSettings are a node's host settings, applied by kubefarm-agent before
// kubelet starts. Changing them takes effect at each machine's next boot.
type HostSettings struct {
	// Timezone is an IANA zone name such as Europe/Prague; empty keeps the
	// image's (UTC).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$`
	Timezone string `json:"timezone,omitempty"`

	// SSHAuthorizedKeys are written to root's authorized_keys, one line each.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=8192
	// +kubebuilder:validation:items:Pattern=`^[^\r\n]+$`
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`

	// RootPasswordHash is root's password in crypt(3) form ($id$salt$hash,
	// e.g. from `openssl passwd -6`); empty keeps the image's root entry,
	// which has no usable password. It is a hash, not the password, but anyone
	// who can read the NodePool can read it and try to crack it: prefer
	// sshAuthorizedKeys.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^\$[0-9a-z]+\$[./0-9A-Za-z$=,-]+$`
	RootPasswordHash string `json:"rootPasswordHash,omitempty"`
}

// MachineEntry is one server of a pool, as written in a kubefarm values file.
type MachineEntry struct {
	// Name becomes the node's hostname and the Machine object's name suffix.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// MACs are the machine's boot interfaces, lowercase and colon separated.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	// +kubebuilder:validation:items:MaxLength=17
	MACs []string `json:"macs"`

	// IP is the machine's static IPv4 address inside the pool's subnet.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	IP string `json:"ip"`

	// Tags name entries of spec.tags that apply to this machine.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	Tags []string `json:"tags,omitempty"`

	// Addresses give this machine's bonds or VLANs their addresses,
	// instead of the hostNetwork's addressFromBoot rules.
	// +optional
	// +listType=map
	// +listMapKey=link
	// +kubebuilder:validation:MaxItems=8
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// Power is the machine's power control, used by the rollout when
	// kubefarm-agent does not reboot the machine.
	// +optional
	Power *PowerSpec `json:"power,omitempty"`
}

// TagSpec is a named bundle of settings a machine opts into.
type TagSpec struct {
	// Labels are set on the node.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Taints are set on the node.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Taints []corev1.Taint `json:"taints,omitempty"`

	// KernelArgs are appended to the kernel command line.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	KernelArgs []string `json:"kernelArgs,omitempty"`

	// HostNetwork replaces the pool's for the machines with this tag; at
	// most one of a machine's tags may have one.
	// +optional
	HostNetwork *HostNetwork `json:"hostNetwork,omitempty"`

	// DHCPOptions are added to the machine's DHCP replies.
	// +optional
	// +listType=map
	// +listMapKey=code
	// +kubebuilder:validation:MaxItems=32
	DHCPOptions []DHCPOption `json:"dhcpOptions,omitempty"`
}

// DHCPOption is a raw DHCPv4 option.
type DHCPOption struct {
	// Code of the option. Codes that kubefarm-pxe sets itself (1, 3, 6, 12,
	// 15, 51, 53, 54, 60, 66, 67) cannot be overridden here.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=254
	// +kubebuilder:validation:XValidation:rule="!(self in [1, 3, 6, 12, 15, 51, 53, 54, 60, 66, 67])",message="is set by kubefarm-pxe and cannot be overridden"
	Code int32 `json:"code"`

	// Value is the option's payload: text, or hex bytes prefixed with 0x.
	// +required
	// +kubebuilder:validation:MaxLength=255
	Value string `json:"value"`
}

// The patterns of RegistryMirror's markers below, for the code that checks
// a mirror again where it arrives over the network (kubefarm-agent).
// TestRegistryMirrorPatterns keeps them equal to the generated CRD's.
const (
	RegistryPattern       = `^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`
	MirrorEndpointPattern = `^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?/?$`
	MaxMirrorEndpoints    = 4
)

// RegistryMirror is where a node pulls one registry's images from.
type RegistryMirror struct {
	// Registry as images name it: a host name with an optional port, such
	// as registry.k8s.io, docker.io or registry.example.com:5000.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`
	Registry string `json:"registry"`

	// Endpoints are tried in order, each an http or https URL without
	// credentials and without a path, such as http://10.28.0.1:5000. The
	// registry itself is tried after them.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:Pattern=`^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?/?$`
	Endpoints []string `json:"endpoints"`
}

// KubeletSpec configures the machines' kubelets.
type KubeletSpec struct {
	// ExtraArgs are added to the kubelet's flags.
	// +optional
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`

	// MaxPods per node; zero keeps the kubelet default.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	MaxPods int32 `json:"maxPods,omitempty"`
}

// DrainTimeoutPolicy is what happens to a machine whose drain outlasts
// spec.rollout.drainTimeout.
// +kubebuilder:validation:Enum=Halt;Skip
type DrainTimeoutPolicy string

const (
	// DrainHalt fails the machine's update: its node stays cordoned for an
	// operator to look at, and the failure counts against failureBudget.
	DrainHalt DrainTimeoutPolicy = "Halt"
	// DrainSkip gives the machine up for this pass: its node is uncordoned
	// (unless an operator had cordoned it), the history records Skipped,
	// and the machine is tried again after the pool's other machines.
	DrainSkip DrainTimeoutPolicy = "Skip"
)

// Defaults of the rollout's counts, for a strategy written without the
// API server's defaulting (the API server fills them in otherwise).
const (
	DefaultFailureBudget   = 1
	DefaultMinReadySeconds = 30
)

// RolloutStrategy governs the rolling reboot-to-update of a pool.
type RolloutStrategy struct {
	// MaxUnavailable is how many machines of the pool may be unavailable at
	// once, counting every unavailable node, not only those being updated:
	// a count, or a percentage such as 10% (rounded down, at least one).
	// A node is unavailable when it is not Ready, cordoned, missing, or its
	// machine is being updated.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a count of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// FailureDomainLabel is a node label (such as topology.kubernetes.io/zone
	// or a rack label) whose values are failure domains; with
	// maxUnavailablePerDomain set, each domain has a budget of its own as
	// well as the pool's. Machines whose node lacks the label share the
	// domain "".
	// +optional
	// +kubebuilder:validation:MaxLength=317
	FailureDomainLabel string `json:"failureDomainLabel,omitempty"`

	// MaxUnavailablePerDomain bounds the unavailable nodes of one failure
	// domain: a count, or a percentage of the domain's machines. Unset
	// means only the pool's budget applies.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a count of at least 1 or a percentage from 1% to 100%"
	MaxUnavailablePerDomain *intstr.IntOrString `json:"maxUnavailablePerDomain,omitempty"`

	// Paused stops starting new machine updates; machines in progress finish.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// MaintenanceWindows restrict when machine updates may start; machines
	// in progress finish outside them. Empty means any time.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`

	// DrainTimeout bounds the drain of one node; past it drainTimeoutPolicy
	// applies (the rollout never overrides a PodDisruptionBudget). It
	// bounds the drain of a removed machine's node too.
	// +optional
	// +kubebuilder:default="15m"
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// DrainTimeoutPolicy is Halt (the update fails) or Skip (the machine is
	// left on its image for now and tried again later). For a removed
	// machine, Halt holds its Machine while the drain goes on, and Skip
	// deletes its Node anyway, leaving the pods still on it to the
	// tenant's pod garbage collector.
	// +optional
	// +kubebuilder:default=Halt
	DrainTimeoutPolicy DrainTimeoutPolicy `json:"drainTimeoutPolicy,omitempty"`

	// PowerCycleAfter is how long the rollout waits for kubefarm-agent to
	// reboot the machine before resetting it through spec.power (machines
	// without power control wait for bootTimeout). A machine whose new boot
	// has begun (it took the boot's secret from kubefarm-pxe) is not reset:
	// bootTimeout bounds that boot.
	// +optional
	// +kubebuilder:default="3m"
	PowerCycleAfter *metav1.Duration `json:"powerCycleAfter,omitempty"`

	// BootTimeout bounds each of the phases Rebooting (until the machine
	// reports a new boot) and Verifying (until it runs the target image
	// and its node has stayed Ready for minReadySeconds); past it the
	// update fails.
	// +optional
	// +kubebuilder:default="15m"
	BootTimeout *metav1.Duration `json:"bootTimeout,omitempty"`

	// MinReadySeconds is how long a rebooted node must stay Ready before
	// its update counts as verified.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	MinReadySeconds *int32 `json:"minReadySeconds,omitempty"`

	// RebootAfterLogin asks for a machine to be rebooted into its pristine
	// image once this long has passed since an interactive login on it
	// (kubefarm-agent's RebootRequired signal; the reboot goes through this
	// rollout's budget and windows). Unset means never.
	// +optional
	RebootAfterLogin *metav1.Duration `json:"rebootAfterLogin,omitempty"`

	// BlockingPodSelector holds a machine's update before its cordon while
	// a pod of the tenant matching it (in any namespace) runs on the
	// machine's node, as kured's --blocking-pod-selector does: a batch job
	// or a database primary the node should keep until it ends. Pods that
	// ended (Succeeded, Failed) do not hold; an update already started is
	// not held. Held machines show a RolloutHeld condition naming the pods,
	// and the pool's Progressing condition names the held machines. The
	// tenant's pods are listed only while a machine waits to start; when
	// they cannot be listed every waiting machine is held (the gate fails
	// closed).
	// +optional
	BlockingPodSelector *metav1.LabelSelector `json:"blockingPodSelector,omitempty"`

	// AlertGate holds every machine update of the pool from starting while
	// alerts matching it fire in an alert source the operator configured
	// (kubefarm-manager --alert-source), as kured's --prometheus-url does.
	// Updates already started finish. When the source cannot be read every
	// waiting machine is held (the gate fails closed).
	// +optional
	AlertGate *AlertGate `json:"alertGate,omitempty"`

	// Notify posts the rollout's notifications to a webhook: before a
	// node's drain (DrainStarting), after a reboot is verified
	// (RebootVerified) and when the rollout halts (RolloutHalted). A
	// receiver that fails or hangs never holds the rollout up.
	// +optional
	Notify *RolloutNotify `json:"notify,omitempty"`

	// FailureBudget is how many machine updates may fail before the rollout
	// halts and waits for an operator.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	FailureBudget *int32 `json:"failureBudget,omitempty"`
}

// MaintenanceWindow is a recurring time span in a time zone.
type MaintenanceWindow struct {
	// Days of the week the window opens on, in timeZone; empty means every
	// day. A window that runs past midnight belongs to the day it opens.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	Days []string `json:"days,omitempty"`

	// Start is the local time of day, HH:MM, the window opens. On the day a
	// daylight-saving change skips it, the window opens at the same
	// instant a clock that did not jump would show (02:30 becomes 03:30).
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`

	// Duration the window stays open, in elapsed time (a window across a
	// daylight-saving change still lasts this long); at most 7 days.
	// +required
	Duration metav1.Duration `json:"duration"`

	// TimeZone is an IANA zone name such as Europe/Berlin.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// NodePoolStatus is what the controllers observed.
type NodePoolStatus struct {
	// Conditions: Ready, MachinesReady, AddressesClaimed (every MAC and IP
	// of the machines held by an AddressClaim for the pool), and the
	// rollout's Progressing, Paused, Halted and Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Machines is the number of machines in the pool.
	// +optional
	Machines int32 `json:"machines,omitempty"`

	// ReadyMachines is the number whose node is Ready.
	// +optional
	ReadyMachines int32 `json:"readyMachines,omitempty"`

	// UpdatedMachines is the number running spec.bootImage.
	// +optional
	UpdatedMachines int32 `json:"updatedMachines,omitempty"`

	// FailedUpdates counts machine updates that failed since the pool's
	// image last changed or an operator last retried.
	// +optional
	FailedUpdates int32 `json:"failedUpdates,omitempty"`

	// UpdatingMachines is the number of machines with an update in flight.
	// +optional
	UpdatingMachines int32 `json:"updatingMachines,omitempty"`

	// UnavailableMachines is the number the budget counts as unavailable.
	// +optional
	UnavailableMachines int32 `json:"unavailableMachines,omitempty"`

	// RolloutImage is the image (name and rootfs digest) the failure count
	// belongs to; a new one starts the count afresh.
	// +optional
	RolloutImage *ImageRef `json:"rolloutImage,omitempty"`

	// ObservedRetry is the value of the kubefarm.io/rollout-retry
	// annotation last acted on.
	// +optional
	ObservedRetry string `json:"observedRetry,omitempty"`
}

// NodePool is a group of netbooted machines that join one tenant cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=np;nps,categories=kubefarm
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.bootImage`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMachines`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedMachines`
// +kubebuilder:printcolumn:name="Machines",type=integer,JSONPath=`.status.machines`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.rollout.paused`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   NodePoolSpec   `json:"spec"`
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolList is a list of NodePools.
//
// +kubebuilder:object:root=true
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodePool `json:"items"`
}
