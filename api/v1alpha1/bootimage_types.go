package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Artifact is one boot file, addressed by the sha256 digest of its content.
type Artifact struct {
	// Digest of the file, sha256:<64 hex digits>. It is checked after every
	// download; a mismatch is never served.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	Digest string `json:"digest"`

	// URL to download the file from when the image has no OCI repository.
	// It must not carry credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="must be an http or https URL"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="must not carry credentials; use a registry secret instead"
	URL string `json:"url,omitempty"`
}

// CNIChain describes the CNI configuration baked into the image.
type CNIChain struct {
	// Plugins in the order of the image's combined conflist.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Plugins []string `json:"plugins,omitempty"`

	// ConflistDigest is the sha256 of the combined conflist file.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	ConflistDigest string `json:"conflistDigest,omitempty"`
}

// BootImageSpec is a content-addressed node image. It is immutable: a running
// node's image can never change under it; publish a new BootImage instead.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a BootImage is immutable; create a new one"
// +kubebuilder:validation:XValidation:rule="has(self.repository) || (has(self.kernel.url) && has(self.initrd.url) && has(self.rootfs.url))",message="either spec.repository or a url for kernel, initrd and rootfs is required"
type BootImageSpec struct {
	// Repository is an OCI repository, such as registry.example.com/kubefarm/node,
	// whose blobs hold the artifacts; they are fetched by digest.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+$`
	Repository string `json:"repository,omitempty"`

	// Architecture of the image.
	// +optional
	// +kubebuilder:default=amd64
	// +kubebuilder:validation:Enum=amd64;arm64
	Architecture string `json:"architecture,omitempty"`

	// Kernel is the Linux kernel.
	// +required
	Kernel Artifact `json:"kernel"`
	// Initrd is the initial ramdisk that fetches and mounts the root filesystem.
	// +required
	Initrd Artifact `json:"initrd"`
	// Rootfs is the squashfs root filesystem.
	// +required
	Rootfs Artifact `json:"rootfs"`

	// KubeletVersion baked into the image, such as v1.34.4.
	// +required
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	KubeletVersion string `json:"kubeletVersion"`

	// CNI is the CNI chain baked into the image.
	// +optional
	CNI CNIChain `json:"cni,omitempty"`
}

// BootImageStatus is what kubefarm-pxe observed about the artifacts.
type BootImageStatus struct {
	// Conditions: Ready, ArtifactsVerified.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BootImage is a kernel, initrd and squashfs root, each addressed by digest.
// Cluster-scoped: one image serves every tenant that names it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bi;bis,categories=kubefarm
// +kubebuilder:printcolumn:name="Arch",type=string,JSONPath=`.spec.architecture`
// +kubebuilder:printcolumn:name="Kubelet",type=string,JSONPath=`.spec.kubeletVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Rootfs",type=string,JSONPath=`.spec.rootfs.digest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BootImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   BootImageSpec   `json:"spec"`
	Status BootImageStatus `json:"status,omitempty"`
}

// BootImageList is a list of BootImages.
//
// +kubebuilder:object:root=true
type BootImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BootImage `json:"items"`
}
