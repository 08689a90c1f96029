package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachineSpec is a machine's identity and the image it should run. The
// NodePool controller writes it from the pool's entry; people do not.
type MachineSpec struct {
	// Pool is the NodePool, in the same namespace, the machine belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	Pool string `json:"pool"`

	// Cluster is the TenantCluster the machine joins. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	Cluster string `json:"cluster"`

	// Hostname of the node.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Hostname string `json:"hostname"`

	// MACs are the machine's boot interfaces.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MACs []string `json:"macs"`

	// IP is the machine's static IPv4 address.
	// +required
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	IP string `json:"ip"`

	// Tags applied to this machine, resolved from the pool.
	// +optional
	// +listType=set
	Tags []string `json:"tags,omitempty"`

	// DesiredImage is the BootImage the pool wants this machine to run. The
	// image actually served at next boot is status.servedImage, which only
	// the rollout controller moves.
	// +required
	// +kubebuilder:validation:MinLength=1
	DesiredImage string `json:"desiredImage"`

	// Power is how the rollout controller power-cycles the machine when
	// kubefarm-agent does not reboot it, from the pool's entry.
	// +optional
	Power *PowerSpec `json:"power,omitempty"`
}

// PowerDriver names a way to control a machine's power.
// +kubebuilder:validation:Enum=qmp;ipmi;redfish
type PowerDriver string

const (
	// PowerQMP is QEMU's machine protocol: the test farm's qemu machines,
	// and any lab of virtual machines.
	PowerQMP PowerDriver = "qmp"
	// PowerIPMI is IPMI v2.0 over LAN (lanplus) to the server's BMC.
	PowerIPMI PowerDriver = "ipmi"
	// PowerRedfish is the DMTF Redfish API of the server's BMC, over HTTPS.
	PowerRedfish PowerDriver = "redfish"
)

