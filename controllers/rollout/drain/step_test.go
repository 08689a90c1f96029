package drain_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// The tests run Step against a real kube-apiserver and etcd (envtest), so
// the evictions meet the API server's real eviction handler, which is what
// enforces PodDisruptionBudgets. envtest runs nothing else, so the tests
// play the missing parts themselves, each in a helper named for it:
//   - playDisruptionController writes a budget's status, as the disruption
//     controller of kube-controller-manager does; without it the eviction
//     handler refuses every eviction the budget covers.
//   - playKubelet finishes the pods that are terminating on a node: an
//     accepted eviction only sets the pod's deletionTimestamp, and it is the
//     kubelet that removes the pod once its containers have stopped.
//   - the ReplicaSet controller's replacement of an evicted pod is one pod
//     the test creates on another node.
// Pods are bare Pods bound to a node (spec.nodeName), with the owner
// references their controllers would give them, and the status a kubelet
// would post (Running and Ready: the eviction handler ignores budgets for
// Pending pods). Every client call is read-your-writes, so nothing polls.

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

type fixture struct {
	cs kubernetes.Interface
	ns string
	// node is the node drained; other is a node beside it.
	node, other *corev1.Node
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "drain-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{cs: cs, ns: ns.Name}
	mkNode := func(name string) *corev1.Node {
		// Cordoned, as the rollout does before it drains.
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.NodeSpec{Unschedulable: true},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.node, f.other = mkNode(ns.Name+"-n1"), mkNode(ns.Name+"-n2")
	return f
}

func (f *fixture) ref(name string) string { return f.ns + "/" + name }

func (f *fixture) refs(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, f.ref(n))
	}
	return out
}

// createPod creates a pod bound to node and posts the status a kubelet
// would: phase, and a Ready condition when the phase is Running.
func (f *fixture) createPod(t *testing.T, name string, node *corev1.Node, ph corev1.PodPhase, changes ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	for _, change := range changes {
		change(p)
	}
	p, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	p.Status.Phase = ph
	if ph == corev1.PodRunning {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	}
	p, err = f.cs.CoreV1().Pods(f.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("posting the status of pod %s: %v", name, err)
	}
	return p
}

func labeled(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
}

// playKubelet does what the kubelet of node does with its terminating pods
// once their containers have stopped: it deletes them for good (grace
// period 0). It returns the pods it finished, namespace/name.
func (f *fixture) playKubelet(t *testing.T, node *corev1.Node) []string {
	t.Helper()
	ctx := context.Background()
	list, err := f.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var finished []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			continue
		}
		err := f.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		if err != nil {
			t.Fatalf("kubelet: finishing pod %s: %v", p.Name, err)
		}
		finished = append(finished, p.Namespace+"/"+p.Name)
	}
	return finished
}

// playDisruptionController writes the status of the budget called name as
// the disruption controller does for an integer minAvailable: the pods its
// selector matches are expected; the healthy ones are those Ready, not
// terminating and not in disruptedPods (pods an eviction has just been
// granted for); the disruptedPods whose pod is gone or terminating are
// dropped; and as many disruptions are allowed as there are healthy pods
// beyond minAvailable. observedGeneration says the status is up to date.
func (f *fixture) playDisruptionController(t *testing.T, name string) *policyv1.PodDisruptionBudget {
	t.Helper()
	ctx := context.Background()
	pdb, err := f.cs.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := f.cs.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		t.Fatal(err)
	}
	disrupted := map[string]metav1.Time{}
	healthy := int32(0)
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if at, ok := pdb.Status.DisruptedPods[p.Name]; ok {
			disrupted[p.Name] = at
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				healthy++
			}
		}
	}
	desired := int32(pdb.Spec.MinAvailable.IntValue())
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptedPods:      disrupted,
		DisruptionsAllowed: max(0, healthy-desired),
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       int32(len(pods.Items)),
	}
	allowed := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason, ObservedGeneration: pdb.Generation, LastTransitionTime: metav1.Now()}
	if pdb.Status.DisruptionsAllowed == 0 {
		allowed.Status, allowed.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	pdb.Status.Conditions = []metav1.Condition{allowed}
	pdb, err = f.cs.PolicyV1().PodDisruptionBudgets(f.ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing the status of budget %s: %v", name, err)
	}
	return pdb
}

