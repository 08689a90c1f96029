package cli_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/cmd/kubectl-kubefarm/internal/cli"
	"github.com/kubefarm/kubefarm/controllers/machinepower"
	"github.com/kubefarm/kubefarm/internal/testing/ipmisim"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/drivers"
)

// TestPower runs `kubectl kubefarm power` against the machinepower
// controller (in-process) driving a real IPMI BMC (ipmi_sim): on and cycle
// --netboot wait for the manager and print the result; status prints the
// state and the condition. The plugin's clock is the real one here: the
// controller refuses requests from long ago.
func TestPower(t *testing.T) {
	sim := ipmisim.Start(t)
	ctx := context.Background()
	ns := env.NewNamespace(t, "power-")
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc",
		Labels: map[string]string{v1alpha1.LabelBMCCredentials: "true"}},
		StringData: map[string]string{power.KeyUsername: sim.Username, power.KeyPassword: sim.Password}})
	create(t, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m1"},
		Spec: v1alpha1.MachineSpec{Pool: "workers", Cluster: "tenant", Hostname: "m1", IP: "10.80.0.1", MACs: []string{"02:00:00:80:00:01"},
			DesiredImage: "img", Power: &v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: sim.Addr, CredentialsSecret: "bmc"}}})
	create(t, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nopower"},
		Spec: v1alpha1.MachineSpec{Pool: "workers", Cluster: "tenant", Hostname: "nopower", IP: "10.80.0.2", MACs: []string{"02:00:00:80:00:02"},
			DesiredImage: "img"}})

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	rec := mgr.GetEventRecorder("machinepower-controller")
	if err := (&machinepower.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec,
		Power: power.Control{Reader: mgr.GetAPIReader(), Drivers: drivers.New(), Recorder: rec}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.RunManager(mgr))

	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: "power-operator", Groups: []string{"system:masters"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		t.Helper()
		var out, errOut bytes.Buffer
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
		code := cli.Main(ctx, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...), streams, time.Now)
		t.Logf("kubectl kubefarm %s:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		return result{code: code, out: out.String(), errOut: errOut.String()}
	}

	r := run("power", "on", "m1")
	r.ok(t)
	for _, want := range []string{"requested kubefarm.io/power-request=on@", "State:          On", "Last operation: On Succeeded", "PowerControl:   True PowerRead"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("power on: output lacks %q", want)
		}
	}
	if sim.QemuPID() == 0 {
		t.Fatal("no qemu runs after power on")
	}

	r = run("power", "cycle", "m1", "--netboot", "--timeout", "1m")
	r.ok(t)
	if !strings.Contains(r.out, "Last operation: Cycle,NetbootOnce Succeeded") {
		t.Errorf("power cycle --netboot: output lacks the outcome")
	}
	if !slices.Contains(sim.HookLog(), "set boot pxe") {
		t.Errorf("the BMC was not asked for a network boot: %q", sim.HookLog())
	}

	r = run("power", "status", "m1")
	r.ok(t)
	for _, want := range []string{"Machine " + ns + "/m1", "Driver:         ipmi " + sim.Addr, "State:          ", "PowerControl:   True PowerRead"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("power status: output lacks %q", want)
		}
	}

	r = run("power", "off", "nopower")
	r.fails(t, cli.ExitError, "error: cannot power Machine "+ns+"/nopower: it has no spec.power\n")
	r = run("power", "off", "--netboot", "m1")
	if r.code != cli.ExitError || !strings.Contains(r.errOut, "unknown flag: --netboot") {
		t.Errorf("power off --netboot: %d %q, want the flag refused", r.code, r.errOut)
	}
}
