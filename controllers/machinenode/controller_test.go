package machinenode_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/csrapproval"
	"github.com/kubefarm/kubefarm/controllers/machinenode"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// The tenant stand-in, as in controllers/csrapproval: one real API server
// (envtest) plays both the admin cluster and the tenant. The TenantCluster
// is a real object, but no TenantCluster controller runs; the test writes
// the internal admin kubeconfig Secret the TenantCluster controller would
// write, for a system:masters user of the envtest API server, so the Node
// watch reads "the tenant's" Nodes from envtest. The test registers the
// Nodes as the kubelet would (name = hostname, the network taint, then
// nodeInfo.bootID and a Ready condition through the status subresource),
// though as an administrator: envtest runs no Node authorizer or
// NodeRestriction. It writes the Machines' lastBoot and NetworkVerified
// with kubefarm-pxe's own StatusRecorder. The NodePool controller makes
// the Machines and counts their readiness, as in production.

const (
	boot1 = "11111111-1111-4111-8111-111111111111"
	boot2 = "22222222-2222-4222-8222-222222222222"
)

var otherTaint = corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}

type fixture struct {
	env *testenv.Env
	// cache is the manager's client: what the controllers read.
	cache   client.Client
	watches *machinenode.NodeWatches
	tc      *kubefarmv1.TenantCluster
	// barriers numbers the Ready messages settle writes.
	barriers int
}

func TestMachineNodes(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	f := start(t)
	ctx := context.Background()

	f.pool(t)
	f.writeCredential(t)
	f.eventually(t, "the tenant's Node watch runs", func(context.Context) (bool, error) {
		_, ok := f.watches.Running()[client.ObjectKeyFromObject(f.tc)]
		return ok, nil
	})

	t.Run("a machine whose node never registered is NodeNotFound", func(t *testing.T) {
		f.waitNodeReady(t, "workers-m2", metav1.ConditionFalse, kubefarmv1.ReasonNodeNotFound, "")
	})

	f.registerNode(t, "m1", boot2)
	t.Run("a Ready node makes its Machine NodeReady and counts in the pool", func(t *testing.T) {
		f.waitNodeReady(t, "workers-m1", metav1.ConditionTrue, kubefarmv1.ReasonNodeReady, "boot "+boot2)
		f.waitReadyMachines(t, 1)
		f.waitEvent(t, "workers-m1", corev1.EventTypeNormal, kubefarmv1.ConditionNodeReady+kubefarmv1.ReasonNodeReady)
	})

	t.Run("the labels the kubelet may not set are applied and owned", func(t *testing.T) {
		want := map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""}
		f.waitLabels(t, "m1", want)
		n := f.node(t, "m1")
		owned, err := machinenode.OwnedLabels(n, machinenode.FieldOwner)
		if err != nil {
			t.Fatal(err)
		}
		// Not example.com/accelerator, which the kubelet registered.
		if !slices.Equal(owned, []string{"node-role.kubernetes.io/gpu", "node-role.kubernetes.io/worker"}) {
			t.Errorf("owned labels %v", owned)
		}
		// A hand edit removes one; the next pass puts it back.
		f.updateNode(t, "m1", func(n *corev1.Node) { delete(n.Labels, "node-role.kubernetes.io/gpu") })
		f.settle(t, "m1")
		f.waitLabels(t, "m1", want)
	})

	t.Run("the taint stays without a verdict", func(t *testing.T) {
		f.settle(t, "m1")
		f.wantTaints(t, "m1", otherTaint, nodeconfig.NetworkUnavailableTaint)
	})
	t.Run("the taint stays on a verdict of an earlier boot", func(t *testing.T) {
		f.recordBoot(t, "workers-m1", boot1, &bootproto.NetworkVerdict{Verified: true, Reason: "chain verified"})
		f.settle(t, "m1")
		f.wantTaints(t, "m1", otherTaint, nodeconfig.NetworkUnavailableTaint)
	})
	t.Run("the taint stays when the chain is invalid", func(t *testing.T) {
		f.recordBoot(t, "workers-m1", boot2, &bootproto.NetworkVerdict{Verified: false, Reason: "10-other.conflist sorts first"})
		f.settle(t, "m1")
		f.wantTaints(t, "m1", otherTaint, nodeconfig.NetworkUnavailableTaint)
	})
	t.Run("the taint is lifted for a verdict of the node's boot, other taints kept", func(t *testing.T) {
		f.recordBoot(t, "workers-m1", boot2, &bootproto.NetworkVerdict{Verified: true, Reason: "chain verified"})
		f.eventually(t, "the network taint is lifted", func(ctx context.Context) (bool, error) {
			n := &corev1.Node{}
			if err := f.env.Client.Get(ctx, client.ObjectKey{Name: "m1"}, n); err != nil {
				return false, err
			}
			return !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodeconfig.NetworkUnavailableTaint.Key }), nil
		})
		f.wantTaints(t, "m1", otherTaint)
		f.waitEvent(t, "workers-m1", corev1.EventTypeNormal, machinenode.ReasonNetworkTaintLifted)
	})

	t.Run("a NotReady node makes its Machine NodeReady False", func(t *testing.T) {
		f.setReady(t, "m1", corev1.ConditionFalse, "KubeletNotReady", "container runtime is down")
		f.waitNodeReady(t, "workers-m1", metav1.ConditionFalse, kubefarmv1.ReasonNodeNotReady, "container runtime is down")
		f.waitReadyMachines(t, 0)
		f.waitEvent(t, "workers-m1", corev1.EventTypeWarning, kubefarmv1.ConditionNodeReady+kubefarmv1.ReasonNodeNotReady)
	})

	t.Run("a deleted node makes its Machine NodeNotFound", func(t *testing.T) {
		if err := f.env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}); err != nil {
			t.Fatal(err)
		}
		f.waitNodeReady(t, "workers-m1", metav1.ConditionFalse, kubefarmv1.ReasonNodeNotFound, "")
	})

	t.Run("no credential, no watch", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace,
			Name: tenantcluster.InternalAdminKubeconfigSecretName(f.tc.Name)}}
		if err := f.env.Client.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		f.eventually(t, "the tenant's Node watch stops", func(context.Context) (bool, error) {
			_, ok := f.watches.Running()[client.ObjectKeyFromObject(f.tc)]
			return !ok, nil
		})
	})
}

