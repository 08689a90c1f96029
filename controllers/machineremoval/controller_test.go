package machineremoval_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/machineremoval"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/power"
)

// The tenant stand-in, as in controllers/machinenode: one real API server
// (envtest) plays both the admin cluster and the tenant. The TenantCluster
// is a real object with no controller; the test writes the internal admin
// kubeconfig Secret the TenantCluster controller would, for a
// system:masters user of the envtest API server, so the manager's tenant
// cache reaches "the tenant" with the credential production uses. The
// NodePool controller makes and deletes the Machines, as in production.
//
// What cannot run in envtest is played by the test, named: the kubelet
// (Nodes registered and Ready; a terminating pod finished, since no
// container runtime runs it: kubelet below) and kube-controller-manager's
// disruption controller (a PodDisruptionBudget's status, written by
// setBudget). The eviction handler that enforces the budget is the real API
// server's.

// powerCall is one call of the recording power-off function.
type powerCall struct {
	machine string
	// nodeGone: the tenant had no Node of the machine's hostname when the
	// power off was asked for.
	nodeGone bool
	// left is the time the call's context had left: PowerOffTimeout.
	left time.Duration
}

type fixture struct {
	env *testenv.Env
	ns  string
	tc  *kubefarmv1.TenantCluster
	img string

	mu       sync.Mutex
	calls    []powerCall
	finished []string // pods the kubelet stand-in finished, ns/name
}

