package machinepower_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/machinepower"
	"github.com/kubefarm/kubefarm/internal/testing/ipmisim"
	"github.com/kubefarm/kubefarm/internal/testing/sushy"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/drivers"
	"github.com/kubefarm/kubefarm/power/redfish"
)

func TestMain(m *testing.M) { sushy.Main(m) }

// fixture is one API server (envtest), one namespace, and a manager that
// runs only the machinepower controller, restartable.
type fixture struct {
	t    *testing.T
	env  *testenv.Env
	ns   string
	stop func()
	// seq numbers the machines' addresses.
	seq atomic.Int32
}

func start(t *testing.T) *fixture {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	env := testenv.StartT(t, testenv.Options{})
	f := &fixture{t: t, env: env, ns: env.NewNamespace(t, "power-")}
	f.startManager()
	t.Cleanup(func() { f.stopManager() })
	return f
}

// startManager runs the controller with a 2 s poll, as the manager wires
// it (the drivers kubefarm ships, Secrets read uncached), but for a longer
// redfish timeout: sushy-tools' ForceOff (virsh destroy) takes over the
// driver's 20 s on a loaded test machine.
func (f *fixture) startManager() {
	mgr, err := ctrl.NewManager(f.env.Config, ctrl.Options{Scheme: f.env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		f.t.Fatal(err)
	}
	rec := mgr.GetEventRecorder("machinepower-controller")
	r := &machinepower.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec,
		Power:    power.Control{Reader: mgr.GetAPIReader(), Drivers: slowRedfish(drivers.New()), Recorder: rec},
		Interval: 2 * time.Second, Timeout: 2 * time.Minute}
	if err := r.SetupWithManager(mgr); err != nil {
		f.t.Fatal(err)
	}
	f.stop = testenv.RunManager(mgr)
}

func slowRedfish(d power.Drivers) power.Drivers {
	d[v1alpha1.PowerRedfish] = redfish.Driver{Timeout: 90 * time.Second}
	return d
}

func (f *fixture) stopManager() {
	if f.stop != nil {
		f.stop()
		f.stop = nil
	}
}