func (f *fixture) createBudget(t *testing.T, name string, minAvailable int, app string) {
	t.Helper()
	_, err := f.cs.PolicyV1().PodDisruptionBudgets(f.ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: new(intstr.FromInt32(int32(minAvailable))),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) get(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	p, err := f.cs.CoreV1().Pods(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// evictionCondition is the DisruptionTarget condition the API server's
// eviction handler puts on a pod before it deletes it, and that a plain
// DELETE does not: it tells an eviction from a deletion.
func evictionCondition(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// wasEvicted asserts that the pod is terminating, through the Eviction API.
func (f *fixture) wasEvicted(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		p, ok := f.get(t, name)
		switch {
		case !ok:
			t.Errorf("pod %s is gone, want it terminating after its eviction", name)
		case p.DeletionTimestamp == nil:
			t.Errorf("pod %s is not terminating, want it evicted", name)
		case evictionCondition(p) == nil:
			t.Errorf("pod %s is terminating but not through the Eviction API: conditions %+v", name, p.Status.Conditions)
		}
	}
}

// untouched asserts that the pod is still there, not terminating, and was
// never the object of an eviction.
func (f *fixture) untouched(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		p, ok := f.get(t, name)
		switch {
		case !ok:
			t.Errorf("pod %s is gone, want it left alone", name)
		case p.DeletionTimestamp != nil:
			t.Errorf("pod %s is terminating, want it left alone", name)
		case evictionCondition(p) != nil:
			t.Errorf("pod %s was evicted, want it left alone", name)
		}
	}
}

func (f *fixture) step(t *testing.T) drain.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := drain.Step(ctx, f.cs, f.node.Name)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	t.Logf("Step: %+v", res)
	return res
}

func sameStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// TestDrain drains a node with a budget on it: the first pass evicts what
// nothing protects and the one pod the budget lets go, and reports the
// other as blocked by the budget; once the kubelet has finished the evicted
// pods and the budget has a replacement, a later pass evicts the rest; and
// the drain ends with the DaemonSet and mirror pods still on the node.
func TestDrain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rs := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f", UID: "11111111-1111-4111-8111-111111111111", Controller: new(true), BlockOwnerDeletion: new(true)}}
	}
	web := labeled("app", "web")

	// Two replicas of a Deployment behind a budget that lets one go.
	f.createPod(t, "web-0", f.node, corev1.PodRunning, web, rs)
	f.createPod(t, "web-1", f.node, corev1.PodRunning, web, rs)
	f.createBudget(t, "web", 1, "web")
	if pdb := f.playDisruptionController(t, "web"); pdb.Status.DisruptionsAllowed != 1 {
		t.Fatalf("the budget allows %d disruptions, want 1 to begin with", pdb.Status.DisruptionsAllowed)
	}
	// A pod no controller manages, with an emptyDir: kubectl drain would
	// need --force and --delete-emptydir-data.
	f.createPod(t, "solo", f.node, corev1.PodRunning, func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	// A finished Job's pod.
	f.createPod(t, "done", f.node, corev1.PodSucceeded, labeled("batch.kubernetes.io/job-name", "once"))
	// A DaemonSet's pod: no budget covers it, so an eviction would go
	// through.
	f.createPod(t, "ds-node-agent", f.node, corev1.PodRunning, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "node-agent", UID: "22222222-2222-4222-8222-222222222222", Controller: new(true), BlockOwnerDeletion: new(true)}}
	})
	// The mirror of a static pod, as the kubelet registers it.
	f.createPod(t, "static-"+f.node.Name, f.node, corev1.PodRunning, func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "5c3b9e1f0a7d"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: f.node.Name, UID: f.node.UID, Controller: new(true)}}
	})
	// A pod someone else deleted before the drain: terminating already.
	f.createPod(t, "leaving", f.node, corev1.PodRunning, rs)
	if err := f.cs.CoreV1().Pods(f.ns).Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.get(t, "leaving"); p == nil || p.DeletionTimestamp == nil {
		t.Fatal("the pod deleted before the drain is not terminating")
	}
	// A pod on another node, which the drain must not see.
	f.createPod(t, "elsewhere", f.other, corev1.PodRunning, rs)

	t.Run("the first pass evicts what the budget allows and reports the rest blocked", func(t *testing.T) {
		res := f.step(t)
		sameStrings(t, "Evicted", res.Evicted, f.refs("done", "solo", "web-0"))
		sameStrings(t, "Terminating", res.Terminating, f.refs("leaving"))
		if len(res.Blocked) != 1 {
			t.Fatalf("Blocked = %+v, want web-1 alone", res.Blocked)
		}
		b := res.Blocked[0]
		if b.Pod != f.ref("web-1") || b.Code != 429 || !b.DisruptionBudget || !strings.Contains(b.Reason, "disruption budget web ") {
			t.Errorf("Blocked = %+v, want web-1 refused with 429 by the budget web, named in the reason", b)
		}
		// done, solo, web-0 and web-1 to evict; leaving terminating.
		if res.Remaining != 5 || res.Deferred != 0 {
			t.Errorf("Remaining, Deferred = %d, %d, want 5, 0", res.Remaining, res.Deferred)
		}

		f.wasEvicted(t, "solo", "web-0")
		if _, ok := f.get(t, "done"); ok {
			t.Error("the finished pod is still there: its eviction deletes it at once")
		}
		f.untouched(t, "web-1", "ds-node-agent", "static-"+f.node.Name, "elsewhere")
		if p, _ := f.get(t, "leaving"); p == nil || evictionCondition(p) != nil {
			t.Error("the pod already terminating was evicted again (or is gone)")
		}
		pdb, err := f.cs.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pdb.Status.DisruptedPods["web-0"]; !ok || pdb.Status.DisruptionsAllowed != 0 {
			t.Errorf("budget status %+v: the eviction handler did not count web-0's eviction against it", pdb.Status)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a pass while the pods terminate waits for them and is still blocked", func(t *testing.T) {
		res := f.step(t)
		sameStrings(t, "Evicted", res.Evicted, nil)
		sameStrings(t, "Terminating", res.Terminating, f.refs("leaving", "solo", "web-0"))
		if len(res.Blocked) != 1 || res.Blocked[0].Pod != f.ref("web-1") || !res.Blocked[0].DisruptionBudget {
			t.Errorf("Blocked = %+v, want web-1 by the budget", res.Blocked)
		}
		if res.Remaining != 4 {
			t.Errorf("Remaining = %d, want 4", res.Remaining)
		}
		f.untouched(t, "web-1")
	})
	if t.Failed() {
		return
	}

	t.Run("once the evicted pods are gone and replaced, the next pass evicts the rest", func(t *testing.T) {
		sameStrings(t, "the pods the kubelet finished", f.playKubelet(t, f.node), f.refs("leaving", "solo", "web-0"))
		// The ReplicaSet controller replaces web-0, on another node since
		// this one is cordoned.
		f.createPod(t, "web-2", f.other, corev1.PodRunning, web, rs)
		if pdb := f.playDisruptionController(t, "web"); pdb.Status.DisruptionsAllowed != 1 {
			t.Fatalf("the budget allows %d disruptions, want 1 with web-1 and web-2 healthy", pdb.Status.DisruptionsAllowed)
		}

		res := f.step(t)
		sameStrings(t, "Evicted", res.Evicted, f.refs("web-1"))
		sameStrings(t, "Terminating", res.Terminating, nil)
		if len(res.Blocked) != 0 || res.Remaining != 1 {
			t.Errorf("Blocked, Remaining = %+v, %d, want none, 1", res.Blocked, res.Remaining)
		}
		f.wasEvicted(t, "web-1")
	})
	if t.Failed() {
		return
	}

	t.Run("the drain ends with the DaemonSet and mirror pods on the node", func(t *testing.T) {
		sameStrings(t, "the pods the kubelet finished", f.playKubelet(t, f.node), f.refs("web-1"))
		res := f.step(t)
		if res.Remaining != 0 || len(res.Evicted)+len(res.Blocked)+len(res.Terminating)+res.Deferred != 0 {
			t.Errorf("Step = %+v, want the node drained", res)
		}
		f.untouched(t, "ds-node-agent", "static-"+f.node.Name, "elsewhere", "web-2")
	})
}