func TestRemoval(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	f := start(t)

	t.Run("a joined machine is cordoned, drained, its Node deleted, then it goes", func(t *testing.T) {
		f.pool(t, "a", kubefarmv1.RolloutStrategy{}, entry("a1", 1, false))
		f.registerNode(t, "a1")
		f.runPod(t, "a1", "plain-a1", nil)
		m := f.waitFinalizer(t, "a-a1")
		f.removeEntries(t, "a")
		f.waitGone(t, m, 30*time.Second)
		f.wantNodeGone(t, "a1")
		if !slices.Contains(f.finishedPods(), f.ns+"/plain-a1") {
			t.Errorf("pod plain-a1 was not evicted (the kubelet finished %v)", f.finishedPods())
		}
		for _, reason := range []string{"RemovingCordoning", machineremoval.EventNodeCordoned, "RemovingDraining",
			"RemovingDeletingNode", machineremoval.EventNodeDeleted, machineremoval.EventReleased} {
			f.waitEvent(t, "a-a1", reason, "")
		}
		if f.powerCalls("a-a1") != nil {
			t.Errorf("a machine without spec.power was powered off: %v", f.powerCalls("a-a1"))
		}
	})

	t.Run("a PodDisruptionBudget that refuses the eviction holds the Machine until it is relaxed", func(t *testing.T) {
		f.pool(t, "b", kubefarmv1.RolloutStrategy{}, entry("b1", 2, false))
		f.registerNode(t, "b1")
		f.runPod(t, "b1", "web-b1", map[string]string{"app": "web-b"})
		f.setBudget(t, "web-b", 1, 0)
		m := f.waitFinalizer(t, "b-b1")
		f.removeEntries(t, "b")
		c := f.waitRemoving(t, "b-b1", kubefarmv1.ReasonRemovalDrainHeld, "disruption budget")
		if !strings.Contains(c.Message, f.ns+"/web-b1") {
			t.Errorf("DrainHeld says %q; want the pod named", c.Message)
		}
		e := f.waitEvent(t, "b-b1", machineremoval.EventDrainBlocked, "web-b1")
		if e.Type != corev1.EventTypeWarning {
			t.Errorf("DrainBlocked is %s", e.Type)
		}
		held := f.machine(t, "b-b1")
		if held == nil || held.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(held, kubefarmv1.FinalizerMachineRemoval) {
			t.Fatalf("the held Machine: %+v", held)
		}
		if n := f.node(t, "b1"); n == nil || !n.Spec.Unschedulable {
			t.Fatalf("node b1 while the drain is held: %+v, want it there and cordoned", n)
		}
		f.setBudget(t, "web-b", 0, 1)
		f.waitGone(t, m, 30*time.Second)
		f.wantNodeGone(t, "b1")
		if !slices.Contains(f.finishedPods(), f.ns+"/web-b1") {
			t.Errorf("pod web-b1 was not evicted once the budget allowed")
		}
	})

	t.Run("a machine whose Node never existed goes at once, not powered off", func(t *testing.T) {
		f.pool(t, "c", kubefarmv1.RolloutStrategy{}, entry("c1", 3, true))
		m := f.waitFinalizer(t, "c-c1")
		f.removeEntries(t, "c")
		f.waitGone(t, m, 10*time.Second)
		f.waitEvent(t, "c-c1", machineremoval.EventReleased, "never joined")
		if calls := f.powerCalls("c-c1"); calls != nil {
			t.Errorf("a machine that never joined was powered off: %v", calls)
		}
	})

	for _, tc := range []struct {
		policy kubefarmv1.DrainTimeoutPolicy
		pool   string
	}{{kubefarmv1.DrainSkip, "dskip"}, {kubefarmv1.DrainHalt, "dhalt"}} {
		t.Run("drainTimeout with policy "+string(tc.policy), func(t *testing.T) {
			host := tc.pool + "1"
			machine := tc.pool + "-" + host
			app := "web-" + tc.pool
			f.pool(t, tc.pool, kubefarmv1.RolloutStrategy{DrainTimeout: &metav1.Duration{Duration: 2 * time.Second}, DrainTimeoutPolicy: tc.policy},
				entry(host, map[kubefarmv1.DrainTimeoutPolicy]int{kubefarmv1.DrainSkip: 4, kubefarmv1.DrainHalt: 5}[tc.policy], false))
			f.registerNode(t, host)
			f.runPod(t, host, app+"-1", map[string]string{"app": app})
			f.setBudget(t, app, 1, 0)
			m := f.waitFinalizer(t, machine)
			f.removeEntries(t, tc.pool)
			e := f.waitEvent(t, machine, machineremoval.EventDrainTimedOut, "drainTimeoutPolicy "+string(tc.policy))
			if e.Type != corev1.EventTypeWarning {
				t.Errorf("DrainTimedOut is %s", e.Type)
			}
			switch tc.policy {
			case kubefarmv1.DrainSkip:
				f.waitGone(t, m, 30*time.Second)
				f.wantNodeGone(t, host)
			case kubefarmv1.DrainHalt:
				f.waitRemoving(t, machine, kubefarmv1.ReasonRemovalDrainHeld, "drain timed out after 2s")
				if held := f.machine(t, machine); held == nil {
					t.Fatal("Halt let the Machine go")
				}
				if f.node(t, host) == nil {
					t.Fatal("Halt deleted the Node")
				}
				// Still draining: the budget relaxed, it goes.
				f.setBudget(t, app, 0, 1)
				f.waitGone(t, m, 30*time.Second)
				f.wantNodeGone(t, host)
			}
		})
	}

	t.Run("spec.power: powered off once, after the Node is deleted", func(t *testing.T) {
		f.pool(t, "e", kubefarmv1.RolloutStrategy{}, entry("e1", 6, true), entry("e2", 7, false))
		f.registerNode(t, "e1")
		f.registerNode(t, "e2")
		m1, m2 := f.waitFinalizer(t, "e-e1"), f.waitFinalizer(t, "e-e2")
		f.removeEntries(t, "e")
		f.waitGone(t, m1, 30*time.Second)
		f.waitGone(t, m2, 30*time.Second)
		calls := f.powerCalls("e-e1")
		if len(calls) != 1 || !calls[0].nodeGone {
			t.Errorf("power-off calls of e-e1: %+v, want one, after its Node was deleted", calls)
		}
		if len(calls) == 1 && (calls[0].left <= machineremoval.DefaultPowerOffTimeout || calls[0].left > powerOffTimeout) {
			t.Errorf("the power off had %s, want PowerOffTimeout %s, not the default", calls[0].left, powerOffTimeout)
		}
		if calls := f.powerCalls("e-e2"); calls != nil {
			t.Errorf("e-e2 has no spec.power but was powered off: %+v", calls)
		}
		f.waitEvent(t, "e-e1", machineremoval.EventPoweredOff, "qmp")
		f.waitEvent(t, "e-e1", machineremoval.EventReleased, "powered off")
	})

	t.Run("a driver that cannot power off (qmp) does not strand the Machine", func(t *testing.T) {
		f.pool(t, "u", kubefarmv1.RolloutStrategy{}, entry("u1", 8, true))
		f.registerNode(t, "u1")
		m := f.waitFinalizer(t, "u-u1")
		f.removeEntries(t, "u")
		f.waitGone(t, m, 30*time.Second)
		if calls := f.powerCalls("u-u1"); len(calls) != 1 {
			t.Errorf("power-off calls of u-u1: %+v, want one", calls)
		}
		f.waitEvent(t, "u-u1", machineremoval.EventPoweredOff, "cannot power a machine off")
	})
}

// powerOffTimeout is the fixture's PowerOffTimeout, above the default.
const powerOffTimeout = 3 * time.Minute

