//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// adminKubeconfigPath is the admin cluster's kubeconfig: the one `make
// e2e-up` wrote, or KUBEFARM_E2E_KUBECONFIG.
func adminKubeconfigPath() string {
	if path := os.Getenv("KUBEFARM_E2E_KUBECONFIG"); path != "" {
		return path
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "_build", "e2e", "kubeconfig", "admin.kubeconfig")
}

// chartPath is charts/<name> of this repository as the cluster's bring-up
// pushed it to the local registry: the scenarios install from there (oci://).
func chartPath(name string) string {
	return cluster.ChartRef(name)
}

// joinValues is the kubefarm values file of the join scenario's tenant: the
// shape an operator keeps in git (kubernetes, nodePools with a dnsmasq
// range and comma-separated MACs, tags.dhcpOptions.all), plus kubefarm's
// own bootImage, rollout and registryMirrors. The control plane is the
// example TenantCluster's, one replica of each: the qemu machines take
// this small host's cores.
func joinValues(t *testing.T, bootImage, serverIP, mirror string, vms []*joinVM) map[string]any {
	t.Helper()
	ex := exampleTenantCluster(t)
	var nodes []any
	for _, vm := range vms {
		if vm.catchAll {
			continue
		}
		n := map[string]any{"name": vm.Name, "mac": vm.MAC, "ip": vm.IP}
		if vm.redfish != nil {
			n["power"] = vm.redfish.powerValues()
		}
		nodes = append(nodes, n)
	}
	return map[string]any{
		"kubernetes": map[string]any{
			"version":   ex.Spec.Version,
			"apiServer": map[string]any{"replicas": 1, "service": map[string]any{"type": "NodePort"}},
			"etcd":      map[string]any{"replicas": 1},
			// The e2e node's storage is small.
			"persistence": map[string]any{"size": "1Gi"},
			"network": map[string]any{
				"serviceCIDR": ex.Spec.Network.ServiceCIDR, "podCIDR": ex.Spec.Network.PodCIDR,
				"clusterDomain": ex.Spec.Network.ClusterDomain,
			},
			"podSecurity":         map[string]any{"enforce": string(ex.Spec.PodSecurity.Enforce)},
			"volumeReclaimPolicy": "Delete",
		},
		"bootImage": bootImage,
		// One machine at a time; a rebooted node must stay Ready 10 s.
		"rollout": map[string]any{"maxUnavailable": 1, "minReadySeconds": 10, "failureBudget": 0},
		"registryMirrors": []any{
			map[string]any{"registry": "registry.k8s.io", "endpoints": []any{"http://" + mirror}},
			map[string]any{"registry": "docker.io", "endpoints": []any{"http://" + mirror}},
		},
		"nodePools": []any{map[string]any{
			"name": "workers",
			// kubefarm's catchall example's range: an unlisted machine
			// booting in it joins under its MAC-derived name.
			"range":     joinCatchAllStart + "," + joinCatchAllEnd + ",255.255.255.0,12h",
			"extraOpts": []any{map[string]any{"dhcp-generate-names": "tag:?"}, map[string]any{"dhcp-ignore-names": "tag:?"}},
			// The console on the serial port (the test's console log), with
			// journald's copy: what an operator's serial-over-LAN shows.
			// The IPVS modules, for kube-proxy's ipvs mode (docs/kube-proxy.md).
			"kernelArgs": []any{"console=ttyS0", "systemd.log_color=0", "systemd.journald.forward_to_console=1",
				"modules-load=ip_vs,ip_vs_rr,ip_vs_wrr,ip_vs_sh"},
			"nodes": nodes,
			// Bond, MTU 9000 and the data VLAN the nodes use (issue #32).
			"hostNetwork": joinHostNetwork(),
		}},
		// dns-server: CoreDNS forwards what is not cluster.local to the
		// node's resolv.conf, and exits at start when it names no server.
		"tags": map[string]any{"dhcpOptions": map[string]any{"all": map[string]any{"router": serverIP, "dns-server": serverIP}}},
	}
}

