package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressKind is what an AddressClaim holds: a boot MAC or a static IPv4
// address.
// +kubebuilder:validation:Enum=MAC;IPv4
type AddressKind string

const (
	AddressMAC  AddressKind = "MAC"
	AddressIPv4 AddressKind = "IPv4"
)

// AddressClaimName is the one name of the claim of an address: mac- and the
// MAC's six bytes joined by dashes (mac-52-54-00-de-00-01), or ip- and the
// dotted quad's four numbers (ip-10-123-0-11). The address must be in the
// API's form (lowercase MAC with colons, IPv4 without leading zeros), which
// the CRDs of Machine and NodePool enforce; the claim's CRD checks that its
// name is this function of its spec.
func AddressClaimName(kind AddressKind, address string) string {
	if kind == AddressMAC {
		return "mac-" + strings.ReplaceAll(address, ":", "-")
	}
	return "ip-" + strings.ReplaceAll(address, ".", "-")
}

// AddressHolder names the Machine an address is claimed for. The claim is
// cluster-scoped and its holder namespaced, so no owner reference can tie
// them (garbage collection ignores a namespaced owner of a cluster-scoped
// object): whoever releases the Machine deletes its claims, the NodePool
// controller for its pools' machines.
type AddressHolder struct {
	// Namespace of the Machine and of its NodePool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// Pool is the NodePool the Machine belongs to (its spec.pool).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`

	// Machine is the name of the Machine object, which may not exist yet:
	// the claim is made before the Machine is created.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Machine string `json:"machine"`
}

// String is namespace/pool/machine, as events and rejections name a holder.
func (h AddressHolder) String() string {
	return "Machine " + h.Namespace + "/" + h.Machine + " of NodePool " + h.Pool
}

// HolderOf is the holder a Machine's claims must name.
func HolderOf(m *Machine) AddressHolder {
	return AddressHolder{Namespace: m.Namespace, Pool: m.Spec.Pool, Machine: m.Name}
}

// AddressClaimSpec is one address and the Machine that holds it.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'MAC' || self.address.matches('^([0-9a-f]{2}:){5}[0-9a-f]{2}$')",message="a MAC is six lowercase hex bytes separated by colons",fieldPath=".address",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.kind != 'IPv4' || (isIP(self.address) && ip(self.address).family() == 4 && ip.isCanonical(self.address))",message="an IPv4 address is a dotted quad without leading zeros",fieldPath=".address",reason=FieldValueInvalid
type AddressClaimSpec struct {
	// Kind of the address.
	// +required
	Kind AddressKind `json:"kind"`

	// Address is the MAC (lowercase, colon separated) or the IPv4 address.
	// +required
	// +kubebuilder:validation:MaxLength=17
	Address string `json:"address"`

	// Holder is the Machine the address is claimed for.
	// +required
	Holder AddressHolder `json:"holder"`
}

// AddressClaim is the admin cluster's lock on one boot MAC or one static IPv4
// address: at most one Machine may use an address, and it is the one the
// address's claim names (docs/addresses.md).
//
// The name is a function of the address (AddressClaimName), so one address
// has exactly one possible claim, and creating it is the atomic step: of two
// writers creating the claim at once, the API server admits one and answers
// AlreadyExists to the other, whatever caches either read. The NodePool
// controller claims every address of a Machine before it creates or
// readdresses the Machine, and kubefarm-manager's Machine admission webhook
// refuses a Machine whose addresses are not claimed for it, reading the
// claims from the API server. The spec cannot change: moving an address to
// another Machine is a delete and a create, so it too goes through the
// atomic create.
//
// IPv4 claims are global to the admin cluster, not scoped to a pool's
// subnet: kubefarm-pxe recognises a machine's HTTP boot requests by their
// source address alone, across every pool it serves, so two pools with one
// address on separate networks would still be one address to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=adc,categories=kubefarm
// +kubebuilder:selectablefield:JSONPath=`.spec.holder.namespace`
// +kubebuilder:selectablefield:JSONPath=`.spec.holder.pool`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.kind`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.holder.namespace`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.holder.pool`
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.spec.holder.machine`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == (self.spec.kind == 'MAC' ? 'mac-' + self.spec.address.replace(':', '-') : 'ip-' + self.spec.address.replace('.', '-'))",message="metadata.name must be mac-<the MAC with dashes> or ip-<the IPv4 address with dashes>",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable: delete the claim and create another",reason=FieldValueForbidden
type AddressClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AddressClaimSpec `json:"spec"`
}

// AddressClaimList is a list of AddressClaims.
//
// +kubebuilder:object:root=true
type AddressClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressClaim `json:"items"`
}
