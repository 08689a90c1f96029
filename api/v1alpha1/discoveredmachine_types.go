package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DiscoveredMachineSpec is what a machine no Machine claims reported when it
// booted in discovery mode (docs/discovery.md). kubefarm-pxe writes it from
// the agent's report; every string is bounded because the report comes from
// a host on the boot network, which kubefarm treats as hostile.
type DiscoveredMachineSpec struct {
	// MAC of the interface the machine booted from (the object's name is
	// this MAC with dashes).
	// +required
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MAC string `json:"mac"`

	// IP the machine had from the pool's catch-all range when it reported.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	IP string `json:"ip,omitempty"`

	// Pool is namespace/name of the NodePool whose range served it: the
	// pool it would join if enrolled there.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	Pool string `json:"pool,omitempty"`

	// LastSeen is when the latest report arrived (the agent reports again
	// every few minutes while it waits to be enrolled).
	// +required
	LastSeen metav1.Time `json:"lastSeen"`

	// Hardware is what the agent read on the machine.
	// +optional
	Hardware HardwareFacts `json:"hardware,omitempty"`
}

// HardwareFacts are a machine's hardware as Linux shows it (DMI, /proc,
// /sys). An empty field is one the host did not expose.
type HardwareFacts struct {
	// System is the DMI system information.
	// +optional
	System SystemFacts `json:"system,omitempty"`
	// CPU model and logical CPU count.
	// +optional
	CPU CPUFacts `json:"cpu,omitempty"`
	// MemoryBytes is the memory the kernel reports (MemTotal).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// MemoryMiB is MemoryBytes in MiB, for a printer column.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// Disks are the block devices that are whole disks (not partitions,
	// loop or ram devices).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Disks []DiskFacts `json:"disks,omitempty"`
	// NICs are the physical network interfaces.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	NICs []NICFacts `json:"nics,omitempty"`
	// BMCAddress is the BMC's IPv4 address where the host can read it
	// (the IPMI LAN configuration through /dev/ipmi0); empty otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	BMCAddress string `json:"bmcAddress,omitempty"`
}

// SystemFacts are DMI's system fields.
type SystemFacts struct {
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Vendor string `json:"vendor,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Product string `json:"product,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Serial string `json:"serial,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UUID string `json:"uuid,omitempty"`
}

// CPUFacts are the processor model and count.
type CPUFacts struct {
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`
	// Count of logical CPUs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65536
	Count int32 `json:"count,omitempty"`
}

// DiskFacts are one whole disk.
type DiskFacts struct {
	// Name of the kernel's device (sda, nvme0n1, vda).
	// +kubebuilder:validation:MaxLength=32
	Name string `json:"name"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Serial string `json:"serial,omitempty"`
	// Rotational is true for a spinning disk.
	// +optional
	Rotational bool `json:"rotational,omitempty"`
}

// NICFacts are one physical network interface.
type NICFacts struct {
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MAC string `json:"mac"`
	// Name of the interface on the discovery boot (eth0, enp1s0).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Name string `json:"name,omitempty"`
	// Driver is the kernel module bound to it (e1000e, virtio_net).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Driver string `json:"driver,omitempty"`
	// SpeedMbps is the negotiated speed; 0 when the link is down or the
	// driver does not say.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SpeedMbps int32 `json:"speedMbps,omitempty"`
	// Link is whether the interface has carrier.
	// +optional
	Link bool `json:"link,omitempty"`
}

// DiscoveredMachine is a machine that booted on a boot network kubefarm-pxe
// serves while no Machine claimed its MAC, and reported its hardware from
// discovery mode (which joins nothing). `kubectl kubefarm enroll` turns it
// into a pool entry; it goes away once a Machine has its MAC. kubefarm-pxe
// caps how many exist (--discovery-max-machines) and how fast they are
// made, so a flood of made-up MACs cannot fill etcd.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=kfdm,categories=kubefarm
// +kubebuilder:printcolumn:name="MAC",type=string,JSONPath=`.spec.mac`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Vendor",type=string,JSONPath=`.spec.hardware.system.vendor`
// +kubebuilder:printcolumn:name="Product",type=string,JSONPath=`.spec.hardware.system.product`
// +kubebuilder:printcolumn:name="Serial",type=string,JSONPath=`.spec.hardware.system.serial`
// +kubebuilder:printcolumn:name="CPUs",type=integer,JSONPath=`.spec.hardware.cpu.count`
// +kubebuilder:printcolumn:name="Memory(MiB)",type=integer,JSONPath=`.spec.hardware.memoryMiB`
// +kubebuilder:printcolumn:name="Seen",type=date,JSONPath=`.spec.lastSeen`
// +kubebuilder:printcolumn:name="BMC",type=string,JSONPath=`.spec.hardware.bmcAddress`,priority=1
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.spec.hardware.cpu.model`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DiscoveredMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DiscoveredMachineSpec `json:"spec"`
}

// DiscoveredMachineList is a list of DiscoveredMachines.
//
// +kubebuilder:object:root=true
type DiscoveredMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DiscoveredMachine `json:"items"`
}

// DiscoveredMachineName is the name of the DiscoveredMachine of a MAC
// (aa:bb:... -> aa-bb-...): one object per MAC, so that two kubefarm-pxe
// replicas recording the same machine meet on one name.
func DiscoveredMachineName(mac string) string {
	return strings.ReplaceAll(mac, ":", "-")
}
