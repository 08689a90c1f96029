package nodeconfig

import (
	"strings"

	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// KubeletMaySet reports whether kubelet may put label key on its own Node:
// anything outside the kubernetes.io and k8s.io namespaces, and inside
// them only kubelet's own labels (kubernetes.io/hostname, topology, and the
// kubelet.kubernetes.io and node.kubernetes.io namespaces). kubelet refuses
// to start with any other such label in --node-labels, and NodeRestriction
// would refuse the update anyway.
func KubeletMaySet(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if ns == reserved || strings.HasSuffix(ns, "."+reserved) {
			return kubeletapis.IsKubeletLabel(key)
		}
	}
	return true
}
