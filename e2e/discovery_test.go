//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/internal/testing/ipmisim"
	"github.com/kubefarm/kubefarm/power"
)

// discoveryScenario is what TestNodeJoin hands its discovery step: the
// admin clients, the tenant, and the Helm pool whose spec the discovery
// pool copies.
type discoveryScenario struct {
	c          client.Client
	cs         kubernetes.Interface
	tenant     kubernetes.Interface
	tenantCfg  *rest.Config
	pool       *kubefarmv1.NodePool
	kubeconfig string
	// bootImage is the BootImage the discovery pool boots first (the
	// join's first), nextImage the one its rollout moves it to (the
	// join's rollout's); both live as long as TestNodeJoin.
	bootImage, nextImage string
}

// The discovery machine: an unknown MAC, a BIOS machine (the join's
// machines' firmware), with a disk whose serial the agent must report.
const (
	discoveryMAC  = "52:54:00:7b:00:3f"
	discoveryDisk = "KFE2EDISK0001"
	discoveryName = "disc-e2e-3"
	// discoveryPool sorts before the join's pool (cluster1-workers), whose
	// range joins unknown machines: of two pools whose ranges serve one
	// network, kubefarm-pxe gives an unknown MAC an address of the first
	// by namespace/name (docs/dhcp.md), and this machine must be
	// held for discovery, not joined.
	discoveryPool   = "arrivals"
	discoveryMemMiB = cluster.QemuMemoryMiB
	// discoveryCycleAfter is the discovery pool's powerCycleAfter: how
	// long its rollout waits for the hung agent before the BMC cycles the
	// machine (the default 3 minutes would only make the test longer).
	discoveryCycleAfter = 20 * time.Second
)

// testDiscovery is issue #29's discovery, power and removal acceptance on
// the e2e farm: a plain NodePool (not Helm's, so that `kubectl kubefarm
// enroll` edits it) of the same tenant and image holds a catch-all range
// with unknownMachines: Hold, and kubefarm-pxe runs with discovery on (the
// e2e operator values). A machine whose MAC no Machine claims, behind an
// IPMI BMC (ipmi_sim on the boot bridge's address, its chassis hook
// starting and stopping the machine's qemu):
//   - is powered on with ipmitool, as an operator would, gets an address
//     from the range and boots the pool's image with kubefarm.mode=discover
//     and no boot secret: it starts no kubelet and reports its hardware; the
//     DiscoveredMachine carries the disk serial and the memory qemu was
//     given;
//   - is enrolled with the plugin's binary (`kubectl-kubefarm enroll`),
//     which appends it to the pool at its discovered address; it learns it
//     is enrolled at its next report, reboots into the pool's image and
//     joins under the name given; the DiscoveredMachine goes; the enroll
//     names its BMC too (--power-driver ipmi, a labelled credentials
//     Secret), so its Machine shows power state On, read through IPMI;
//   - hung on purpose (its kubefarm-agent stopped with SIGSTOP), it is
//     rolled to the next image: the rollout drains it, waits
//     powerCycleAfter, sets a one-time network boot and cycles it through
//     the BMC, and completes once it runs the new image;
//   - the pool is deleted: the Machine's removal finalizer deletes its Node
//     from the tenant and powers the machine off through the BMC, then the
//     Machine goes.
//
// The seconds from power-on to the report and to the Node Ready, and from
// the BMC's cycle to the Node Ready again, are logged (the issue's
// discovery-to-join and power-on-to-Ready figures through IPMI).
func testDiscovery(t *testing.T, s discoveryScenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
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
	pool.Spec.Rollout.PowerCycleAfter = &metav1.Duration{Duration: discoveryCycleAfter}
	if err := s.c.Create(ctx, pool); err != nil {
		t.Fatalf("creating the discovery pool %s/%s: %v", pool.Namespace, pool.Name, err)
	}
	t.Cleanup(func() { _ = s.c.Delete(context.Background(), pool) })

	vm := startBMCMachine(t, cluster.FarmMachine{Name: discoveryName, MAC: discoveryMAC, Index: 2, DiskSerial: discoveryDisk})
	powerOn := time.Now()
	vm.ipmitool(t, "chassis", "power", "on")

	dm := discovered(t, ctx, s, vm, pool, powerOn)
	// Enrolled with its BMC: the credentials Secret, labelled for BMC use,
	// and the plugin's power flags.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "disc-bmc", Namespace: pool.Namespace,
			Labels: map[string]string{kubefarmv1.LabelBMCCredentials: "true"}},
		StringData: map[string]string{power.KeyUsername: vm.sim.Username, power.KeyPassword: vm.sim.Password},
	}
	if err := s.c.Create(ctx, secret); err != nil {
		t.Fatalf("creating the BMC credentials Secret: %v", err)
	}
	out, err := exec.CommandContext(ctx, plugin, "--kubeconfig", s.kubeconfig, "-n", pool.Namespace,
		"enroll", dm.Name, "--pool", pool.Name, "--name", discoveryName,
		"--power-driver", "ipmi", "--power-address", vm.sim.Addr, "--power-credentials", secret.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kubefarm enroll: %v\n%s", err, out)
	}
	t.Logf("kubectl kubefarm enroll:\n%s", strings.TrimSpace(string(out)))
	enrolled := time.Now()
	machineKey := client.ObjectKey{Namespace: pool.Namespace, Name: pool.Name + "-" + discoveryName}
	waitNodeReady(t, ctx, s, vm, machineKey, "", enrolled)
	t.Logf("Node %s Ready %.0f s after the enroll, %.0f s after power-on", discoveryName,
		time.Since(enrolled).Seconds(), time.Since(powerOn).Seconds())

	err = pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		err := s.c.Get(ctx, client.ObjectKeyFromObject(dm), &kubefarmv1.DiscoveredMachine{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("DiscoveredMachine %s is still there after its machine was enrolled: %v", dm.Name, err)
	}
	m := &kubefarmv1.Machine{}
	if err := s.c.Get(ctx, machineKey, m); err != nil {
		t.Fatalf("the enrolled Machine: %v", err)
	}
	if m.Spec.IP != dm.Spec.IP || !slices.Contains(m.Spec.MACs, discoveryMAC) {
		t.Errorf("enrolled Machine ip %s macs %v, want the discovered %s and %s", m.Spec.IP, m.Spec.MACs, dm.Spec.IP, discoveryMAC)
	}

	waitPowerOn(t, ctx, s, vm, machineKey)
	hungRollout(t, ctx, s, vm, pool, machineKey)
	removeWithPowerOff(t, ctx, s, vm, pool, machineKey)
}