// TestStepDoesNotWaitOutRetryAfter: while a budget's status is behind its
// spec (here: just created, no disruption controller has seen it), the API
// server refuses the evictions it covers with 429 and Retry-After: 10, which
// client-go would silently sleep through and retry, ten times. Step reports
// the refusal at once instead.
func TestStepDoesNotWaitOutRetryAfter(t *testing.T) {
	f := newFixture(t)
	f.createPod(t, "db-0", f.node, corev1.PodRunning, labeled("app", "db"))
	f.createBudget(t, "db", 0, "db")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := drain.Step(ctx, f.cs, f.node.Name)
	if elapsed := time.Since(start); elapsed > 8*time.Second {
		t.Errorf("Step took %v: it waited for the Retry-After", elapsed)
	}
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	if len(res.Blocked) != 1 || res.Blocked[0].Pod != f.ref("db-0") || res.Blocked[0].Code != 429 ||
		!res.Blocked[0].DisruptionBudget || !strings.Contains(res.Blocked[0].Reason, "disruption budget db is still being processed") {
		t.Errorf("Blocked = %+v, want db-0 refused by the budget db, not processed yet", res.Blocked)
	}
	if res.Remaining != 1 || len(res.Evicted) != 0 {
		t.Errorf("Remaining, Evicted = %d, %q, want 1, none", res.Remaining, res.Evicted)
	}
	f.untouched(t, "db-0")

	// Once the budget's status is written, it allows the eviction (it
	// asks for none available).
	f.playDisruptionController(t, "db")
	res, err = drain.Step(ctx, f.cs, f.node.Name)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	sameStrings(t, "Evicted", res.Evicted, f.refs("db-0"))
	f.wasEvicted(t, "db-0")
}

