// Package v1alpha1 holds the kubefarm.io/v1alpha1 API: TenantCluster (a tenant
// control plane), NodePool (a group of netbooted machines joining one tenant),
// Machine (one bare-metal server, created by the NodePool controller) and
// BootImage (a content-addressed kernel, initrd and root filesystem).
//
// +kubebuilder:object:generate=true
// +groupName=kubefarm.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "kubefarm.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