// discovered waits for the machine's DiscoveredMachine and checks what it
// reports.
func discovered(t *testing.T, ctx context.Context, s discoveryScenario, vm *bmcMachine, pool *kubefarmv1.NodePool, powerOn time.Time) *kubefarmv1.DiscoveredMachine {
	t.Helper()
	dm := &kubefarmv1.DiscoveredMachine{}
	dmKey := client.ObjectKey{Name: kubefarmv1.DiscoveredMachineName(discoveryMAC)}
	err := pollErr(ctx, 8*time.Minute, func(ctx context.Context) (bool, error) {
		if err := vm.running(); err != nil {
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
	t.Logf("discovered %.0f s after power-on through IPMI: %s at %s in %s, %d MiB, %d CPU(s) %q, disks %+v, NICs %+v",
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
	return dm
}

// waitNodeReady waits for the machine's Node to be Ready in a boot other
// than notBoot (any boot when empty).
func waitNodeReady(t *testing.T, ctx context.Context, s discoveryScenario, vm *bmcMachine, machineKey client.ObjectKey, notBoot string, since time.Time) {
	t.Helper()
	err := pollErr(ctx, 12*time.Minute, func(ctx context.Context) (bool, error) {
		if err := vm.running(); err != nil {
			return false, err
		}
		n, err := s.tenant.CoreV1().Nodes().Get(ctx, discoveryName, metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n) && n.Status.NodeInfo.BootID != notBoot, nil
	})
	if err != nil {
		t.Fatalf("the machine's Node %s never became Ready (in a new boot: %v): %v%s", discoveryName, notBoot != "", err,
			machineStory(ctx, s.cs, s.c, machineKey, since))
	}
}

// waitPowerOn waits for the Machine to show the power state On, read
// through IPMI with the credentials the enroll named.
func waitPowerOn(t *testing.T, ctx context.Context, s discoveryScenario, vm *bmcMachine, machineKey client.ObjectKey) {
	t.Helper()
	m := &kubefarmv1.Machine{}
	err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.c.Get(ctx, machineKey, m); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionPowerControl)
		return c != nil && c.Status == metav1.ConditionTrue && m.Status.Power != nil && m.Status.Power.State == kubefarmv1.PowerOn, nil
	})
	if err != nil {
		t.Fatalf("Machine %s never read power state On through IPMI: %v; spec.power %+v, status.power %+v, conditions %+v",
			machineKey, err, m.Spec.Power, m.Status.Power, m.Status.Conditions)
	}
	t.Logf("Machine %s: power %s read at %s through ipmi %s", machineKey.Name, m.Status.Power.State, m.Status.Power.ReadTime, vm.sim.Addr)
}

// hungRollout stops the machine's kubefarm-agent (SIGSTOP: a process that
// no longer answers) and rolls the pool to the next image: the rollout
// cannot get the agent to reboot, so past powerCycleAfter it sets a
// one-time network boot and cycles the machine through the BMC; the
// machine boots the new image and the rollout completes.
func hungRollout(t *testing.T, ctx context.Context, s discoveryScenario, vm *bmcMachine, pool *kubefarmv1.NodePool, machineKey client.ObjectKey) {
	t.Helper()
	n, err := s.tenant.CoreV1().Nodes().Get(ctx, discoveryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldBoot := n.Status.NodeInfo.BootID
	out := nodeShell(ctx, s.tenantCfg, s.tenant, discoveryName,
		"systemctl kill --signal=SIGSTOP kubefarm-agent.service && grep State /proc/$(systemctl show -p MainPID --value kubefarm-agent.service)/status")
	if !strings.Contains(out, "stopped") {
		t.Fatalf("could not stop kubefarm-agent on %s:%s", discoveryName, out)
	}
	t.Logf("kubefarm-agent on %s stopped:%s", discoveryName, out)
	qemuBefore := vm.sim.QemuPID()

	p := &kubefarmv1.NodePool{}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(pool), p); err != nil {
		t.Fatal(err)
	}
	p.Spec.BootImage = s.nextImage
	if err := s.c.Update(ctx, p); err != nil {
		t.Fatalf("switching the discovery pool to %s: %v", s.nextImage, err)
	}
	switched := time.Now()
	var cycled time.Time
	err = pollErr(ctx, 12*time.Minute, func(ctx context.Context) (bool, error) {
		if cycled.IsZero() && vm.sim.QemuPID() != 0 && vm.sim.QemuPID() != qemuBefore {
			cycled = time.Now()
		}
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(pool), p); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, kubefarmv1.ConditionComplete)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == p.Generation &&
			p.Status.RolloutImage != nil && p.Status.RolloutImage.Name == s.nextImage, nil
	})
	if err != nil {
		t.Fatalf("the rollout of the hung machine did not complete: %v; pool %+v; BMC hook log %q%s", err, p.Status, vm.sim.HookLog(),
			machineStory(ctx, s.cs, s.c, machineKey, switched))
	}
	waitNodeReady(t, ctx, s, vm, machineKey, oldBoot, switched)
	t.Logf("rollout of the hung machine complete %.0f s after the switch; its qemu restarted by the BMC %.0f s after the switch, Node Ready in the new boot %.0f s after that; seconds after the switch:%s",
		time.Since(switched).Seconds(), cycled.Sub(switched).Seconds(), time.Since(cycled).Seconds(), machineStory(ctx, s.cs, s.c, machineKey, switched))

	// The BMC was asked for a one-time network boot, then a cycle, and the
	// machine it started booted from the network once.
	hook := strings.Join(vm.sim.HookLog(), "\n")
	if !strings.Contains(hook, "set boot pxe") || !strings.Contains(hook, "args=-boot once=n") {
		t.Errorf("the BMC was not asked for a one-time network boot before the cycle; its hook log:\n%s", hook)
	}
	m := &kubefarmv1.Machine{}
	if err := s.c.Get(ctx, machineKey, m); err != nil {
		t.Fatal(err)
	}
	if len(m.Status.History) == 0 || m.Status.History[0].Result != kubefarmv1.RolloutDone || m.Status.History[0].Image.Name != s.nextImage {
		t.Errorf("Machine %s history %+v, want a Done update to %s first", machineKey.Name, m.Status.History, s.nextImage)
	}
	// The rollout's reset is told by its PowerCycled Event (status.power's
	// lastOperation is people's requests only).
	var cycledEvent bool
	for _, e := range machineEvents(ctx, s.cs, machineKey) {
		cycledEvent = cycledEvent || (e.reason == "PowerCycled" && strings.Contains(e.message, "reset through ipmi"))
	}
	if !cycledEvent {
		t.Errorf("no PowerCycled Event saying the reset went through ipmi on Machine %s", machineKey)
	}
}