// upgradeChangesOnly runs `helm upgrade` of the cluster's release with
// bootImage changed and checks that it changed that and nothing else: the
// TenantCluster's spec and generation are as they were, and the NodePool's
// spec differs only in bootImage.
func upgradeChangesOnly(ctx context.Context, t *testing.T, c client.Client, kubeconfig, release, namespace string, vals map[string]any, bootImage string) error {
	t.Helper()
	tcKey := client.ObjectKey{Namespace: namespace, Name: release}
	poolKey := client.ObjectKey{Namespace: namespace, Name: release + "-workers"}
	tcBefore, poolBefore := &kubefarmv1.TenantCluster{}, &kubefarmv1.NodePool{}
	if err := c.Get(ctx, tcKey, tcBefore); err != nil {
		return err
	}
	if err := c.Get(ctx, poolKey, poolBefore); err != nil {
		return err
	}
	next := maps.Clone(vals)
	next["bootImage"] = bootImage
	if _, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, release, namespace, chartPath("kubefarm"), next); err != nil {
		return fmt.Errorf("helm upgrade %s: %w", release, err)
	}
	tcAfter, poolAfter := &kubefarmv1.TenantCluster{}, &kubefarmv1.NodePool{}
	if err := c.Get(ctx, tcKey, tcAfter); err != nil {
		return err
	}
	if err := c.Get(ctx, poolKey, poolAfter); err != nil {
		return err
	}
	if tcAfter.Generation != tcBefore.Generation || !reflect.DeepEqual(tcAfter.Spec, tcBefore.Spec) {
		t.Errorf("helm upgrade changed the TenantCluster (generation %d to %d): only the pool's image changed in the values",
			tcBefore.Generation, tcAfter.Generation)
	}
	if poolAfter.Spec.BootImage != bootImage {
		t.Errorf("after helm upgrade the NodePool boots %s, want %s", poolAfter.Spec.BootImage, bootImage)
	}
	want := poolBefore.Spec.DeepCopy()
	want.BootImage = bootImage
	if !reflect.DeepEqual(poolAfter.Spec, *want) || poolAfter.Generation != poolBefore.Generation+1 {
		t.Errorf("helm upgrade changed more of the NodePool than spec.bootImage (generation %d to %d):\nbefore %+v\nafter  %+v",
			poolBefore.Generation, poolAfter.Generation, poolBefore.Spec, poolAfter.Spec)
	}
	return nil
}

// dumpForArgoDiff writes the release's manifest (desired.yaml) and the
// live objects it made, as the API server returns them after the
// controllers have run (live.yaml), into KUBEFARM_ARGO_DIFF_DIR (default
// _build/e2e-argodiff), for examples/argocd/healthtest/livediff, which
// diffs them with ArgoCD's own code after the e2e tests (make e2e).
func dumpForArgoDiff(ctx context.Context, t *testing.T, c client.Client, kubeconfig, release, namespace string) {
	t.Helper()
	dir := os.Getenv("KUBEFARM_ARGO_DIFF_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "_build", "e2e-argodiff")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest, err := cluster.HelmManifest(kubeconfig, release, namespace)
	if err != nil {
		t.Fatalf("helm get manifest %s: %v", release, err)
	}
	var live bytes.Buffer
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the release manifest: %v", err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("the release manifest: %v", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetNamespace() == "" {
			obj.SetNamespace(namespace)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatalf("the live %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		b, err := yaml.Marshal(got.Object)
		if err != nil {
			t.Fatal(err)
		}
		live.WriteString("---\n")
		live.Write(b)
		n++
	}
	if err := os.WriteFile(filepath.Join(dir, "desired.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "live.yaml"), live.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote the release manifest and %d live objects to %s for the ArgoCD diff", n, dir)
}

// uninstallCluster runs `helm uninstall` of the cluster's release and checks
// that nothing of it is left: no TenantCluster, NodePool or Machine in the
// namespace.
func uninstallCluster(t *testing.T, c client.Client, kubeconfig, release, namespace string) {
	t.Helper()
	if err := cluster.HelmUninstall(kubeconfig, release, namespace); err != nil {
		t.Errorf("helm uninstall %s: %v", release, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var left []string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		left = nil
		for _, list := range []client.ObjectList{&kubefarmv1.TenantClusterList{}, &kubefarmv1.NodePoolList{}, &kubefarmv1.MachineList{}} {
			if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil && !apierrors.IsNotFound(err) {
				return false, nil
			}
			for _, o := range itemsOf(list) {
				left = append(left, fmt.Sprintf("%T %s", o, o.GetName()))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("after helm uninstall %s these are left: %v", release, left)
	}
}

func itemsOf(list client.ObjectList) []client.Object {
	var out []client.Object
	switch l := list.(type) {
	case *kubefarmv1.TenantClusterList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *kubefarmv1.NodePoolList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *kubefarmv1.MachineList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}
