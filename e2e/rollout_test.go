//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	nodeimage "github.com/kubefarm/kubefarm/images/node"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
)

// joinVM is one qemu machine of the join scenario, started by the test
// (it dies with the test process) with the farm's own command line
// (cluster.QemuArgs): the demo's machines are the same machines. A reboot
// netboots again (no -no-reboot), which is how the rollout updates it.
type joinVM struct {
	cluster.FarmMachine
	// catchAll: the values do not list it; it boots in the pool's
	// catch-all range and joins under its MAC-derived name (Name).
	catchAll bool
	// redfish, when set, is its BMC: powered on through it, a libvirt
	// domain instead of a qemu child of the test.
	redfish *redfishBMC

	console string
	cmd     *exec.Cmd
	exit    chan error
	out     netnstest.LockedBuffer
}

func (vm *joinVM) powerOn(t *testing.T) {
	t.Helper()
	if vm.redfish != nil {
		t.Fatalf("%s is powered through its Redfish BMC (redfishPowerOn)", vm.Name)
	}
	vm.console = filepath.Join(t.TempDir(), "console-"+vm.Name+".log")
	if err := cluster.AddTap(vm.Tap(), cluster.BootBridge); err != nil {
		t.Fatal(err)
	}
	tap := vm.Tap()
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", tap).Run() })
	args := cluster.QemuArgs(vm.FarmMachine, vm.console)
	vm.cmd = exec.Command(args[0], args[1:]...)
	vm.cmd.Stdout, vm.cmd.Stderr = &vm.out, &vm.out
	// The machine dies with the test process, however it ends.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := vm.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	vm.exit = make(chan error, 1)
	go func() { vm.exit <- vm.cmd.Wait() }()
	t.Cleanup(func() {
		_ = vm.cmd.Process.Kill()
		err := <-vm.exit
		vm.exit <- err
		if t.Failed() {
			b, _ := os.ReadFile(vm.console)
			t.Logf("qemu %s (%s): %s\nlast console lines:\n%s", vm.Name, vm.Firmware(), vm.out.String(), tail(string(b), 80))
		}
	})
}

// exited is the machine's qemu exit, nil while it runs (always nil for a
// machine behind a BMC: its power is the BMC's to tell).
func (vm *joinVM) exited() error {
	if vm.redfish != nil {
		return nil
	}
	select {
	case err := <-vm.exit:
		vm.exit <- err
		return fmt.Errorf("qemu of %s exited: %v", vm.Name, err)
	default:
		return nil
	}
}

// pullPlug stops the machine at once, as the test's own act: its qemu
// killed, or its libvirt domain destroyed.
func (vm *joinVM) pullPlug(t *testing.T) {
	t.Helper()
	if vm.redfish != nil {
		vm.redfish.emu.Destroy(t)
		return
	}
	_ = vm.cmd.Process.Kill()
	vm.exit <- <-vm.exit
}

func ptrInt32(v int32) *int32 { return &v }

// variantImage makes a second node image from the built one: the same
// kernel and initrd, and the root filesystem with one more file appended
// (mksquashfs appends to an existing image), so its digest differs, as a
// rebuilt image's would. It returns the folder, manifest updated.
func variantImage(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	if err := cluster.VariantImage(dir, out); err != nil {
		t.Fatalf("the variant node image: %v", err)
	}
	return out
}

type rolloutScenario struct {
	c      client.Client
	cs     kubernetes.Interface
	tenant kubernetes.Interface
	// tenantCfg reaches the tenant's API server, for the API loop.
	tenantCfg *rest.Config
	pool      *kubefarmv1.NodePool
	vms       []*joinVM
	imgDir    string
	repo      string
	oldImage  *kubefarmv1.BootImage
	// switchImage points the pool at the named BootImage the way the
	// operator does: a helm upgrade of the cluster's release.
	switchImage func(ctx context.Context, bootImage string) error
	// cleanup registers the new BootImage's deletion: the scenario's, so
	// that the steps after the rollout may boot it too.
	cleanup func(func())
}