// removeWithPowerOff deletes the pool (docs/nodes.md): its Machine is
// deleted by garbage collection, and its finalizer cordons and drains the
// node, deletes the Node from the tenant and powers the machine off
// through the BMC before the Machine goes.
func removeWithPowerOff(t *testing.T, ctx context.Context, s discoveryScenario, vm *bmcMachine, pool *kubefarmv1.NodePool, machineKey client.ObjectKey) {
	t.Helper()
	if err := s.c.Delete(ctx, pool); err != nil {
		t.Fatalf("deleting the pool: %v", err)
	}
	removed := time.Now()
	err := pollErr(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		_, nerr := s.tenant.CoreV1().Nodes().Get(ctx, discoveryName, metav1.GetOptions{})
		merr := s.c.Get(ctx, machineKey, &kubefarmv1.Machine{})
		return apierrors.IsNotFound(nerr) && apierrors.IsNotFound(merr), nil
	})
	if err != nil {
		t.Fatalf("after the pool's deletion the Node %s or the Machine %s stayed: %v%s", discoveryName, machineKey.Name, err,
			machineStory(ctx, s.cs, s.c, machineKey, removed))
	}
	if pid := vm.sim.QemuPID(); pid != 0 {
		t.Errorf("the removed machine still runs (qemu pid %d); the BMC's hook log:\n%s", pid, strings.Join(vm.sim.HookLog(), "\n"))
	}
	if hook := vm.sim.HookLog(); len(hook) == 0 || hook[len(hook)-1] != "set power 0" {
		t.Errorf("the BMC's last request was not a power off: %q", hook)
	}
	t.Logf("pool deleted: Node and Machine gone and the machine powered off through IPMI %.0f s later", time.Since(removed).Seconds())
}