// start runs the integration environment and a manager with the NodePool
// controller, the CSR approval controller (which shares the Machine index)
// and this one, and creates the TenantCluster.
func start(t *testing.T) *fixture {
	t.Helper()
	env := testenv.StartT(t, testenv.Options{})
	mgr := env.BareManagerT(t)
	if err := (&nodepool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nodepool-controller")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenantcluster.NewTenantCache(mgr.GetClient())
	if err != nil {
		t.Fatal(err)
	}
	if err := (&csrapproval.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("csrapproval-controller"), Tenants: tenants}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	r := &machinenode.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("machinenode-controller"), Tenants: tenants}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.RunManager(mgr))

	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	tc, err := examples.TenantCluster()
	if err != nil {
		t.Fatal(err)
	}
	tc.Namespace = ns.Name
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	return &fixture{env: env, cache: mgr.GetClient(), watches: r.Watches, tc: tc}
}

// pool creates NodePool workers with machines m1 (tag gpu) and m2, and its
// BootImage, and waits for the NodePool controller's Machines.
func (f *fixture) pool(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	img, err := examples.BootImage()
	if err != nil {
		t.Fatal(err)
	}
	img.Name = "image-machinenode"
	if err := f.env.Client.Create(ctx, img); err != nil {
		t.Fatal(err)
	}
	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace, Name: "workers"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: f.tc.Name, BootImage: img.Name,
			Network: kubefarmv1.BootNetwork{Subnet: "10.50.0.0/16", Domain: "farm.example.com"},
			Labels:  map[string]string{"node-role.kubernetes.io/worker": "", "example.com/accelerator": "none"},
			Tags: map[string]kubefarmv1.TagSpec{
				"gpu": {Labels: map[string]string{"node-role.kubernetes.io/gpu": ""}},
			},
			Machines: []kubefarmv1.MachineEntry{
				{Name: "m1", IP: "10.50.0.11", MACs: []string{"02:00:00:50:00:01"}, Tags: []string{"gpu"}},
				{Name: "m2", IP: "10.50.0.12", MACs: []string{"02:00:00:50:00:02"}},
			},
		},
	}
	if err := f.env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, "the NodePool controller creates the Machines", func(ctx context.Context) (bool, error) {
		list := &kubefarmv1.MachineList{}
		if err := f.env.Client.List(ctx, list, client.InNamespace(f.tc.Namespace)); err != nil {
			return false, err
		}
		return len(list.Items) == 2, nil
	})
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
		ObjectMeta: metav1.ObjectMeta{Namespace: f.tc.Namespace, Name: tenantcluster.InternalAdminKubeconfigSecretName(f.tc.Name)},
		Data:       map[string][]byte{tenantcluster.AdminKubeconfigKey: kubeconfig},
	}
	if err := f.env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// registerNode registers Node name as the kubelet does: created with its