func (f *fixture) secret(name string, data map[string]string) {
	f.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name,
		Labels: map[string]string{v1alpha1.LabelBMCCredentials: "true"}}, StringData: data}
	if name == "unmarked" {
		s.Labels = nil
	}
	if err := f.env.Client.Create(context.Background(), s); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) machine(name string, spec v1alpha1.PowerSpec) {
	f.t.Helper()
	k := f.seq.Add(1)
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1alpha1.MachineSpec{Pool: "workers", Cluster: "tenant", Hostname: name, IP: fmt.Sprintf("10.70.0.%d", k),
			MACs: []string{fmt.Sprintf("02:00:00:70:00:%02x", k)}, DesiredImage: "img", Power: &spec}}
	if err := f.env.Client.Create(context.Background(), m); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) get(name string) *v1alpha1.Machine {
	f.t.Helper()
	m := &v1alpha1.Machine{}
	if err := f.env.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) eventually(what string, within time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCondition waits for m's PowerControl condition with status and
// reason and returns it.
func (f *fixture) waitCondition(name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	f.t.Helper()
	var c *metav1.Condition
	f.eventually(fmt.Sprintf("%s: PowerControl %s %s", name, status, reason), 30*time.Second, func() bool {
		c = meta.FindStatusCondition(f.get(name).Status.Conditions, v1alpha1.ConditionPowerControl)
		return c != nil && c.Status == status && c.Reason == reason
	})
	return *c
}

func (f *fixture) events(name string) []eventsv1.Event {
	f.t.Helper()
	evs := &eventsv1.EventList{}
	if err := f.env.Client.List(context.Background(), evs, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an event of reason on machine name whose note
// contains want, and returns it.
func (f *fixture) waitEvent(name, typ, reason, want string) eventsv1.Event {
	f.t.Helper()
	var found eventsv1.Event
	f.eventually(fmt.Sprintf("%s event %s on %s saying %q", typ, reason, name, want), 30*time.Second, func() bool {
		for _, e := range f.events(name) {
			if e.Type == typ && e.Reason == reason && strings.Contains(e.Note, want) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

func (f *fixture) request(name, value string) {
	f.t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationPowerRequest, value)
	if err := f.env.Client.Patch(context.Background(), &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}},
		client.RawPatch(types.MergePatchType, patch)); err != nil {
		f.t.Fatal(err)
	}
}

// waitOperation waits until status.power records the request at as
// handled and returns the status.
func (f *fixture) waitOperation(name string, at time.Time, want string) *v1alpha1.MachinePowerStatus {
	f.t.Helper()
	var st *v1alpha1.MachinePowerStatus
	var m *v1alpha1.Machine
	f.eventually(fmt.Sprintf("%s: status.power.lastOperation %q at %s", name, want, at.Format(time.RFC3339)), 90*time.Second, func() bool {
		m = f.get(name)
		st = m.Status.Power
		return st != nil && st.LastOperationTime != nil && st.LastOperationTime.Time.Equal(at) && !strings.HasSuffix(st.LastOperation, " Pending")
	})
	if st.LastOperation != want {
		f.t.Fatalf("%s: status.power.lastOperation %q, want %q; PowerControl: %+v", name, st.LastOperation, want,
			meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionPowerControl))
	}
	return st
}

// setLines are the hook's lines other than reads: what the BMC was told.
func setLines(sim *ipmisim.Sim) []string {
	return slices.DeleteFunc(sim.HookLog(), func(l string) bool { return strings.HasPrefix(l, "qemu-started") })
}

// TestIPMI runs the controller against a real IPMI BMC (ipmi_sim, whose
// hook runs a qemu machine): the state and condition of a machine it can
// read, the refusal of a wrong password and a missing Secret named, and
// power requests performed once, a restart of the manager included.
func TestIPMI(t *testing.T) {
	sim := ipmisim.Start(t)
	f := start(t)
	f.secret("bmc", map[string]string{power.KeyUsername: sim.Username, power.KeyPassword: sim.Password})
	f.secret("bmc-wrong", map[string]string{power.KeyUsername: sim.Username, power.KeyPassword: "not-" + sim.Password})
	f.secret("bmc-nopassword", map[string]string{power.KeyUsername: sim.Username})
	f.secret("unmarked", map[string]string{power.KeyUsername: sim.Username, power.KeyPassword: sim.Password})
	spec := func(secret string) v1alpha1.PowerSpec {
		return v1alpha1.PowerSpec{Driver: v1alpha1.PowerIPMI, Address: sim.Addr, CredentialsSecret: secret}
	}
	f.machine("m1", spec("bmc"))
	f.machine("m2", spec("bmc-wrong"))
	f.machine("m3", spec("absent"))
	f.machine("m4", spec("bmc-nopassword"))
	f.machine("m5", spec("unmarked"))

	t.Run("a readable BMC gives the state and PowerControl True", func(t *testing.T) {
		c := f.waitCondition("m1", metav1.ConditionTrue, v1alpha1.ReasonPowerRead)
		st := f.get("m1").Status.Power
		if st == nil || st.State != v1alpha1.PowerOff || time.Since(st.ReadTime.Time) > time.Minute {
			t.Fatalf("status.power = %+v, want Off, read just now", st)
		}
		if !strings.Contains(c.Message, "Off") {
			t.Errorf("condition message %q does not give the state", c.Message)
		}
		// Polled: the read time moves on.
		first := st.ReadTime
		f.eventually("a later read", 15*time.Second, func() bool { return f.get("m1").Status.Power.ReadTime.After(first.Time) })
	})

	t.Run("a wrong password is PowerAuthFailed with the BMC's words", func(t *testing.T) {
		c := f.waitCondition("m2", metav1.ConditionFalse, v1alpha1.ReasonPowerAuthFailed)
		if !strings.Contains(c.Message, "Machine "+f.ns+"/m2") || !strings.Contains(c.Message, sim.Addr) {
			t.Errorf("message %q does not name the Machine and the BMC", c.Message)
		}
		if st := f.get("m2").Status.Power; st == nil || st.State != v1alpha1.PowerUnknown {
			t.Errorf("status.power = %+v, want Unknown", st)
		}
		e := f.waitEvent("m2", corev1.EventTypeWarning, machinepower.ReasonReadFailed, v1alpha1.ReasonPowerAuthFailed)
		t.Logf("event: %s", e.Note)
		for _, s := range []string{c.Message, e.Note} {
			if strings.Contains(s, sim.Password) {
				t.Fatalf("the password is in %q", s)
			}
		}
	})

	t.Run("a missing Secret or key is PowerCredentialsMissing, named", func(t *testing.T) {
		c := f.waitCondition("m3", metav1.ConditionFalse, v1alpha1.ReasonPowerCredentialsMissing)
		for _, want := range []string{"Machine " + f.ns + "/m3", "spec.power.credentialsSecret", "Secret " + f.ns + "/absent", "does not exist"} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("message %q does not say %q", c.Message, want)
			}
		}
		c = f.waitCondition("m4", metav1.ConditionFalse, v1alpha1.ReasonPowerCredentialsMissing)
		if !strings.Contains(c.Message, `Secret `+f.ns+`/bmc-nopassword has no key "password"`) {
			t.Errorf("message %q does not name the Secret and the key", c.Message)
		}
		// Right keys, right password, but not marked for BMCs: not sent.
		c = f.waitCondition("m5", metav1.ConditionFalse, v1alpha1.ReasonPowerCredentialsMissing)
		if !strings.Contains(c.Message, `Secret `+f.ns+`/unmarked lacks the label `+v1alpha1.LabelBMCCredentials+`=true`) {
			t.Errorf("message %q does not name the Secret and the label", c.Message)
		}
	})

	t.Run("power requests are performed once, through the BMC", func(t *testing.T) {
		on := time.Now().UTC().Truncate(time.Second)
		f.request("m1", "on@"+on.Format(time.RFC3339))
		st := f.waitOperation("m1", on, "On Succeeded")
		if sim.QemuPID() == 0 {
			t.Fatal("no qemu runs after the on request")
		}
		if st.State != v1alpha1.PowerOn {
			t.Errorf("state after on: %s", st.State)
		}
		first := sim.QemuPID()
		f.waitEvent("m1", corev1.EventTypeNormal, machinepower.ReasonOperation, "On requested at "+on.Format(time.RFC3339)+": done")

		cycle := on.Add(time.Second)
		f.request("m1", "cycle,netboot@"+cycle.Format(time.RFC3339))
		f.waitOperation("m1", cycle, "Cycle,NetbootOnce Succeeded")
		var second int
		f.eventually("a new qemu after the cycle", 15*time.Second, func() bool {
			second = sim.QemuPID()
			return second != 0 && second != first && slices.Contains(sim.HookLog(), fmt.Sprintf("qemu-started pid=%d args=-boot once=n", second))
		})
		log := sim.HookLog()
		pxe := slices.Index(log, "set boot pxe")
		if firstStart := slices.Index(log, fmt.Sprintf("qemu-started pid=%d args=", first)); pxe < firstStart {
			t.Fatalf("the PXE override was not set after the first start: %q", log)
		}
		if pxe > slices.Index(log, fmt.Sprintf("qemu-started pid=%d args=-boot once=n", second)) {
			t.Fatalf("the PXE override was not set before the machine started again: %q", log)
		}

		// A restart of the manager does not perform it again.
		told := setLines(sim)
		f.stopManager()
		restart := time.Now()
		f.startManager()
		f.eventually("a read by the restarted manager", 15*time.Second, func() bool {
			return f.get("m1").Status.Power.ReadTime.Time.After(restart)
		})
		if got := setLines(sim); !slices.Equal(got, told) {
			t.Fatalf("the restarted manager told the BMC %q more", got[len(told):])
		}
		if st := f.get("m1").Status.Power; st.LastOperation != "Cycle,NetbootOnce Succeeded" || !st.LastOperationTime.Time.Equal(cycle) {
			t.Fatalf("after the restart status.power = %+v", st)
		}

		// An older request than the one handled is not performed.
		f.request("m1", "off@"+on.Format(time.RFC3339))
		f.eventually("a read after the stale request", 15*time.Second, func() bool {
			return f.get("m1").Status.Power.ReadTime.Time.After(time.Now().Add(-time.Second))
		})
		if sim.QemuPID() == 0 {
			t.Fatal("a request older than the one handled powered the machine off")
		}
	})

	t.Run("an invalid request is an event naming the annotation", func(t *testing.T) {
		f.request("m1", "reboot@"+time.Now().UTC().Format(time.RFC3339))
		f.waitEvent("m1", corev1.EventTypeWarning, machinepower.ReasonRequestInvalid, v1alpha1.AnnotationPowerRequest)
		f.request("m1", "off")
		f.waitEvent("m1", corev1.EventTypeWarning, machinepower.ReasonRequestInvalid, "no @<time>")
		// The controller goes on reading.
		since := time.Now()
		f.eventually("a read after the invalid requests", 15*time.Second, func() bool {
			return f.get("m1").Status.Power.ReadTime.Time.After(since)
		})
	})

	t.Run("a failed operation is recorded Failed with the BMC's words", func(t *testing.T) {
		at := time.Now().UTC().Truncate(time.Second)
		f.request("m2", "off@"+at.Format(time.RFC3339))
		f.waitOperation("m2", at, "Off Failed")
		c := f.waitCondition("m2", metav1.ConditionFalse, v1alpha1.ReasonPowerAuthFailed)
		t.Logf("condition: %s", c.Message)
		f.waitEvent("m2", corev1.EventTypeWarning, machinepower.ReasonOperationFailed, "Off requested at "+at.Format(time.RFC3339)+" failed")
	})

	t.Run("the controller owns status.power and PowerControl alone", func(t *testing.T) {
		m := f.get("m1")
		for _, mf := range m.ManagedFields {
			if mf.Subresource == "status" && mf.Manager != machinepower.FieldOwner {
				t.Errorf("status written by %s", mf.Manager)
			}
		}
	})
}

// TestRedfish runs the controller against the real sushy-tools emulator:
// a machine verified with the CA from its caSecret reads with no warning;
// one with insecureSkipVerify reads too, and every operation on it is
// announced by a Warning event.
func TestRedfish(t *testing.T) {
	e := sushy.Start(t)
	f := start(t)
	f.secret("bmc", map[string]string{power.KeyUsername: e.Username, power.KeyPassword: e.Password})
	f.secret("bmc-ca", map[string]string{power.KeyCA: string(e.CA)})
	f.secret("other-ca", map[string]string{power.KeyCA: string(otherCA(t))})
	address := e.Endpoint + e.SystemPath
	f.machine("verified", v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: address, CredentialsSecret: "bmc", CASecret: "bmc-ca"})
	f.machine("insecure", v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: address, CredentialsSecret: "bmc", InsecureSkipVerify: true})
	f.machine("wrong-ca", v1alpha1.PowerSpec{Driver: v1alpha1.PowerRedfish, Address: address, CredentialsSecret: "bmc", CASecret: "other-ca"})

	f.waitCondition("verified", metav1.ConditionTrue, v1alpha1.ReasonPowerRead)
	if st := f.get("verified").Status.Power; st.State != v1alpha1.PowerOff {
		t.Errorf("verified: state %s, want Off", st.State)
	}
	f.waitCondition("insecure", metav1.ConditionTrue, v1alpha1.ReasonPowerRead)
	f.waitEvent("insecure", corev1.EventTypeWarning, power.ReasonInsecure, "verification off")
	c := f.waitCondition("wrong-ca", metav1.ConditionFalse, v1alpha1.ReasonPowerFailed)
	if !strings.Contains(c.Message, "certificate") {
		t.Errorf("wrong-ca: message %q does not say the certificate was refused", c.Message)
	}
	for _, name := range []string{"verified", "wrong-ca"} {
		for _, ev := range f.events(name) {
			if ev.Reason == power.ReasonInsecure {
				t.Errorf("%s: an insecure warning on a verified machine: %s", name, ev.Note)
			}
		}
	}

	at := time.Now().UTC().Truncate(time.Second)
	f.request("verified", "on@"+at.Format(time.RFC3339))
	st := f.waitOperation("verified", at, "On Succeeded")
	if st.State != v1alpha1.PowerOn {
		t.Errorf("verified: state after on %s, want On", st.State)
	}
	if got := e.DomainState(t); got != "running" {
		t.Errorf("virsh domstate after on = %q, want running", got)
	}
	off := at.Add(time.Second)
	f.request("insecure", "off@"+off.Format(time.RFC3339))
	f.waitOperation("insecure", off, "Off Succeeded")
	f.waitEvent("insecure", corev1.EventTypeWarning, power.ReasonInsecure, "verification off")
	n := 0
	for _, ev := range f.events("insecure") {
		if ev.Reason == power.ReasonInsecure {
			n += max(1, int(ev.DeprecatedCount))
			if ev.Series != nil {
				n += int(ev.Series.Count)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d insecure warnings for a read and an operation, want one each at least", n)
	}
}

// otherCA is a CA certificate that signed nothing the emulator serves.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the BMC's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