// start runs the integration environment and a manager with the NodePool
// controller and this one (polling every 200ms, powering off through the
// recording function), and creates the namespace, the TenantCluster, its
// credential and a BootImage.
func start(t *testing.T) *fixture {
	t.Helper()
	env := testenv.StartT(t, testenv.Options{})
	f := &fixture{env: env}
	mgr := env.BareManagerT(t)
	if err := (&nodepool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nodepool-controller")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenantcluster.NewTenantCache(mgr.GetClient())
	if err != nil {
		t.Fatal(err)
	}
	r := &machineremoval.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("machineremoval-controller"), Tenants: tenants, Poll: 200 * time.Millisecond,
		PowerOff: f.recordPowerOff, PowerOffTimeout: powerOffTimeout}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.RunManager(mgr))

	ctx := context.Background()
	f.ns = env.NewNamespace(t, "removal-")
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace = f.ns
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	f.tc = tc
	img, err := examples.BootImage()
	if err != nil {
		t.Fatal(err)
	}
	img.Name = "image-machineremoval"
	if err := env.Client.Create(ctx, img); err != nil {
		t.Fatal(err)
	}
	f.img = img.Name
	f.writeCredential(t)
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.kubelet(kctx) }()
	t.Cleanup(func() { stop(); <-done })
	return f
}

// recordPowerOff is the power-off function: it records the call and
// whether the tenant still had the machine's Node then.
func (f *fixture) recordPowerOff(ctx context.Context, m *kubefarmv1.Machine) error {
	var left time.Duration
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	err := f.env.Client.Get(ctx, client.ObjectKey{Name: m.Spec.Hostname}, &corev1.Node{})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, powerCall{machine: m.Name, nodeGone: apierrors.IsNotFound(err), left: left})
	if strings.HasPrefix(m.Name, "u-") {
		// Pool u stands for a driver that cannot power off (qmp).
		return fmt.Errorf("powering %s off: %w", m.Name, power.ErrUnsupported)
	}
	return nil
}

func (f *fixture) powerCalls(machine string) []powerCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []powerCall
	for _, c := range f.calls {
		if c.machine == machine {
			out = append(out, c)
		}
	}
	return out
}

// kubelet finishes the terminating pods of the namespace, as the node's
// kubelet would once their containers stopped, and records them.
func (f *fixture) kubelet(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := f.env.Client.List(ctx, pods, client.InNamespace(f.ns)); err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil {
				continue
			}
			if err := f.env.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) == nil {
				f.mu.Lock()
				if !slices.Contains(f.finished, p.Namespace+"/"+p.Name) {
					f.finished = append(f.finished, p.Namespace+"/"+p.Name)
				}
				f.mu.Unlock()
			}
		}
		return false, nil
	})
}

func (f *fixture) finishedPods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.finished)
}

// entry is a pool entry named name with the i-th addresses, with qmp power
// control when power.
func entry(name string, i int, power bool) kubefarmv1.MachineEntry {
	e := kubefarmv1.MachineEntry{Name: name, IP: fmt.Sprintf("10.60.0.%d", 10+i), MACs: []string{fmt.Sprintf("02:00:00:60:00:%02x", i)}}
	if power {
		e.Power = &kubefarmv1.PowerSpec{Driver: kubefarmv1.PowerQMP, Address: fmt.Sprintf("tcp://127.0.0.1:%d", 40000+i)}
	}
	return e
}

// pool creates NodePool name with entries and waits for their Machines.
func (f *fixture) pool(t *testing.T, name string, rollout kubefarmv1.RolloutStrategy, entries ...kubefarmv1.MachineEntry) {
	t.Helper()
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: f.tc.Name, BootImage: f.img,
			Network:  kubefarmv1.BootNetwork{Subnet: "10.60.0.0/16", Domain: "farm.example.com"},
			Rollout:  rollout,
			Machines: entries,
		},
	}
	if err := f.env.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f.eventually(t, "the NodePool controller creates Machine "+name+"-"+e.Name, func(ctx context.Context) (bool, error) {
			return f.machine(t, name+"-"+e.Name) != nil, nil
		})
	}
}

// removeEntries empties the pool's spec.machines: the NodePool controller
// deletes their Machines.
func (f *fixture) removeEntries(t *testing.T, pool string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &kubefarmv1.NodePool{}
		if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: pool}, p); err != nil {
			return err
		}
		p.Spec.Machines = nil
		return f.env.Client.Update(context.Background(), p)
	}); err != nil {
		t.Fatal(err)
	}
}