// hostname label and the taints of its configuration (the network taint
// among them), then its status with the boot ID and Ready.
func (f *fixture) registerNode(t *testing.T, name, bootID string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "example.com/accelerator": "none"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{otherTaint, nodeconfig.NetworkUnavailableTaint}},
	}
	if err := f.env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(f.env.Client.Delete(context.Background(), n)) })
	// The Node watch may apply labels between the create and this write,
	// so it re-reads on a conflict, as the kubelet does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := f.node(t, name)
		n.Status.NodeInfo.BootID = bootID
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}
		return f.env.Client.Status().Update(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) updateNode(t *testing.T, name string, edit func(*corev1.Node)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := f.node(t, name)
		edit(n)
		return f.env.Client.Update(context.Background(), n)
	}); err != nil {
		t.Fatal(err)
	}
}

// setReady writes the Node's Ready condition through the status
// subresource, as the kubelet does.
func (f *fixture) setReady(t *testing.T, name string, status corev1.ConditionStatus, reason, message string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := f.node(t, name)
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason, n.Status.Conditions[i].Message = status, reason, message
			}
		}
		return f.env.Client.Status().Update(context.Background(), n)
	}); err != nil {
		t.Fatal(err)
	}
}

// settle returns once the Node watch has finished a pass over node that
// started after the manager's cache held the Machines as the API server
// does now: the pass that writes the first barrier may still be deciding
// when it is seen; the worker is serial, so the pass that writes the
// second starts only after it.
func (f *fixture) settle(t *testing.T, node string) {
	t.Helper()
	machine := "workers-" + node
	live := &kubefarmv1.Machine{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.tc.Namespace, Name: machine}, live); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, "the manager's cache holds Machine "+machine, func(ctx context.Context) (bool, error) {
		cached := &kubefarmv1.Machine{}
		if err := f.cache.Get(ctx, client.ObjectKeyFromObject(live), cached); err != nil {
			return false, err
		}
		return sameBoot(cached, live), nil
	})
	for range 2 {
		f.barriers++
		msg := fmt.Sprintf("barrier %d", f.barriers)
		f.setReady(t, node, corev1.ConditionTrue, "KubeletReady", msg)
		f.waitNodeReady(t, machine, metav1.ConditionTrue, kubefarmv1.ReasonNodeReady, msg)
	}
}

