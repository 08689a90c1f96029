// Package v1alpha1 holds the kubefarm.io/v1alpha1 API: TenantCluster (a tenant
// control plane), NodePool (a group of netbooted machines joining one tenant),
// Machine (one bare-metal server, created by the NodePool controller),
// BootImage (a content-addressed kernel, initrd and root filesystem),
// DHCPLease (an address of a pool's catch-all range, held by an unknown MAC)
// and AddressClaim (the lock on one boot MAC or static IP of a Machine).
//
// +kubebuilder:object:generate=true
// +groupName=kubefarm.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "kubefarm.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	// It uses apimachinery only, so that importing the API pulls in no
	// controller machinery.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&TenantCluster{}, &TenantClusterList{},
		&NodePool{}, &NodePoolList{},
		&Machine{}, &MachineList{},
		&BootImage{}, &BootImageList{},
		&DHCPLease{}, &DHCPLeaseList{},
		&AddressClaim{}, &AddressClaimList{},
		&DiscoveredMachine{}, &DiscoveredMachineList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