// PowerSpec is a machine's power control.
// +kubebuilder:validation:XValidation:rule="self.driver != 'qmp' || self.address.matches('^(tcp://[a-zA-Z0-9.-]+:[0-9]{1,5}|unix:///[^[:space:]]+)$')",message="a qmp address is tcp://host:port or unix:///path"
// +kubebuilder:validation:XValidation:rule="self.driver != 'ipmi' || self.address.matches('^[a-zA-Z0-9.-]+(:[0-9]{1,5})?$')",message="an ipmi address is host or host:port (UDP, 623 when absent)"
// +kubebuilder:validation:XValidation:rule="self.driver != 'redfish' || self.address.matches('^https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/redfish/v1/Systems/[a-zA-Z0-9._-]+)?$')",message="a redfish address is https://host[:port], optionally with /redfish/v1/Systems/<id>"
// +kubebuilder:validation:XValidation:rule="self.driver == 'qmp' ? !has(self.credentialsSecret) : has(self.credentialsSecret)",message="credentialsSecret is required for ipmi and redfish, and not used by qmp"
// +kubebuilder:validation:XValidation:rule="self.driver == 'redfish' || (!has(self.caSecret) && !has(self.insecureSkipVerify))",message="caSecret and insecureSkipVerify are for redfish"
// +kubebuilder:validation:XValidation:rule="!has(self.caSecret) || !has(self.insecureSkipVerify) || !self.insecureSkipVerify",message="caSecret and insecureSkipVerify: true contradict each other"
// +kubebuilder:validation:XValidation:rule="self.driver != 'redfish' || !self.address.startsWith('http://') || (has(self.insecureSkipVerify) && self.insecureSkipVerify)",message="a plain http:// redfish address sends the BMC password in clear: it needs insecureSkipVerify: true"
type PowerSpec struct {
	// Driver of the power control.
	// +required
	Driver PowerDriver `json:"driver"`

	// Address of the control endpoint as the manager reaches it: for qmp,
	// tcp://host:port or unix:///path of the QMP socket; for ipmi, the
	// BMC's host or host:port (UDP, 623 by default); for redfish, the
	// BMC's https://host[:port], optionally with the path of the one
	// ComputerSystem to drive (/redfish/v1/Systems/<id>; without it the
	// BMC must have exactly one).
	// +required
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(tcp://[a-zA-Z0-9.-]+:[0-9]{1,5}|unix:///[^\s]+|https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/redfish/v1/Systems/[a-zA-Z0-9._-]+)?|[a-zA-Z0-9.-]+(:[0-9]{1,5})?)$`
	Address string `json:"address"`

	// CredentialsSecret names a Secret in the Machine's namespace holding
	// the BMC's "username" and "password" (ipmi and redfish; required
	// there). The manager reads it when it drives the BMC; it is never
	// copied into status, events or logs.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// CASecret names a Secret in the Machine's namespace whose "ca.crt"
	// (PEM) verifies the Redfish BMC's certificate, for BMCs whose
	// certificate the system roots do not sign (most). Without it and
	// without insecureSkipVerify the system roots verify it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	CASecret string `json:"caSecret,omitempty"`

	// InsecureSkipVerify makes the redfish driver accept any certificate
	// from the BMC (and is required for a plain http:// address): anyone
	// on the path to the BMC can then read its password. An explicit
	// choice, shown in the Warning event of every power operation.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// PowerState is a machine's power as its power control reports it.
// +kubebuilder:validation:Enum=On;Off;Unknown
type PowerState string

const (
	PowerOn      PowerState = "On"
	PowerOff     PowerState = "Off"
	PowerUnknown PowerState = "Unknown"
)

// MachinePowerStatus is what the manager last read from the machine's power
// control. A failed read keeps the state Unknown and says why in the
// PowerControl condition (the BMC's own words).
type MachinePowerStatus struct {
	// State the control reported.
	State PowerState `json:"state"`
	// ReadTime is when it was read.
	ReadTime metav1.Time `json:"readTime"`
	// LastOperation is the latest power operation people asked for through
	// the kubefarm.io/power-request annotation (`kubectl kubefarm power`)
	// and where it is: "<On|Off|Cycle>[,NetbootOnce] <Pending|Succeeded|
	// Failed|Interrupted>". Only the manager's machinepower controller writes it;
	// the rollout's resets are in status.rollout.powerCycleTime.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastOperation string `json:"lastOperation,omitempty"`
	// LastOperationTime is the request's time (the annotation's), which
	// tells a handled request from a new one.
	// +optional
	LastOperationTime *metav1.Time `json:"lastOperationTime,omitempty"`
}

// ImageRef pins a BootImage by name and the digest of its root filesystem.
type ImageRef struct {
	// Name of the BootImage.
	Name string `json:"name"`
	// Digest of the BootImage's root filesystem, sha256:<hex>.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	Digest string `json:"digest"`
}

// BootRecord is what a machine reported after it booted.
type BootRecord struct {
	// BootID is the kernel's boot ID (/proc/sys/kernel/random/boot_id).
	BootID string `json:"bootID"`
	// ImageDigest is the root filesystem digest the machine booted.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	ImageDigest string `json:"imageDigest"`
	// Time the report arrived.
	Time metav1.Time `json:"time"`
}

// BootCredential names the per-boot secret of a machine's current boot by
// its hash.
type BootCredential struct {
	// SHA256 of the secret: sha256:<64 hex>.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
	// Issued is when kubefarm-pxe handed the secret to the booting machine.
	Issued metav1.Time `json:"issued"`
}

// RolloutPhase is a step of a machine's reboot-to-update. Each is written
// to the Machine's status before its side effect (see MachineRollout).
// +kubebuilder:validation:Enum=Cordoning;Draining;Rebooting;Verifying;Uncordoning;Done;Failed;Skipped
type RolloutPhase string

const (
	// RolloutCordoning: the node is being marked unschedulable; whether it
	// already was is recorded with the phase (wasCordoned).
	RolloutCordoning RolloutPhase = "Cordoning"
	// RolloutDraining: pods are being evicted through the Eviction API.
	RolloutDraining RolloutPhase = "Draining"
	// RolloutRebooting: written in the same status write that moves
	// status.servedImage to the target, so the image flip and the phase
	// cannot part; kubefarm-agent reboots when it sees this phase for its
	// boot ID, and past spec.rollout.powerCycleAfter the power driver
	// resets the machine.
	RolloutRebooting RolloutPhase = "Rebooting"
	// RolloutVerifying: the machine reported a new boot; it must report
	// the target digest and its node stay Ready for minReadySeconds.
	RolloutVerifying RolloutPhase = "Verifying"
	// RolloutUncordoning: verified; the node is made schedulable again
	// unless an operator had cordoned it.
	RolloutUncordoning RolloutPhase = "Uncordoning"
	// RolloutDone, RolloutFailed and RolloutSkipped end an update; they
	// appear in status.history.
	RolloutDone    RolloutPhase = "Done"
	RolloutFailed  RolloutPhase = "Failed"
	RolloutSkipped RolloutPhase = "Skipped"
)

// RolloutReason is why a machine is updated.
// +kubebuilder:validation:Enum=ImageChanged;RebootRequired
type RolloutReason string

const (
	// RolloutForImage: the pool names another image than the one served.
	RolloutForImage RolloutReason = "ImageChanged"
	// RolloutForReboot: the machine asked to be rebooted into its pristine
	// image (its RebootRequired condition).
	RolloutForReboot RolloutReason = "RebootRequired"
)

// MachineRollout is the machine's place in an update. Each phase is written
// before its side effect so a restarted controller resumes where it was.
type MachineRollout struct {
	// Phase the update is in.
	Phase RolloutPhase `json:"phase"`
	// Reason the machine is updated.
	// +optional
	Reason RolloutReason `json:"reason,omitempty"`
	// TargetImage is the image this update moves the machine to.
	TargetImage ImageRef `json:"targetImage"`
	// PhaseStartTime is when the current phase began; phase timeouts count from it.
	PhaseStartTime metav1.Time `json:"phaseStartTime"`
	// WasCordoned records that the node was already cordoned before the
	// update, so it is left cordoned afterwards.
	// +optional
	WasCordoned bool `json:"wasCordoned,omitempty"`
	// PreviousBootID is the boot ID before the reboot; a new one proves the reboot.
	// +optional
	PreviousBootID string `json:"previousBootID,omitempty"`
	// StartTime is when the update began; the phase durations and the
	// total are measured from the phase start times.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// PowerCycleTime is when the power driver reset the machine, recorded
	// before the reset, so that a restarted manager does not reset it again.
	// +optional
	PowerCycleTime *metav1.Time `json:"powerCycleTime,omitempty"`
	// Result is what Uncordoning ends the update with: Done, or Skipped
	// after a drain timeout with the Skip policy. Recorded with the phase,
	// so a restarted manager finishes the same way.
	// +optional
	Result RolloutPhase `json:"result,omitempty"`
	// ReadySince is when the rebooted node was first seen Ready on the
	// target image without interruption; Verifying ends minReadySeconds
	// after it.
	// +optional
	ReadySince *metav1.Time `json:"readySince,omitempty"`
	// Message explains the phase, or the failure.
	// +optional
	Message string `json:"message,omitempty"`
}

// RolloutHistoryEntry records one finished update.
type RolloutHistoryEntry struct {
	// Image the update moved to.
	Image ImageRef `json:"image"`
	// Result is Done, Failed or Skipped.
	Result RolloutPhase `json:"result"`
	// Reason the update was made.
	// +optional
	Reason RolloutReason `json:"reason,omitempty"`
	// FinishTime of the update.
	FinishTime metav1.Time `json:"finishTime"`
	// Message about the outcome.
	// +optional
	Message string `json:"message,omitempty"`
}

// MachineStatus is what the controllers and the machine itself reported.
type MachineStatus struct {
	// Conditions: NodeReady (kubefarm-manager, from the Node), PowerControl
	// and Removing (kubefarm-manager's power and removal controllers),
	// RolloutHeld (the rollout's gates), and NetworkVerified and
	// RebootRequired (kubefarm-pxe, from the agent's report and heartbeat).
	// A Machine has no aggregate Ready condition yet; Booted and UpToDate
	// are reserved names.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ServedImage is the image kubefarm-pxe serves at the machine's next boot.
	// It changes only when the rollout controller flips it, so a machine that
	// reboots out of turn comes back on the image it ran.
	// +optional
	ServedImage *ImageRef `json:"servedImage,omitempty"`

	// LastBoot is what the machine reported after its latest boot.
	// +optional
	LastBoot *BootRecord `json:"lastBoot,omitempty"`

	// BootCredential is what kubefarm-pxe keeps of the secret it handed the
	// machine's current boot (docs/security.md): its hash, never the secret.
	// Written by kubefarm-pxe when the booting machine takes the secret, and
	// read by every replica to check that boot's reports and heartbeats.
	// +optional
	BootCredential *BootCredential `json:"bootCredential,omitempty"`

	// Rollout is the update in progress, if any.
	// +optional
	Rollout *MachineRollout `json:"rollout,omitempty"`

	// Power is the machine's power state as its power control last
	// reported it (spec.power; none without it), read every few minutes
	// with jitter and after each power operation.
	// +optional
	Power *MachinePowerStatus `json:"power,omitempty"`

	// History of finished updates, newest first, at most ten.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	History []RolloutHistoryEntry `json:"history,omitempty"`
}

// Machine is one bare-metal server of a NodePool. The NodePool controller
// creates one per pool entry; per-machine status keeps writes small and
// uncontended at thousands of machines.
//
// kubectl get shows Ready from the NodeReady condition (a Machine has no
// Ready condition of its own: its node's is what an operator asks for) and
// Booted from status.lastBoot.time; MachineConditionTypes lists the
// conditions a column may name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kfm,categories=kubefarm
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.servedImage.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="NodeReady")].status`
// +kubebuilder:printcolumn:name="Booted",type=date,JSONPath=`.status.lastBoot.time`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.power.state`,priority=1
// +kubebuilder:printcolumn:name="MAC",type=string,JSONPath=`.spec.macs[0]`,priority=1
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.spec.desiredImage`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   MachineSpec   `json:"spec"`
	Status MachineStatus `json:"status,omitempty"`
}

// MachineList is a list of Machines.
//
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}
