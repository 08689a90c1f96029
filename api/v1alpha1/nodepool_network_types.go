package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootNetwork is the IPv4 network the machines boot on.
type BootNetwork struct {
	// Subnet is the boot network in CIDR form, for example 10.28.0.0/16.
	// +required
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 CIDR such as 10.28.0.0/16"
	Subnet string `json:"subnet"`

	// Gateway is the default router handed out by DHCP.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	Gateway string `json:"gateway,omitempty"`

	// DNS servers handed out by DHCP.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="self.all(s, isIP(s) && ip(s).family() == 4)",message="must be IPv4 addresses"
	DNS []string `json:"dns,omitempty"`

	// Domain is the DNS search domain handed out by DHCP.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Domain string `json:"domain,omitempty"`

	// LeaseTime of the DHCP leases.
	// +optional
	// +kubebuilder:default="1h"
	LeaseTime *metav1.Duration `json:"leaseTime,omitempty"`

	// DynamicRange opts the pool in to a catch-all range: MACs of no
	// Machine that boot on this network get an address from it. Without it
	// kubefarm-pxe answers only the pool's machines.
	// +optional
	DynamicRange *DynamicRange `json:"dynamicRange,omitempty"`
}

// DynamicRange is a catch-all DHCP range for machines kubefarm does not know
// yet, inclusive at both ends, at most 65536 addresses, inside
// spec.network.subnet (the admission webhook checks start <= end and the
// size, which CEL cannot compare).
//
// An unknown machine gets an address from the range, the pool's network
// options (mask, gateway, DNS, domain, lease time) and the boot options (the
// boot file for its firmware). It has no Machine object; its HTTP boot
// script follows unknownMachines: Hold boots the pool's image in discovery
// mode when kubefarm-pxe runs with --discovery, and answers 404 otherwise;
// Join answers a script that waits and asks DHCP again until the NodePool
// controller has made the machine's Machine (once kubefarm-pxe has
// acknowledged its lease), which it then boots as.
//
// Leases live in the API as DHCPLease objects, so every kubefarm-pxe
// replica sees the same ones. Static machine IPs inside the range are never
// handed out; the network and broadcast addresses are skipped too.
type DynamicRange struct {
	// Start is the first address of the range.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	Start string `json:"start"`

	// End is the last address of the range, not below start.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	End string `json:"end"`

	// UnknownMachines is what becomes of a machine no Machine claims that
	// boots in this range. Hold (the default): it gets an address and, with
	// kubefarm-pxe's discovery on, boots the pool's image in discovery mode
	// and waits to be enrolled (docs/discovery.md); otherwise nothing boots.
	// Join: the NodePool controller makes a Machine for it, named
	// <pool>-<mac with dashes> with that hostname and the leased address,
	// so it boots the pool's image and joins, and keeps its name and
	// address (kubefarm's dhcp-generate-names). Join lets any host on the
	// boot network become a node of this pool: choose it only for a boot
	// network you trust (docs/security.md).
	// +optional
	// +kubebuilder:default=Hold
	UnknownMachines UnknownMachinePolicy `json:"unknownMachines,omitempty"`
}

// UnknownMachinePolicy is what a catch-all range does with a machine no
// Machine claims.
// +kubebuilder:validation:Enum=Hold;Join
type UnknownMachinePolicy string

const (
	// UnknownHold: the machine waits (discovery, then enrollment).
	UnknownHold UnknownMachinePolicy = "Hold"
	// UnknownJoin: the machine gets a Machine named from its MAC and joins.
	UnknownJoin UnknownMachinePolicy = "Join"
)
