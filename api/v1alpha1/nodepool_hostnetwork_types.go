package v1alpha1

// HostNetwork is how kubefarm-agent sets up a machine's links at boot, with
// the node image's systemd-networkd, before the kubelet starts: bonds,
// VLANs, MTU, further addresses and routes, and which link is the node's.
// The boot address (the machine's DHCP lease) stays the machine's: a bond
// that has the boot interface among its members takes that interface's MAC
// and asks kubefarm-pxe for the lease on it.
//
// A link is named in three ways: "boot" (the interface the machine booted
// from), a kernel interface name (eth1, or an alternative name such as
// enp1s0f1), or a MAC address (lowercase, colon separated).
// +kubebuilder:validation:XValidation:rule="!has(self.bonds) || !has(self.vlans) || self.vlans.all(v, !self.bonds.exists(b, b.name == v.name))",fieldPath=".vlans",message="a VLAN cannot have a bond's name",reason=FieldValueInvalid
type HostNetwork struct {
	// Bonds aggregate links into one (Linux bonding).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	Bonds []Bond `json:"bonds,omitempty"`

	// VLANs are 802.1Q links on a bond or an interface.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	VLANs []VLAN `json:"vlans,omitempty"`

	// Links set the MTU of interfaces that are not bonds or VLANs.
	// +optional
	// +listType=map
	// +listMapKey=match
	// +kubebuilder:validation:MaxItems=8
	Links []LinkSettings `json:"links,omitempty"`

	// Routes are added beside the boot network's default route.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Routes []Route `json:"routes,omitempty"`

	// NodeLink names the bond or VLAN whose first address is the node's:
	// the kubelet's --node-ip and flannel's interface, so that pods reach
	// each other over it. Empty: the link that carries the boot address.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	NodeLink string `json:"nodeLink,omitempty"`
}

// BondMode is a Linux bonding mode, by the kernel's name.
// +kubebuilder:validation:Enum=balance-rr;active-backup;balance-xor;broadcast;802.3ad;balance-tlb;balance-alb
type BondMode string

// The bonding modes; 802.3ad (LACP) needs a switch that speaks it.
const (
	BondActiveBackup BondMode = "active-backup"
	Bond8023ad       BondMode = "802.3ad"
)

// Bond is one bonded link.
// +kubebuilder:validation:XValidation:rule="!has(self.lacpRate) || self.mode == '802.3ad'",fieldPath=".lacpRate",message="lacpRate applies to mode 802.3ad only",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.transmitHashPolicy) || self.mode in ['802.3ad', 'balance-xor', 'balance-tlb', 'balance-alb']",fieldPath=".transmitHashPolicy",message="transmitHashPolicy applies to modes 802.3ad, balance-xor, balance-tlb and balance-alb",reason=FieldValueInvalid
type Bond struct {
	// Name is the bond's interface name, such as bond0.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_-]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'boot'",message="boot names the boot interface"
	Name string `json:"name"`

	// Members are the bonded links: "boot", interface names or MACs. A
	// bond with "boot" among its members carries the boot address.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=17
	// +kubebuilder:validation:items:Pattern=`^(boot|[a-z][a-z0-9_.-]{0,14}|([0-9a-f]{2}:){5}[0-9a-f]{2})$`
	Members []string `json:"members"`

	// Mode is the bonding mode. active-backup works with any switch;
	// 802.3ad (LACP) needs the switch ports in a LAG.
	// +optional
	// +kubebuilder:default=active-backup
	Mode BondMode `json:"mode,omitempty"`

	// LACPRate is how often LACP partners exchange (802.3ad only).
	// +optional
	// +kubebuilder:validation:Enum=slow;fast
	LACPRate string `json:"lacpRate,omitempty"`

	// TransmitHashPolicy chooses a member per flow.
	// +optional
	// +kubebuilder:validation:Enum=layer2;layer3+4;layer2+3;encap2+3;encap3+4
	TransmitHashPolicy string `json:"transmitHashPolicy,omitempty"`

	// MIIMonitorMilliseconds is how often each member's carrier is
	// checked; 0 turns the check off.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MIIMonitorMilliseconds *int32 `json:"miiMonitorMilliseconds,omitempty"`

	// UpDelayMilliseconds and DownDelayMilliseconds wait before a member
	// that got or lost its carrier is used or dropped; multiples of
	// miiMonitorMilliseconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=600000
	UpDelayMilliseconds int32 `json:"upDelayMilliseconds,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=600000
	DownDelayMilliseconds int32 `json:"downDelayMilliseconds,omitempty"`

	// MTU of the bond and its members; 0 keeps the kernel's (1500).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu,omitempty"`
}

// VLAN is one 802.1Q link.
// +kubebuilder:validation:XValidation:rule="!has(self.mtu) || self.mtu == 0 || self.mtu >= 576",fieldPath=".mtu",message="must be 0 or at least 576",reason=FieldValueInvalid
type VLAN struct {
	// Name is the VLAN's interface name, such as bond0.29 or data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_.-]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'boot'",message="boot names the boot interface"
	Name string `json:"name"`

	// Link is what the VLAN runs on: a bond's name, "boot", an interface
	// name or a MAC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^(boot|[a-z][a-z0-9_.-]{0,14}|([0-9a-f]{2}:){5}[0-9a-f]{2})$`
	Link string `json:"link"`

	// ID is the VLAN tag.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	ID int32 `json:"id"`

	// MTU of the VLAN; at most its link's.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu,omitempty"`

	// AddressFromBoot gives the VLAN an address derived from the machine's
	// boot address: the boot address's host part in this subnet. With
	// 10.29.0.0/16, a machine booted as 10.28.3.4 gets 10.29.3.4/16. A
	// machine's own entry (spec.machines[].addresses) wins.
	// +optional
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self) == cidr(self).masked()",message="must be an IPv4 subnet such as 10.29.0.0/16 (host bits zero)"
	AddressFromBoot string `json:"addressFromBoot,omitempty"`
}

// LinkSettings are settings of an interface matched by name or MAC.
type LinkSettings struct {
	// Match is "boot", an interface name or a MAC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^(boot|[a-z][a-z0-9_.-]{0,14}|([0-9a-f]{2}:){5}[0-9a-f]{2})$`
	Match string `json:"match"`

	// MTU of the interface.
	// +required
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu"`
}

// Route is a static route on one of the machine's links.
type Route struct {
	// To is the destination, an IPv4 CIDR.
	// +required
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 CIDR such as 10.30.0.0/16"
	To string `json:"to"`

	// Via is the gateway, on the subnet of one of the link's addresses.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	Via string `json:"via"`

	// Link is the bond, VLAN or interface the route leaves by.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Link string `json:"link"`
}

// MachineAddress is an address a machine's entry gives one of its links,
// instead of the link's addressFromBoot.
type MachineAddress struct {
	// Link is a VLAN's or bond's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Link string `json:"link"`

	// Address in CIDR form, such as 10.29.3.4/16.
	// +required
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 address with its prefix length, such as 10.29.3.4/16"
	Address string `json:"address"`
}