// TestStepBoundsEachPass: the node's pods are listed page by page to the
// end, and one pass posts at most the bound of evictions, in
// namespace/name order; the next pass posts the rest. (Step's own bounds
// are MaxEvictionsPerStep and a page of 500; StepWithLimits sets smaller
// ones.)
func TestStepBoundsEachPass(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"p4", "p0", "p3", "p1", "p2"} {
		f.createPod(t, name, f.node, corev1.PodRunning)
	}
	f.createPod(t, "ds", f.node, corev1.PodRunning, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d", UID: "33333333-3333-4333-8333-333333333333", Controller: new(true)}}
	})
	f.createPod(t, "elsewhere", f.other, corev1.PodRunning)

	res, err := drain.StepWithLimits(ctx, f.cs, f.node.Name, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	sameStrings(t, "first pass: Evicted", res.Evicted, f.refs("p0", "p1", "p2"))
	if res.Deferred != 2 || res.Remaining != 5 {
		t.Errorf("first pass: Deferred, Remaining = %d, %d, want 2, 5", res.Deferred, res.Remaining)
	}
	f.wasEvicted(t, "p0", "p1", "p2")
	f.untouched(t, "p3", "p4", "ds", "elsewhere")

	res, err = drain.StepWithLimits(ctx, f.cs, f.node.Name, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	sameStrings(t, "second pass: Evicted", res.Evicted, f.refs("p3", "p4"))
	sameStrings(t, "second pass: Terminating", res.Terminating, f.refs("p0", "p1", "p2"))
	if res.Deferred != 0 || res.Remaining != 5 {
		t.Errorf("second pass: Deferred, Remaining = %d, %d, want 0, 5", res.Deferred, res.Remaining)
	}
	f.wasEvicted(t, "p3", "p4")

	f.playKubelet(t, f.node)
	res, err = drain.StepWithLimits(ctx, f.cs, f.node.Name, 2, 3)
	if err != nil || res.Remaining != 0 {
		t.Errorf("last pass: %+v, %v, want the node drained", res, err)
	}
	f.untouched(t, "ds", "elsewhere")
}

// TestStepRefusesNoNode: an empty node name would select every pod not yet
// scheduled, cluster-wide.
func TestStepRefusesNoNode(t *testing.T) {
	f := newFixture(t)
	// A pod no scheduler has placed.
	p, err := f.cs.CoreV1().Pods(f.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unscheduled"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain.Step(context.Background(), f.cs, ""); err == nil {
		t.Error("Step drained the node called \"\"")
	}
	f.untouched(t, p.Name)
}

// listThenRun is a clientset whose pod lists run then once they have
// answered: it puts something between Step's list and its evictions.
type listThenRun struct {
	kubernetes.Interface
	then func()
}

func (c *listThenRun) CoreV1() corev1client.CoreV1Interface {
	return listThenRunCore{c.Interface.CoreV1(), c}
}

type listThenRunCore struct {
	corev1client.CoreV1Interface
	c *listThenRun
}

func (c listThenRunCore) Pods(ns string) corev1client.PodInterface {
	return listThenRunPods{c.CoreV1Interface.Pods(ns), c.c}
}

type listThenRunPods struct {
	corev1client.PodInterface
	c *listThenRun
}

func (p listThenRunPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	list, err := p.PodInterface.List(ctx, opts)
	if then := p.c.then; then != nil {
		p.c.then = nil
		then()
	}
	return list, err
}

// TestStepPodGoneBeforeEviction: a pod that goes between the list and its
// eviction (404) is no error, and no longer keeps the drain going.
func TestStepPodGoneBeforeEviction(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createPod(t, "a", f.node, corev1.PodRunning)
	f.createPod(t, "b", f.node, corev1.PodRunning)
	cs := &listThenRun{Interface: f.cs, then: func() {
		if err := f.cs.CoreV1().Pods(f.ns).Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}}
	res, err := drain.Step(ctx, cs, f.node.Name)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	if cs.then != nil {
		t.Fatal("Step listed no pods")
	}
	sameStrings(t, "Evicted", res.Evicted, f.refs("b"))
	if len(res.Blocked) != 0 || res.Remaining != 1 {
		t.Errorf("Blocked, Remaining = %+v, %d, want none, 1 (b)", res.Blocked, res.Remaining)
	}
	f.wasEvicted(t, "b")
}

// TestStepReportsOtherRefusals: an eviction the API server refuses for
// another reason than a budget (here 403: the caller may list pods but not
// evict them) is reported with the server's words, not returned as an
// error, and deletes nothing.
func TestStepReportsOtherRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.createPod(t, "a", f.node, corev1.PodRunning)
	user, err := env.AddUser(envtest.User{Name: f.ns + "-lister"})
	if err != nil {
		t.Fatal(err)
	}
	role, err := f.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-pod-lister"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: f.ns + "-lister"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kubernetes.NewForConfig(user.Config())
	if err != nil {
		t.Fatal(err)
	}

	res, err := drain.Step(ctx, lister, f.node.Name)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	if len(res.Blocked) != 1 || res.Blocked[0].Pod != f.ref("a") || res.Blocked[0].Code != 403 ||
		res.Blocked[0].DisruptionBudget || !strings.Contains(res.Blocked[0].Reason, `cannot create resource "pods/eviction"`) {
		t.Errorf("Blocked = %+v, want a refused with 403 for want of the right to evict", res.Blocked)
	}
	if res.Remaining != 1 || len(res.Evicted) != 0 {
		t.Errorf("Remaining, Evicted = %d, %q, want 1, none", res.Remaining, res.Evicted)
	}
	f.untouched(t, "a")
}

