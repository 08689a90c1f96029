package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DHCPLeaseSpec is one address of a NodePool's dynamic range held by one MAC.
type DHCPLeaseSpec struct {
	// Pool is the NodePool, in the same namespace, whose spec.network.dynamicRange
	// the address comes from. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	Pool string `json:"pool"`

	// MAC is the client's hardware address, lowercase and colon separated.
	// It changes when an expired lease is taken over by another client.
	// +required
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MAC string `json:"mac"`

	// IP is the leased IPv4 address. Immutable: the object's name is derived
	// from it.
	// +required
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable"
	IP string `json:"ip"`

	// ExpireTime is when the lease ends unless the client renews it. An
	// expired lease may be taken over by another MAC; until then it stays.
	// +required
	ExpireTime metav1.Time `json:"expireTime"`

	// BoundTime is when kubefarm-pxe acknowledged a REQUEST for this lease
	// (DHCPACK): the client took the address. Absent while the address is
	// only offered, and cleared whenever the lease is offered afresh after
	// it lapsed (to another MAC or to the same one) or is declined. Renewals
	// keep it, so it is when the current binding began. A catch-all pool
	// with unknownMachines Join makes a Machine for a lease that has it,
	// is unexpired and not declined.
	// +optional
	BoundTime *metav1.Time `json:"boundTime,omitempty"`

	// Declined is set when the client answered the lease with DHCPDECLINE:
	// another host on the network already uses the address. Until
	// expireTime (one lease time later) the address belongs to nobody and
	// is offered to no one, the declining client included; then it is free
	// again. Find out which host squats on it.
	// +optional
	Declined bool `json:"declined,omitempty"`

	// Hostname the client asked for (DHCP option 12), when it was a valid
	// DNS label; empty otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	Hostname string `json:"hostname,omitempty"`
}

// DHCPLease is an address of a NodePool's catch-all range (see DynamicRange)
// leased to a MAC that belongs to no Machine. kubefarm-pxe writes them; the
// replicas have no leader and agree through these objects.
//
// The object's name is `<pool>-<a>-<b>-<c>-<d>` from the pool and the IP, so
// one address of one pool maps to exactly one name, and creating the object
// is the atomic claim of the address: of two replicas creating it at once
// the API server admits one and answers AlreadyExists to the other. Taking
// over an expired lease is an update carrying the resourceVersion that was
// read, so it succeeds for one replica only. That is why pool and ip cannot
// change. The lease has an owner reference to its NodePool and is garbage
// collected with it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=dhl,categories=kubefarm
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="MAC",type=string,JSONPath=`.spec.mac`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Expires",type=string,format=date-time,JSONPath=`.spec.expireTime`
// +kubebuilder:printcolumn:name="Bound",type=string,format=date-time,JSONPath=`.spec.boundTime`,priority=1
// +kubebuilder:printcolumn:name="Declined",type=boolean,JSONPath=`.spec.declined`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DHCPLease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DHCPLeaseSpec `json:"spec"`
}

// DHCPLeaseList is a list of DHCPLeases.
//
// +kubebuilder:object:root=true
type DHCPLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DHCPLease `json:"items"`
}