// bmcMachine is a farm machine whose power an IPMI BMC controls: ipmi_sim
// (internal/testing/ipmisim) on the boot bridge's address, where the
// kubefarm-manager pod reaches it, whose chassis hook starts and stops the
// machine's qemu. "On" is a running qemu.
type bmcMachine struct {
	cluster.FarmMachine
	sim *ipmisim.Sim
}

// startBMCMachine makes the machine's tap and its BMC; the machine is off.
// Its qemu writes its pid where e2e-cluster down looks (a daemonized qemu
// outlives a test process that is killed), and its console to the
// cluster's logs.
func startBMCMachine(t *testing.T, fm cluster.FarmMachine) *bmcMachine {
	t.Helper()
	if err := cluster.AddTap(fm.Tap(), cluster.BootBridge); err != nil {
		t.Fatal(err)
	}
	tap := fm.Tap()
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", tap).Run() })
	state := filepath.Dir(filepath.Dir(adminKubeconfigPath()))
	for _, d := range []string{"run", "logs"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	console := filepath.Join(state, "logs", "console-"+fm.Name+".log")
	sim := ipmisim.StartWith(t, ipmisim.Options{
		Addr:    cluster.BootIP,
		Qemu:    cluster.QemuArgs(fm, console),
		PIDFile: filepath.Join(state, "run", "qemu-"+fm.Name+".pid"),
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("%s (%s) behind the BMC %s; last console lines:\n%s", fm.Name, fm.Firmware(), sim.Addr, tail(string(b), 80))
		}
	})
	return &bmcMachine{FarmMachine: fm, sim: sim}
}

// running is nil while the machine's qemu runs.
func (vm *bmcMachine) running() error {
	if vm.sim.QemuPID() == 0 {
		return fmt.Errorf("machine %s is off: its qemu is not running (the BMC's hook log: %q)", vm.Name, vm.sim.HookLog())
	}
	return nil
}

// ipmitool runs ipmitool against the BMC as an operator would (lanplus,
// cipher suite 3, the password from the environment, not the command
// line).
func (vm *bmcMachine) ipmitool(t *testing.T, args ...string) {
	t.Helper()
	host, port, err := net.SplitHostPort(vm.sim.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ipmitool", append([]string{"-I", "lanplus", "-C", "3", "-H", host, "-p", port, "-U", vm.sim.Username, "-E"}, args...)...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+vm.sim.Password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipmitool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
