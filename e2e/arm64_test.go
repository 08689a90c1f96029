//go:build e2e && multiarch

package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
)

// The arm64 machine of make test-arm64: its own tap and an address outside
// the join scenario's.
var arm64VM = cluster.FarmMachine{Name: "arm-e2e-1", MAC: "52:54:00:a6:00:01", IP: "10.123.0.81", Index: 8, Arch: "arm64"}

// TestARM64Join (make test-arm64, not make test: an aarch64 machine under
// TCG on the CI's two cores would take the cold run past its hour): an
// aarch64 qemu machine (virt, Cortex-A72, Debian's AAVMF UEFI firmware, a
// virtio-net NIC without option ROM) netboots from the kubefarm-pxe pod
// into the arm64 node image (make node-image-arm64, cross-built, named by
// KUBEFARM_NODE_IMAGE_ARM64) and joins a tenant installed from the local
// registry's kubefarm chart, as the join scenario's machines do:
//   - the image's BootImage says arm64, and kubefarm-pxe answered the
//     firmware's DHCP (client architecture 11) with the arm64 iPXE binary
//     (the Machine's Offered event names ipxe-arm64.efi);
//   - the Node is Ready, reports arm64 and the image's kubelet and
//     containerd; the Machine shows the boot the Node runs and the image's
//     rootfs, NetworkVerified and NodeReady, and the network taint is
//     lifted (the arm64 kubefarm-agent's verdict);
//   - a pod on it runs the image's preloaded arm64 sandbox and gets an
//     address of the Node's pod CIDR from flannel (the CNI chain, runc).
//
// The tenant's add-on images in the e2e registry are amd64 only (they
// carry the host's binaries and libraries), so the node's kube-proxy and
// Konnectivity agent pods cannot start there: the test asserts nothing of
// them. Power-on to Ready is logged for the notes.
func TestARM64Join(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		t.Fatalf("qemu-system-aarch64 is not installed: make test-arm64 installs qemu-system-arm and qemu-efi-aarch64")
	}
	if _, err := os.Stat(cluster.AAVMF); err != nil {
		t.Fatalf("the arm64 UEFI firmware: %v (Debian package qemu-efi-aarch64)", err)
	}
	imgDir := os.Getenv("KUBEFARM_NODE_IMAGE_ARM64")
	if imgDir == "" {
		t.Fatal("KUBEFARM_NODE_IMAGE_ARM64 is not set: it names the arm64 node image's folder (make test-arm64 builds it and sets it)")
	}
	ctx, cancel := scenarioContext(t, 3*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "arm64-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, cs, ns.Name) })

	img := pushARM64Image(t, ctx, c, imgDir)
	vm := &joinVM{FarmMachine: arm64VM}
	release := exampleTenantCluster(t).Name
	kubeconfig := adminKubeconfigPath()
	if _, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, release, ns.Name, chartPath("kubefarm"), arm64Values(t, img.Name, vm)); err != nil {
		t.Fatalf("helm install %s charts/kubefarm: %v", release, err)
	}
	t.Cleanup(func() { uninstallCluster(t, c, kubeconfig, release, ns.Name) })

	tc := &kubefarmv1.TenantCluster{}
	key := client.ObjectKey{Namespace: ns.Name, Name: release}
	poll(t, ctx, "the TenantCluster never became Ready", 10*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, tc); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionReady) &&
			meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionAddonsReady), nil
	})
	tenant, err := kubernetes.NewForConfig(tenantConfig(t, ctx, cs, tc))
	if err != nil {
		t.Fatal(err)
	}

	machineKey := client.ObjectKey{Namespace: ns.Name, Name: release + "-workers-" + vm.Name}
	powerOn := time.Now()
	vm.powerOn(t)
	story := func() string { return machineStory(ctx, cs, c, machineKey, powerOn) }
	var node *corev1.Node
	err = pollErr(ctx, 30*time.Minute, func(ctx context.Context) (bool, error) {
		if err := vm.exited(); err != nil {
			return false, err
		}
		n, err := tenant.CoreV1().Nodes().Get(ctx, vm.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return cluster.NodeReady(n), nil
	})
	if err != nil {
		t.Fatalf("the arm64 machine's Node never became Ready: %v%s", err, story())
	}
	t.Logf("Node %s (%s) Ready %.0f s after power-on; the boot:%s", vm.Name, vm.Firmware(), time.Since(powerOn).Seconds(), story())

	t.Run("kubefarm-pxe gave the arm64 firmware the arm64 iPXE", func(t *testing.T) {
		for _, e := range machineEvents(ctx, cs, machineKey) {
			if e.reason == "Offered" && strings.Contains(e.message, `boot file "ipxe-arm64.efi"`) {
				return
			}
		}
		t.Errorf("no Offered event of the Machine names ipxe-arm64.efi:%s", story())
	})
	t.Run("the Node reports arm64, the image's kubelet and containerd", func(t *testing.T) {
		info := node.Status.NodeInfo
		if info.Architecture != "arm64" || info.OperatingSystem != "linux" {
			t.Errorf("the Node reports %s/%s", info.OperatingSystem, info.Architecture)
		}
		if info.KubeletVersion != img.Spec.KubeletVersion {
			t.Errorf("the Node's kubelet is %s, the BootImage says %s", info.KubeletVersion, img.Spec.KubeletVersion)
		}
		if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") {
			t.Errorf("runtime %q, want containerd://", info.ContainerRuntimeVersion)
		}
	})
	t.Run("the Machine shows the boot, NetworkVerified and NodeReady; the network taint is lifted", func(t *testing.T) {
		checkMachineBoot(t, ctx, c, tenant, machineKey, vm.Name, img, story)
	})
	t.Run("a pod runs on it with an address of the Node's pod CIDR", func(t *testing.T) {
		checkARM64Pod(t, ctx, tenant, vm.Name)
	})
}