// brokenPolicy is a clientset whose evictions go to an address where no
// API server listens.
type brokenPolicy struct {
	kubernetes.Interface
	policy policyv1client.PolicyV1Interface
}

func (c brokenPolicy) PolicyV1() policyv1client.PolicyV1Interface { return c.policy }

// TestStepReturnsErrorsNotAboutAPod: a list that fails, an eviction that
// gets no answer, and a context that has ended are errors of the pass, not
// refusals of one pod.
func TestStepReturnsErrorsNotAboutAPod(t *testing.T) {
	f := newFixture(t)
	f.createPod(t, "a", f.node, corev1.PodRunning)
	f.createPod(t, "b", f.node, corev1.PodRunning)

	t.Run("the list fails", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := drain.Step(ctx, f.cs, f.node.Name); err == nil {
			t.Error("Step with a cancelled context returned no error")
		}
	})

	t.Run("an eviction gets no answer", func(t *testing.T) {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
		nowhere, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := drain.Step(context.Background(), brokenPolicy{f.cs, nowhere.PolicyV1()}, f.node.Name)
		if err == nil || !strings.Contains(err.Error(), f.ref("a")) {
			t.Errorf("Step = %+v, %v, want an error evicting a", res, err)
		}
		if len(res.Blocked) != 0 || len(res.Evicted) != 0 {
			t.Errorf("Step = %+v, want neither blocked nor evicted pods", res)
		}
	})

	t.Run("the context ends during the evictions", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs := &listThenRun{Interface: f.cs, then: cancel}
		if _, err := drain.Step(ctx, cs, f.node.Name); err == nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Step = %v, want context.Canceled", err)
		}
	})
	f.untouched(t, "a", "b")
}
