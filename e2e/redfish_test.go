//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/internal/testing/sushy"
	"github.com/kubefarm/kubefarm/power"
)

// TestMain stops the libvirtd and virtlogd the Redfish machine's emulator
// started (internal/testing/sushy).
func TestMain(m *testing.M) { sushy.Main(m) }

// redfishBMC is the Redfish BMC of a join machine: sushy-tools (OpenStack's
// Redfish emulator, unmodified) on the boot bridge's address, where the
// kubefarm-manager pod reaches it, in front of a libvirt domain that is the
// machine (TCG, the farm machine's MAC on its tap on the boot bridge, a
// blank disk first in its boot order). The machine is powered on the way an
// operator would: `kubectl kubefarm power on --netboot`, which asks
// kubefarm-manager, whose redfish driver sets the one-time Pxe boot
// override and resets the system On.
type redfishBMC struct {
	emu *sushy.Emulator
	// credentials and ca are the Secrets spec.power names.
	credentials, ca string
}

// Redfish power of the join machines: the Secrets' names.
const (
	joinBMCCredentials = "join-bmc"
	joinBMCCA          = "join-bmc-ca"
)

// attachRedfish makes vm's tap on the boot bridge and its BMC (the
// machine off), and the credentials and CA Secrets in namespace ns that
// the values' spec.power names. Call it before the release is installed:
// cleanups run last-registered first, so the BMC outlives the release's
// removal, whose finalizer powers the machine off through it.
func attachRedfish(t *testing.T, ctx context.Context, c client.Client, vm *joinVM, ns string) {
	t.Helper()
	if err := cluster.AddTap(vm.Tap(), cluster.BootBridge); err != nil {
		t.Fatal(err)
	}
	tap := vm.Tap()
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", tap).Run() })
	var secondTap string
	if vm.SecondMAC != "" {
		secondTap = vm.SecondTap()
		if err := cluster.AddTap(secondTap, cluster.BootBridge); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", secondTap).Run() })
	}
	vm.console = filepath.Join(t.TempDir(), "console-"+vm.Name+".log")
	emu := sushy.StartWith(t, sushy.Options{ListenIP: cluster.BootIP, Tap: tap, MAC: vm.MAC,
		MemoryMiB: cluster.QemuMemoryMiB, Console: vm.console, SecondTap: secondTap, SecondMAC: vm.SecondMAC})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(vm.console)
			t.Logf("%s (BIOS, libvirt domain %s behind the Redfish BMC %s): last console lines:\n%s",
				vm.Name, emu.Domain, emu.Endpoint, tail(string(b), 80))
		}
	})
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: joinBMCCredentials, Namespace: ns,
			Labels: map[string]string{kubefarmv1.LabelBMCCredentials: "true"}},
			StringData: map[string]string{power.KeyUsername: emu.Username, power.KeyPassword: emu.Password}},
		{ObjectMeta: metav1.ObjectMeta{Name: joinBMCCA, Namespace: ns},
			StringData: map[string]string{power.KeyCA: string(emu.CA)}},
	} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatalf("creating Secret %s/%s: %v", ns, s.Name, err)
		}
	}
	vm.redfish = &redfishBMC{emu: emu, credentials: joinBMCCredentials, ca: joinBMCCA}
}

// powerValues is the machine's power entry in the values file.
func (b *redfishBMC) powerValues() map[string]any {
	return map[string]any{"driver": "redfish", "address": b.emu.Endpoint + b.emu.SystemPath,
		"credentialsSecret": b.credentials, "caSecret": b.ca}
}

// redfishPowerOn powers the machine on through the plugin once its
// Machine exists (the release's pool makes it), the next boot a network
// boot, and checks what the BMC and the Machine say of it.
//
// It returns when the plugin was run: the machine's power-on.
func redfishPowerOn(t *testing.T, ctx context.Context, c client.Client, vm *joinVM, key client.ObjectKey) time.Time {
	t.Helper()
	m := &kubefarmv1.Machine{}
	if err := pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, key, m) == nil && m.Spec.Power != nil, nil
	}); err != nil {
		t.Fatalf("Machine %s with spec.power never appeared: %v", key, err)
	}
	plugin := buildPlugin(t, ctx)
	powerOn := time.Now()
	out, err := exec.CommandContext(ctx, plugin, "--kubeconfig", adminKubeconfigPath(), "-n", key.Namespace,
		"power", "on", "--netboot", "--timeout", "3m", key.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kubefarm power on --netboot %s: %v\n%s", key.Name, err, out)
	}
	t.Logf("kubectl kubefarm power on --netboot %s:\n%s", key.Name, strings.TrimSpace(string(out)))
	var sys struct {
		PowerState string
		Boot       struct{ BootSourceOverrideTarget string }
	}
	if err := vm.redfish.emu.Get(vm.redfish.emu.SystemPath, &sys); err != nil {
		t.Fatal(err)
	}
	if sys.PowerState != "On" || sys.Boot.BootSourceOverrideTarget != "Pxe" {
		t.Errorf("the BMC reads PowerState %q, boot override %q; want On and Pxe", sys.PowerState, sys.Boot.BootSourceOverrideTarget)
	}
	if got := vm.redfish.emu.DomainState(t); got != "running" {
		t.Errorf("libvirt domain %s is %q after the power-on, want running", vm.redfish.emu.Domain, got)
	}
	return powerOn
}

