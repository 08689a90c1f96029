//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// discoveryScenario is what TestNodeJoin hands its discovery step: the
// admin clients, the tenant, and the Helm pool whose spec the discovery
// pool copies.
type discoveryScenario struct {
	c          client.Client
	cs         kubernetes.Interface
	tenant     kubernetes.Interface
	pool       *kubefarmv1.NodePool
	kubeconfig string
	// bootImage is the BootImage the discovery pool boots: the join's
	// first, which lives as long as TestNodeJoin (the rollout's new one
	// is deleted when the rollout step ends).
	bootImage string
}

// The discovery machine: an unknown MAC, a BIOS machine (the join's
// machines' firmware), with a disk whose serial the agent must report.
const (
	discoveryMAC    = "52:54:00:7b:00:3f"
	discoveryDisk   = "KFE2EDISK0001"
	discoveryName   = "disc-e2e-3"
	discoveryPool   = "discover"
	discoveryMemMiB = 3072 // cluster.QemuArgs' -m
)

// testDiscovery is issue #29's discovery acceptance on the e2e farm: a
// plain NodePool (not Helm's, so that `kubectl kubefarm enroll` edits it)
// of the same tenant and image holds a catch-all range with
// unknownMachines: Hold, and kubefarm-pxe runs with discovery on (the e2e
// operator values). A machine whose MAC no Machine claims:
//   - gets an address from the range and boots the pool's image with
//     kubefarm.mode=discover and no boot secret: it starts no kubelet and
//     reports its hardware; the DiscoveredMachine carries the disk serial
//     and the memory qemu was given;
//   - is enrolled with the plugin's binary (`kubectl-kubefarm enroll`),
//     which appends it to the pool at its discovered address;
//   - learns it is enrolled at its next report, reboots into the pool's
//     image and joins under the name given; the DiscoveredMachine goes;
//   - the pool is deleted: the Machine's removal finalizer deletes its Node
//     from the tenant, then the Machine goes.
//
// The seconds from power-on to the report and to the Node Ready are logged
// (the discovery-to-join time).
func testDiscovery(t *testing.T, s discoveryScenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	plugin := buildPlugin(t, ctx)

	// The Helm pool as it is now (its kubelet, network and kernel
	// arguments), on the join's first image.
	workers := &kubefarmv1.NodePool{}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(s.pool), workers); err != nil {
		t.Fatal(err)
	}
	pool := &kubefarmv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: discoveryPool, Namespace: s.pool.Namespace}}
	pool.Spec = *workers.Spec.DeepCopy()
	pool.Spec.BootImage = s.bootImage
	pool.Spec.Machines = nil
	pool.Spec.Network.DynamicRange = &kubefarmv1.DynamicRange{Start: "10.123.0.230", End: "10.123.0.239",
		UnknownMachines: kubefarmv1.UnknownHold}
	if err := s.c.Create(ctx, pool); err != nil {
		t.Fatalf("creating the discovery pool %s/%s: %v", pool.Namespace, pool.Name, err)
	}
	t.Cleanup(func() { _ = s.c.Delete(context.Background(), pool) })

	vm := &joinVM{FarmMachine: cluster.FarmMachine{Name: discoveryName, MAC: discoveryMAC, Index: 2, DiskSerial: discoveryDisk}}
	powerOn := time.Now()
	vm.powerOn(t)

	dm := &kubefarmv1.DiscoveredMachine{}
	dmKey := client.ObjectKey{Name: kubefarmv1.DiscoveredMachineName(discoveryMAC)}
	err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
		if err := vm.exited(); err != nil {
			return false, err
		}
		if err := s.c.Get(ctx, dmKey, dm); err != nil {
			return false, nil
		}
		return slices.ContainsFunc(dm.Spec.Hardware.Disks, func(d kubefarmv1.DiskFacts) bool { return d.Serial == discoveryDisk }), nil
	})
	if err != nil {
		t.Fatalf("no DiscoveredMachine %s with the disk serial %s: %v (last seen: %+v)", dmKey.Name, discoveryDisk, err, dm.Spec)
	}
	t.Logf("discovered %.0f s after power-on: %s at %s in %s, %d MiB, %d CPU(s) %q, disks %+v, NICs %+v",
		time.Since(powerOn).Seconds(), dm.Spec.MAC, dm.Spec.IP, dm.Spec.Pool, dm.Spec.Hardware.MemoryMiB,
		dm.Spec.Hardware.CPU.Count, dm.Spec.Hardware.CPU.Model, dm.Spec.Hardware.Disks, dm.Spec.Hardware.NICs)
	if m := dm.Spec.Hardware.MemoryMiB; m < discoveryMemMiB*3/4 || m > discoveryMemMiB {
		t.Errorf("memoryMiB %d, want a little under the %d MiB qemu gave", m, discoveryMemMiB)
	}
	if dm.Spec.Pool != pool.Namespace+"/"+pool.Name {
		t.Errorf("spec.pool %q, want %s/%s", dm.Spec.Pool, pool.Namespace, pool.Name)
	}
	if !slices.ContainsFunc(dm.Spec.Hardware.NICs, func(n kubefarmv1.NICFacts) bool { return n.MAC == discoveryMAC && n.Link }) {
		t.Errorf("the boot NIC %s with link is not among the NICs %+v", discoveryMAC, dm.Spec.Hardware.NICs)
	}
	// Discovery joins nothing: no Node of any name but the two machines'.
	if nodes, err := s.tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil && len(nodes.Items) > 2 {
		t.Errorf("the tenant has %d Nodes while a machine is in discovery, want the 2 joined ones", len(nodes.Items))
	}

	out, err := exec.CommandContext(ctx, plugin, "--kubeconfig", s.kubeconfig, "-n", pool.Namespace,
		"enroll", dmKey.Name, "--pool", pool.Name, "--name", discoveryName).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kubefarm enroll: %v\n%s", err, out)
	}
	t.Logf("kubectl kubefarm enroll:\n%s", strings.TrimSpace(string(out)))
	enrolled := time.Now()

	err = pollErr(ctx, 12*time.Minute, func(ctx context.Context) (bool, error) {
		if err := vm.exited(); err != nil {
			return false, err
		}
		n, err := s.tenant.CoreV1().Nodes().Get(ctx, discoveryName, metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n), nil
	})
	if err != nil {
		t.Fatalf("the enrolled machine's Node %s never became Ready: %v%s", discoveryName, err,
			machineStory(ctx, s.cs, s.c, client.ObjectKey{Namespace: pool.Namespace, Name: pool.Name + "-" + discoveryName}, enrolled))
	}
	t.Logf("Node %s Ready %.0f s after the enroll, %.0f s after power-on", discoveryName,
		time.Since(enrolled).Seconds(), time.Since(powerOn).Seconds())

	err = pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.c.Get(ctx, dmKey, &kubefarmv1.DiscoveredMachine{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("DiscoveredMachine %s is still there after its machine was enrolled: %v", dmKey.Name, err)
	}
	m := &kubefarmv1.Machine{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: pool.Name + "-" + discoveryName}, m); err != nil {
		t.Fatalf("the enrolled Machine: %v", err)
	}
	if m.Spec.IP != dm.Spec.IP || !slices.Contains(m.Spec.MACs, discoveryMAC) {
		t.Errorf("enrolled Machine ip %s macs %v, want the discovered %s and %s", m.Spec.IP, m.Spec.MACs, dm.Spec.IP, discoveryMAC)
	}

	// Removal (docs/nodes.md): deleting the pool deletes its Machine
	// (garbage collection), whose finalizer cordons and drains the node and
	// deletes the Node from the tenant before the Machine goes.
	if err := s.c.Delete(ctx, pool); err != nil {
		t.Fatalf("deleting the pool: %v", err)
	}
	removed := time.Now()
	err = pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		_, nerr := s.tenant.CoreV1().Nodes().Get(ctx, discoveryName, metav1.GetOptions{})
		merr := s.c.Get(ctx, client.ObjectKeyFromObject(m), &kubefarmv1.Machine{})
		return apierrors.IsNotFound(nerr) && apierrors.IsNotFound(merr), nil
	})
	if err != nil {
		t.Fatalf("after the pool's deletion the Node %s or the Machine %s stayed: %v%s", discoveryName, m.Name, err,
			machineStory(ctx, s.cs, s.c, client.ObjectKeyFromObject(m), removed))
	}
	t.Logf("pool deleted: Node and Machine gone %.0f s later", time.Since(removed).Seconds())
}

// buildPlugin builds the kubectl plugin the way `make kubectl-plugin`
// does, into the test's folder, and returns its path.
func buildPlugin(t *testing.T, ctx context.Context) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	out := filepath.Join(t.TempDir(), "kubectl-kubefarm")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/kubectl-kubefarm")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the kubectl plugin: %v\n%s", err, b)
	}
	return out
}