// testRollout switches the pool to a second BootImage and watches the
// rolling reboot-to-update on the real machines: both end on the new
// digest with new boot IDs; sampled every half second, at most one node is
// unavailable (maxUnavailable 1), the workload spread over both nodes keeps
// the Ready pod its PodDisruptionBudget asks for, and a loop of tenant API
// calls sees no failure.
//
// It returns the new BootImage's name.
func testRollout(t *testing.T, ctx context.Context, s rolloutScenario) string {
	tenant := s.tenant
	// A workload over both nodes and its budget; the tenant's scheduler,
	// ReplicaSet and disruption controllers are real.
	labels := map[string]string{"app": "spread"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrInt32(2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					TerminationGracePeriodSeconds: ptrInt64(1),
					Containers: []corev1.Container{{Name: "sleep", Image: cluster.BusyboxImage,
						Command: []string{"/bin/busybox", "sleep", "36000"}}},
				},
			},
		},
	}
	if _, err := tenant.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := tenant.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, nil
		}
		nodes := map[string]bool{}
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				nodes[pods.Items[i].Spec.NodeName] = true
			}
		}
		return len(nodes) == 2, nil
	})
	if err != nil {
		t.Fatalf("the spread workload never ran on both nodes: %v", err)
	}

	bootIDs := map[string]string{}
	before := map[string]*kubefarmv1.Machine{}
	for _, vm := range s.vms {
		n, err := tenant.CoreV1().Nodes().Get(ctx, vm.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bootIDs[vm.Name] = n.Status.NodeInfo.BootID
		m := &kubefarmv1.Machine{}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: s.pool.Name + "-" + vm.Name}, m); err != nil {
			t.Fatal(err)
		}
		before[vm.Name] = m
	}

	// The new image, pushed and verified by kubefarm-pxe before the switch.
	variant := variantImage(t, s.imgDir)
	art, err := nodeimage.NewOCIArtifact(variant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := art.Push(ctx, s.repo, "e2e-b", []name.Option{name.Insecure}); err != nil {
		t.Fatalf("pushing the second node image: %v", err)
	}
	img := art.BootImage("e2e-b-"+art.Manifest.Artifacts[nodeimage.Rootfs].SHA256[:12], s.repo)
	if err := s.c.Create(ctx, img); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the second BootImage: %v", err)
	}
	s.cleanup(func() { _ = s.c.Delete(context.Background(), img) })
	target := kubefarmv1.ImageRef{Name: img.Name, Digest: img.Spec.Rootfs.Digest}
	if target.Digest == s.oldImage.Spec.Rootfs.Digest {
		t.Fatal("the variant image has the old rootfs digest")
	}

	// From the switch to the end: the tenant API loop the tenant lifecycle
	// scenario uses, and a sampler of the nodes and the workload.
	load := startLoad(t, s.tenantCfg)
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var samples, maxUnavailable, minReady int
	minReady = 1 << 30
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			nodes, err := tenant.CoreV1().Nodes().List(sctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			pods, err := tenant.CoreV1().Pods("default").List(sctx, metav1.ListOptions{LabelSelector: "app=spread", ResourceVersion: nodes.ResourceVersion})
			if err != nil {
				continue
			}
			unavailable := 0
			for i := range nodes.Items {
				if !cluster.NodeReady(&nodes.Items[i]) || nodes.Items[i].Spec.Unschedulable {
					unavailable++
				}
			}
			ready := 0
			for i := range pods.Items {
				if podReady(&pods.Items[i]) && pods.Items[i].DeletionTimestamp == nil {
					ready++
				}
			}
			mu.Lock()
			samples++
			maxUnavailable = max(maxUnavailable, unavailable)
			minReady = min(minReady, ready)
			mu.Unlock()
		}
	}()

	switched := time.Now()
	poolKey := client.ObjectKeyFromObject(s.pool)
	p := &kubefarmv1.NodePool{}
	if err := s.switchImage(ctx, img.Name); err != nil {
		t.Fatalf("switching the pool to BootImage %s: %v", img.Name, err)
	}
	err = pollErr(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
		for _, vm := range s.vms {
			if err := vm.exited(); err != nil {
				return false, err
			}
		}
		if err := s.c.Get(ctx, poolKey, p); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, kubefarmv1.ConditionComplete)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == p.Generation &&
			p.Status.RolloutImage != nil && *p.Status.RolloutImage == target, nil
	})
	stop()
	wg.Wait()
	apiOK, apiFailures, apiErrs := load.stop()
	if err != nil {
		var story string
		for _, vm := range s.vms {
			story += machineStory(ctx, s.cs, s.c, client.ObjectKey{Namespace: s.pool.Namespace, Name: s.pool.Name + "-" + vm.Name}, switched)
		}
		t.Fatalf("the rollout did not complete: %v; pool %+v%s", err, p.Status, story)
	}
	t.Logf("rollout of %d machines took %.0f s; %d samples: at most %d node(s) unavailable, at least %d spread pod(s) Ready; %d tenant API calls succeeded, %d failed",
		len(s.vms), time.Since(switched).Seconds(), samples, maxUnavailable, minReady, apiOK, apiFailures)
	// Where each machine's update spent its time (drain, reboot, boot,
	// verification), in seconds after the switch.
	for _, vm := range s.vms {
		t.Logf("%s, seconds after the switch:%s", vm.Name, machineStory(ctx, s.cs, s.c, client.ObjectKey{Namespace: s.pool.Namespace, Name: s.pool.Name + "-" + vm.Name}, switched))
	}

	for _, vm := range s.vms {
		m := &kubefarmv1.Machine{}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: s.pool.Name + "-" + vm.Name}, m); err != nil {
			t.Fatal(err)
		}
		if m.Status.LastBoot == nil || m.Status.LastBoot.ImageDigest != target.Digest || m.Status.ServedImage == nil || *m.Status.ServedImage != target {
			t.Errorf("%s: served %v, booted %+v; want the new image %s", m.Name, m.Status.ServedImage, m.Status.LastBoot, target.Digest)
		}
		// The same Machine, at the same address, after the reboot: for the
		// catch-all machine, the name and address its MAC got at its first
		// boot survive it.
		if was := before[vm.Name]; m.UID != was.UID || m.Spec.IP != was.Spec.IP || !slices.Equal(m.Spec.MACs, was.Spec.MACs) {
			t.Errorf("%s: Machine uid %s ip %s macs %v after the rollout, %s %s %v before", m.Name, m.UID, m.Spec.IP, m.Spec.MACs,
				was.UID, was.Spec.IP, was.Spec.MACs)
		}
		if len(m.Status.History) == 0 || m.Status.History[0].Result != kubefarmv1.RolloutDone || m.Status.History[0].Image != target {
			t.Errorf("%s: history %+v, want a Done update to %s first", m.Name, m.Status.History, target.Name)
		}
		n, err := tenant.CoreV1().Nodes().Get(ctx, vm.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status.NodeInfo.BootID == bootIDs[vm.Name] || n.Status.NodeInfo.BootID != m.Status.LastBoot.BootID {
			t.Errorf("%s: the node reports boot %s (before %s), the Machine %s", vm.Name, n.Status.NodeInfo.BootID, bootIDs[vm.Name], m.Status.LastBoot.BootID)
		}
		if n.Spec.Unschedulable || !cluster.NodeReady(n) {
			t.Errorf("%s: unschedulable=%v ready=%v after the rollout", vm.Name, n.Spec.Unschedulable, cluster.NodeReady(n))
		}
	}
	if samples < 20 {
		t.Errorf("only %d samples of the nodes were taken", samples)
	}
	if maxUnavailable > 1 {
		t.Errorf("%d nodes were unavailable at once; maxUnavailable is 1", maxUnavailable)
	}
	if minReady < 1 {
		t.Errorf("the spread workload had %d Ready pods at one sample; its PodDisruptionBudget wants 1", minReady)
	}
	if apiFailures > 0 {
		t.Errorf("%d tenant API calls failed during the rollout, %d succeeded: %s", apiFailures, apiOK, strings.Join(apiErrs, "\n"))
	}
	return img.Name
}

func ptrInt64(v int64) *int64 { return &v }