// sameBoot: a and b record the same boot and network verdict.
func sameBoot(a, b *kubefarmv1.Machine) bool {
	la, lb := a.Status.LastBoot, b.Status.LastBoot
	if (la == nil) != (lb == nil) || la != nil && la.BootID != lb.BootID {
		return false
	}
	ca := meta.FindStatusCondition(a.Status.Conditions, kubefarmv1.ConditionNetworkVerified)
	cb := meta.FindStatusCondition(b.Status.Conditions, kubefarmv1.ConditionNetworkVerified)
	if ca == nil || cb == nil {
		return ca == nil && cb == nil
	}
	return ca.Status == cb.Status && ca.Message == cb.Message
}

// recordBoot writes the Machine's lastBoot and NetworkVerified with
// kubefarm-pxe's StatusRecorder, as /report does.
func (f *fixture) recordBoot(t *testing.T, machine, bootID string, verdict *bootproto.NetworkVerdict) {
	t.Helper()
	rec := httpboot.StatusRecorder{Client: f.env.Client}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &kubefarmv1.Machine{}
		if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.tc.Namespace, Name: machine}, m); err != nil {
			return err
		}
		return rec.RecordBoot(context.Background(), m,
			kubefarmv1.BootRecord{BootID: bootID, ImageDigest: "sha256:" + strings.Repeat("3", 64), Time: metav1.Now()},
			httpboot.NetworkCondition(bootID, verdict))
	}); err != nil {
		t.Fatal(err)
	}
}

// wantTaints: node carries exactly want, in order, besides the
// node.kubernetes.io/ taints of the API server's TaintNodesByCondition
// admission (not-ready, added at registration), which no node lifecycle
// controller removes here.
func (f *fixture) wantTaints(t *testing.T, node string, want ...corev1.Taint) {
	t.Helper()
	got := slices.DeleteFunc(f.node(t, node).Spec.Taints, func(t corev1.Taint) bool {
		return strings.HasPrefix(t.Key, "node.kubernetes.io/")
	})
	if !slices.EqualFunc(got, want, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
		t.Errorf("node %s taints %v, want %v", node, got, want)
	}
}

func (f *fixture) waitNodeReady(t *testing.T, machine string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	var last *metav1.Condition
	f.eventually(t, fmt.Sprintf("Machine %s NodeReady=%s %s %q", machine, status, reason, message), func(ctx context.Context) (bool, error) {
		m := &kubefarmv1.Machine{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: f.tc.Namespace, Name: machine}, m); err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(m.Status.Conditions, kubefarmv1.ConditionNodeReady)
		return last != nil && last.Status == status && last.Reason == reason && strings.Contains(last.Message, message), nil
	})
}

func (f *fixture) waitReadyMachines(t *testing.T, n int32) {
	t.Helper()
	f.eventually(t, fmt.Sprintf("the pool counts %d ready machines", n), func(ctx context.Context) (bool, error) {
		p := &kubefarmv1.NodePool{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: f.tc.Namespace, Name: "workers"}, p); err != nil {
			return false, err
		}
		return p.Status.Machines == 2 && p.Status.ReadyMachines == n, nil
	})
}

func (f *fixture) waitLabels(t *testing.T, node string, want map[string]string) {
	t.Helper()
	f.eventually(t, fmt.Sprintf("node %s has labels %v", node, want), func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := f.env.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, err
		}
		for k, v := range want {
			if have, ok := n.Labels[k]; !ok || have != v {
				return false, nil
			}
		}
		return true, nil
	})
}

func (f *fixture) waitEvent(t *testing.T, machine, typ, reason string) {
	t.Helper()
	f.eventually(t, fmt.Sprintf("a %s event %s on Machine %s", typ, reason, machine), func(ctx context.Context) (bool, error) {
		list := &eventsv1.EventList{}
		if err := f.env.Client.List(ctx, list, client.InNamespace(f.tc.Namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "Machine" && e.Regarding.Name == machine && e.Type == typ && e.Reason == reason
		}), nil
	})
}

func (f *fixture) eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return ok, err
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
