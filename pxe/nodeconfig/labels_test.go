package nodeconfig

import "testing"

func TestKubeletMaySet(t *testing.T) {
	for k, want := range map[string]bool{
		"zone": true, "example.com/x": true, "kubernetes.io/hostname": true, "kubelet.kubernetes.io/x": true,
		"node.kubernetes.io/exclude-from-external-load-balancers": true, "topology.kubernetes.io/region": true,
		"node-role.kubernetes.io/worker": false, "kubernetes.io/role": false, "node-restriction.kubernetes.io/x": false,
		"k8s.io/x": false, "foo.k8s.io/x": false, "notkubernetes.io/x": true,
	} {
		if got := KubeletMaySet(k); got != want {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
}