// writeCredential writes the tenant's internal admin kubeconfig Secret as
// the TenantCluster controller would, for a system:masters user of the
// stand-in API server.
func (f *fixture) writeCredential(t *testing.T) {
	t.Helper()
	u, err := f.env.AddUser(envtest.User{Name: "tenant-admin", Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: tenantcluster.InternalAdminKubeconfigSecretName(f.tc.Name)},
		Data:       map[string][]byte{tenantcluster.AdminKubeconfigKey: kubeconfig},
	}
	if err := f.env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// registerNode registers a Ready Node as the kubelet does.
func (f *fixture) registerNode(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if err := f.env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(f.env.Client.Delete(context.Background(), n)) })
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := f.env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// runPod binds a pod to node, Running and Ready: the eviction handler lets
// a pod that is not Ready go whenever the budget is met
// (unhealthyPodEvictionPolicy IfHealthyBudget), which would bypass the
// budget under test.
func (f *fixture) runPod(t *testing.T, node, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "app"}}},
	}
	if err := f.env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := f.env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// setBudget makes the PodDisruptionBudget of the pods labelled app=name
// (created on first use) ask for minAvailable, and writes its status as
// the disruption controller would for one healthy pod: allowed
// disruptions, for the current generation (the eviction handler refuses
// while the status is behind the spec).
func (f *fixture) setBudget(t *testing.T, name string, minAvailable, allowed int32) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb := &policyv1.PodDisruptionBudget{}
		min := intstr.FromInt32(minAvailable)
		switch err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, pdb); {
		case apierrors.IsNotFound(err):
			pdb = &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
				Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
			}
			if err := f.env.Client.Create(ctx, pdb); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			pdb.Spec.MinAvailable = &min
			if err := f.env.Client.Update(ctx, pdb); err != nil {
				return err
			}
		}
		pdb.Status = policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
			CurrentHealthy: 1, DesiredHealthy: minAvailable, ExpectedPods: 1,
			Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
				Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now(), ObservedGeneration: pdb.Generation}},
		}
		if allowed == 0 {
			pdb.Status.Conditions[0].Status, pdb.Status.Conditions[0].Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
		}
		return f.env.Client.Status().Update(ctx, pdb)
	}); err != nil {
		t.Fatal(err)
	}
}

// machine is Machine name as the API server holds it, nil when gone.
func (f *fixture) machine(t *testing.T, name string) *kubefarmv1.Machine {
	t.Helper()
	m := &kubefarmv1.Machine{}
	switch err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, m); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		t.Fatal(err)
	}
	return m
}

// node is Node name, nil when gone.
func (f *fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	switch err := f.env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		t.Fatal(err)
	}
	return n
}

func (f *fixture) wantNodeGone(t *testing.T, name string) {
	t.Helper()
	if n := f.node(t, name); n != nil {
		t.Errorf("node %s is still in the tenant", name)
	}
}

// waitFinalizer waits for the removal finalizer on Machine name.
func (f *fixture) waitFinalizer(t *testing.T, name string) *kubefarmv1.Machine {
	t.Helper()
	var m *kubefarmv1.Machine
	f.eventually(t, "Machine "+name+" carries the removal finalizer", func(context.Context) (bool, error) {
		m = f.machine(t, name)
		return m != nil && controllerutil.ContainsFinalizer(m, kubefarmv1.FinalizerMachineRemoval), nil
	})
	return m
}

// waitGone waits, within d, until the Machine m (this UID) is gone.
func (f *fixture) waitGone(t *testing.T, m *kubefarmv1.Machine, d time.Duration) {
	t.Helper()
	f.eventuallyWithin(t, "Machine "+m.Name+" is gone", d, func(context.Context) (bool, error) {
		live := f.machine(t, m.Name)
		return live == nil || live.UID != m.UID, nil
	})
}

// waitRemoving waits for the Machine's Removing condition to be True with
// reason and a message containing says.
func (f *fixture) waitRemoving(t *testing.T, machine, reason, says string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	f.eventually(t, fmt.Sprintf("Machine %s Removing=True %s %q", machine, reason, says), func(context.Context) (bool, error) {
		m := f.machine(t, machine)
		if m == nil {
			return false, fmt.Errorf("Machine %s is gone", machine)
		}
		c = meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionRemoving)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, says), nil
	})
	return c
}

// waitEvent waits for an event about machine with reason whose note
// contains says.
func (f *fixture) waitEvent(t *testing.T, machine, reason, says string) *eventsv1.Event {
	t.Helper()
	var found *eventsv1.Event
	f.eventually(t, fmt.Sprintf("event %s on %s saying %q", reason, machine, says), func(ctx context.Context) (bool, error) {
		list := &eventsv1.EventList{}
		if err := f.env.Client.List(ctx, list, client.InNamespace(f.ns)); err != nil {
			return false, err
		}
		for i := range list.Items {
			e := &list.Items[i]
			if e.Regarding.Name == machine && e.Reason == reason && strings.Contains(e.Note, says) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func (f *fixture) eventually(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	f.eventuallyWithin(t, what, 30*time.Second, cond)
}

func (f *fixture) eventuallyWithin(t *testing.T, what string, d time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