// pluginBuild is the kubectl plugin, built once per test process: the
// join scenario powers a machine with it, the discovery step enrolls one.
var pluginBuild struct {
	once sync.Once
	done chan struct{}
	path string
	err  error
}

// startPluginBuild starts building the plugin in the background (the join
// scenario starts it while its tenant's control plane comes up); dir must
// outlive every use of the binary.
func startPluginBuild(ctx context.Context, dir string) {
	pluginBuild.once.Do(func() {
		pluginBuild.done = make(chan struct{})
		go func() {
			defer close(pluginBuild.done)
			pluginBuild.path, pluginBuild.err = goBuildPlugin(ctx, dir)
		}()
	})
}

// buildPlugin returns the plugin's path, built the way `make
// kubectl-plugin` does: the background build's, or one built now into the
// test's folder.
func buildPlugin(t *testing.T, ctx context.Context) string {
	t.Helper()
	startPluginBuild(ctx, t.TempDir())
	select {
	case <-pluginBuild.done:
	case <-ctx.Done():
		t.Fatalf("waiting for the kubectl plugin's build: %v", ctx.Err())
	}
	if pluginBuild.err != nil {
		t.Fatal(pluginBuild.err)
	}
	return pluginBuild.path
}

func goBuildPlugin(ctx context.Context, dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(dir, "kubectl-kubefarm")
	// No -trimpath: the build reuses the packages the test binary's build
	// left in Go's cache (client-go, controller-runtime) instead of
	// compiling them again.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/kubectl-kubefarm")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the kubectl plugin: %v\n%s", err, b)
	}
	return out, nil
}

// The join pool's catch-all range (kubefarm's catchall example's form,
// with dhcp-generate-names): the unlisted machine's address comes from it.
const (
	joinCatchAllStart = "10.123.0.200"
	joinCatchAllEnd   = "10.123.0.209"
)

// how says how the machine boots and is powered, for people reading the
// output.
func (vm *joinVM) how() string {
	switch {
	case vm.redfish != nil:
		return vm.Firmware() + ", powered on through Redfish"
	case vm.catchAll:
		return vm.Firmware() + ", unlisted, in the catch-all range"
	}
	return vm.Firmware()
}

// checkJoinMachines checks the Machines of the join's two kinds of
// machine once their Nodes are Ready: the Redfish machine's shows the
// power state its BMC reports and the operation the plugin asked for; the
// catch-all machine has a Machine of the pool named from its MAC, holding
// its MAC and an address of the range, which the test then knows it by.
func checkJoinMachines(t *testing.T, ctx context.Context, c client.Client, pool *kubefarmv1.NodePool, vms []*joinVM) {
	t.Helper()
	for _, vm := range vms {
		key := client.ObjectKey{Namespace: pool.Namespace, Name: pool.Name + "-" + vm.Name}
		m := &kubefarmv1.Machine{}
		switch {
		case vm.redfish != nil:
			err := pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
				if c.Get(ctx, key, m) != nil || m.Status.Power == nil {
					return false, nil
				}
				return m.Status.Power.State == kubefarmv1.PowerOn, nil
			})
			if err != nil {
				t.Errorf("Machine %s: power %+v, want On read through Redfish: %v", key, m.Status.Power, err)
				continue
			}
			if op := m.Status.Power.LastOperation; op != "On,NetbootOnce Succeeded" {
				t.Errorf("Machine %s: lastOperation %q, want the plugin's On,NetbootOnce Succeeded", key, op)
			}
			t.Logf("Machine %s: power %s read %s, last operation %q", key.Name, m.Status.Power.State,
				m.Status.Power.ReadTime.Format(time.RFC3339), m.Status.Power.LastOperation)
		case vm.catchAll:
			if err := c.Get(ctx, key, m); err != nil {
				t.Errorf("no Machine %s for the catch-all machine %s: %v", key, vm.MAC, err)
				continue
			}
			ip := m.Spec.IP
			if m.Labels[kubefarmv1.LabelCatchAll] == "" || !metav1.IsControlledBy(m, pool) ||
				len(m.Spec.MACs) != 1 || m.Spec.MACs[0] != vm.MAC || !inRange(ip, joinCatchAllStart, joinCatchAllEnd) {
				t.Errorf("catch-all Machine %s: labels %v, owners %v, macs %v, ip %s; want label %s, the pool's, [%s], an address of %s-%s",
					key, m.Labels, m.OwnerReferences, m.Spec.MACs, ip, kubefarmv1.LabelCatchAll, vm.MAC, joinCatchAllStart, joinCatchAllEnd)
			}
			vm.IP = ip
			t.Logf("catch-all Machine %s: %s at %s", key.Name, vm.MAC, ip)
		}
	}
}

// inRange tells whether ip is within [start, end].
func inRange(ip, start, end string) bool {
	a, err1 := netip.ParseAddr(ip)
	s, err2 := netip.ParseAddr(start)
	e, err3 := netip.ParseAddr(end)
	return err1 == nil && err2 == nil && err3 == nil && a.Compare(s) >= 0 && a.Compare(e) <= 0
}