// pushARM64Image pushes the arm64 node image to the local registry and
// creates its BootImage, which must say arm64.
func pushARM64Image(t *testing.T, ctx context.Context, c client.Client, dir string) *kubefarmv1.BootImage {
	t.Helper()
	art, err := nodeimage.NewOCIArtifact(dir)
	if err != nil {
		t.Fatalf("the node image in %s: %v", dir, err)
	}
	if art.Manifest.Arch() != "arm64" {
		t.Fatalf("KUBEFARM_NODE_IMAGE_ARM64 (%s) is an %s image", dir, art.Manifest.Arch())
	}
	repo := cluster.RegistryAddr + "/kubefarm/node"
	if _, err := art.Push(ctx, repo, "e2e-arm64", []name.Option{name.Insecure}); err != nil {
		t.Fatalf("pushing the node image: %v", err)
	}
	img := art.BootImage("e2e-arm64-"+art.Manifest.Artifacts[nodeimage.Rootfs].SHA256[:12], repo)
	if img.Spec.Architecture != "arm64" {
		t.Fatalf("the BootImage says %q", img.Spec.Architecture)
	}
	if err := c.Create(ctx, img); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the BootImage: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), img) })
	return img
}

// arm64Values are the join scenario's values with one pool of the arm64
// machine: its serial console is the PL011 (ttyAMA0), and it has one NIC
// and no server network.
func arm64Values(t *testing.T, bootImage string, vm *joinVM) map[string]any {
	t.Helper()
	vals := joinValues(t, bootImage, cluster.BootIP, cluster.BootRegistryAddr, []*joinVM{vm})
	pool := vals["nodePools"].([]any)[0].(map[string]any)
	pool["kernelArgs"] = []any{"console=ttyAMA0", "systemd.log_color=0", "systemd.journald.forward_to_console=1"}
	delete(pool, "hostNetwork")
	return vals
}

// checkARM64Pod runs the preloaded sandbox image as a pod's only container
// on the node: it needs no pull (the e2e registry's images are amd64), and
// its start exercises containerd, runc and the CNI chain on arm64.
func checkARM64Pod(t *testing.T, ctx context.Context, tenant kubernetes.Interface, nodeName string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "arm64-pause", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65535),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "pause", Image: nodeimage.PauseImageRef, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := pod
	err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := tenant.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s on %s never ran with an address: %v (status %+v)", pod.Name, nodeName, err, got.Status)
	}
	node, err := tenant.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("the Node's pod CIDR %q: %v", node.Spec.PodCIDR, err)
	}
	if ip, err := netip.ParseAddr(got.Status.PodIP); err != nil || !cidr.Contains(ip) {
		t.Errorf("pod address %s is not in the Node's pod CIDR %s", got.Status.PodIP, node.Spec.PodCIDR)
	}
	t.Logf("pod %s runs on %s at %s (pod CIDR %s)", pod.Name, nodeName, got.Status.PodIP, node.Spec.PodCIDR)
}
