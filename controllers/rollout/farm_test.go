package rollout_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// fakeFarm is the named stand-in for everything of a farm that cannot run
// inside envtest. For the machines of one namespace it plays:
//   - each node's kubelet: the Node's Ready condition and nodeInfo.bootID,
//     and finishing pods that are terminating (no container runtime);
//   - kubefarm-agent: a machine whose Machine is Rebooting from the boot it
//     runs goes down (Node NotReady) and comes back rebootTime later (at
//     the first step from then, and not in the step that took it down)
//     with a new boot ID, reported in status.lastBoot;
//   - kubefarm-pxe: a reboot that lasts past secretAfter takes its boot's
//     secret (status.bootCredential) then, as iPXE does once the firmware
//     is through; the rebooted machine boots status.servedImage as it is
//     when it comes back, which is what kubefarm-pxe would serve;
//   - a ReplicaSet and the scheduler for the "web" pods: evicted replicas
//     are replaced on a Ready, schedulable node;
//   - kube-controller-manager's disruption controller: the status of the
//     namespace's PodDisruptionBudgets, from the pods.
//
// The farm steps every tick, or as soon as it can when a step outlasts a
// tick. A reboot lasts rebootTime of wall time, so that a slower pace does
// not lengthen it beyond a step. The tests do not synchronise on the
// steps: they wait on conditions with deadlines.
type fakeFarm struct {
	c          client.Client
	ns         string
	tick       time.Duration
	rebootTime time.Duration

	mu       sync.Mutex
	machines map[string]*fakeMachine
	// webReplicas is the "web" ReplicaSet's size (0: no workload).
	webReplicas int
	errs        []error
	// quota is how many more steps run takes; -1 is no limit.
	quota int
	steps []farmStep // every step run took, in order
}

type fakeMachine struct {
	hostname  string
	bootID    string
	down      bool      // from a reboot's start until it is back
	nodeDown  bool      // the Node says NotReady for this reboot
	downUntil time.Time // when the reboot ends
	reboots   int
	// neverReturn keeps it down (it goes down, and stays down while set).
	neverReturn bool
	deaf        bool // its agent never answers a reboot request
	// byRollout: the running reboot is the one the rollout asked for.
	byRollout bool
	// bootTime, when set, is this machine's rebootTime (a slow machine).
	bootTime time.Duration
	// secretAt is when the running reboot takes its boot's secret; zero
	// once taken.
	secretAt time.Time
}

// secretAfter is how far into a reboot the boot takes its secret: past the
// second the reboot was asked in, as firmware and iPXE take longer.
const secretAfter = 1100 * time.Millisecond

// farmStep is when one of the farm's steps began and how long it took.
type farmStep struct {
	start time.Time
	took  time.Duration
}

func newFarm(c client.Client, ns string) *fakeFarm {
	return &fakeFarm{c: c, ns: ns, tick: 50 * time.Millisecond, rebootTime: 200 * time.Millisecond,
		machines: map[string]*fakeMachine{}, quota: -1}
}

// addMachine registers the Node of a machine and its first boot of digest.
// The machine is the farm's before its Node is made, so that the fixture
// removes the Node whatever fails after.
func (f *fakeFarm) addMachine(t testing.TB, machine, hostname, digest string) {
	t.Helper()
	ctx := context.Background()
	fm := &fakeMachine{hostname: hostname, bootID: string(uuid.NewUUID())}
	f.mu.Lock()
	f.machines[machine] = fm
	f.mu.Unlock()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: hostname, Labels: map[string]string{"kubernetes.io/hostname": hostname}}}
	if err := f.c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := f.setNode(ctx, hostname, true, fm.bootID); err != nil {
		t.Fatal(err)
	}
	if err := f.report(ctx, machine, fm.bootID, digest); err != nil {
		t.Fatal(err)
	}
}

// hostnames are the Nodes of the farm's machines.
func (f *fakeFarm) hostnames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, fm := range f.machines {
		out = append(out, fm.hostname)
	}
	return out
}

func (f *fakeFarm) set(machine string, fn func(*fakeMachine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.machines[machine])
}

func (f *fakeFarm) reboots(machine string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machines[machine].reboots
}

// rebootNow reboots a machine out of turn (a crash, a power cut, someone
// at the console); a power driver's reset is the same thing.
func (f *fakeFarm) rebootNow(machine string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.goDown(f.machines[machine])
}

func (f *fakeFarm) goDown(fm *fakeMachine) {
	if !fm.down {
		took := f.rebootTime
		if fm.bootTime > 0 {
			took = fm.bootTime
		}
		fm.down, fm.nodeDown, fm.downUntil = true, false, time.Now().Add(took)
		fm.secretAt = time.Now().Add(secretAfter)
		fm.reboots++
	}
}

// run plays the farm until ctx ends, a step a tick within the quota.
func (f *fakeFarm) run(ctx context.Context) {
	t := time.NewTicker(f.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f.takeStep() {
			continue
		}
		start := time.Now()
		err := f.step(ctx)
		f.mu.Lock()
		f.steps = append(f.steps, farmStep{start, time.Since(start)})
		if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			f.errs = append(f.errs, err)
		}
		f.mu.Unlock()
	}
}

// takeStep tells whether the quota allows a step, and counts it.
func (f *fakeFarm) takeStep() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.quota == 0 {
		return false
	}
	if f.quota > 0 {
		f.quota--
	}
	return true
}

// setQuota holds the farm to n more steps; -1 lifts the limit.
func (f *fakeFarm) setQuota(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = n
}

// quotaLeft is how many more steps the farm may take; -1 is no limit.
func (f *fakeFarm) quotaLeft() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quota
}

// stepsIn counts the farm's steps that began in [from, to), and their
// mean duration.
func (f *fakeFarm) stepsIn(from, to time.Time) (n int, mean time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sum time.Duration
	for _, s := range f.steps {
		if !s.start.Before(from) && s.start.Before(to) {
			n++
			sum += s.took
		}
	}
	if n > 0 {
		mean = sum / time.Duration(n)
	}
	return n, mean
}

func (f *fakeFarm) step(ctx context.Context) error {
	ms := &v1alpha1.MachineList{}
	if err := f.c.List(ctx, ms, client.InNamespace(f.ns)); err != nil {
		return err
	}
	for i := range ms.Items {
		m := &ms.Items[i]
		f.mu.Lock()
		fm := f.machines[m.Name]
		if fm == nil {
			f.mu.Unlock()
			continue
		}
		ro := m.Status.Rollout
		if !fm.down && !fm.deaf && ro != nil && ro.Phase == v1alpha1.RolloutRebooting && ro.PreviousBootID == fm.bootID {
			f.goDown(fm)
			fm.byRollout = true
		}
		// Down in one step, back in a later one once the reboot's time is up.
		wentDown := fm.down && !fm.nodeDown
		back := fm.down && fm.nodeDown && !fm.neverReturn && !time.Now().Before(fm.downUntil)
		if wentDown {
			fm.nodeDown = true
		}
		if back {
			fm.down, fm.nodeDown = false, false
			fm.bootID = string(uuid.NewUUID())
		}
		takeSecret := fm.down && !fm.secretAt.IsZero() && !time.Now().Before(fm.secretAt)
		if takeSecret {
			fm.secretAt = time.Time{}
		}
		hostname, bootID, byRollout := fm.hostname, fm.bootID, fm.byRollout
		if back {
			fm.byRollout = false
		}
		f.mu.Unlock()

		if takeSecret {
			if err := f.takeSecret(ctx, m.Name); err != nil {
				return err
			}
		}
		switch {
		case wentDown:
			if byRollout {
				// The rollout reboots only drained nodes: any pod that is
				// not a DaemonSet's would die with it.
				if err := f.checkDrained(ctx, hostname); err != nil {
					return err
				}
			}
			if err := f.setNode(ctx, hostname, false, ""); err != nil {
				return err
			}
			// The node's pods die with it.
			if err := f.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(f.ns), client.MatchingFields{"spec.nodeName": hostname}, client.GracePeriodSeconds(0)); err != nil {
				return err
			}
		case back:
			served := m.Status.ServedImage
			if served == nil {
				return fmt.Errorf("machine %s has no served image", m.Name)
			}
			if err := f.report(ctx, m.Name, bootID, served.Digest); err != nil {
				return err
			}
			if err := f.setNode(ctx, hostname, true, bootID); err != nil {
				return err
			}
		}
	}
	if err := f.playKubelets(ctx); err != nil {
		return err
	}
	if err := f.playReplicaSet(ctx); err != nil {
		return err
	}
	return f.playDisruptionController(ctx)
}

// checkDrained records, as one of the farm's errors, every pod still on
// node when the rollout's reboot takes it down.
func (f *fakeFarm) checkDrained(ctx context.Context, node string) error {
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			f.mu.Lock()
			f.errs = append(f.errs, fmt.Errorf("the rollout rebooted node %s with pod %s/%s still on it", node, p.Namespace, p.Name))
			f.mu.Unlock()
		}
	}
	return nil
}

// report writes the boot report as kubefarm-pxe does from the agent's POST.
func (f *fakeFarm) report(ctx context.Context, machine, bootID, digest string) error {
	patch := fmt.Sprintf(`{"status":{"lastBoot":{"bootID":%q,"imageDigest":%q,"time":%q}}}`, bootID, digest, time.Now().UTC().Format(time.RFC3339))
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: machine}}
	return f.c.Status().Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("fake-pxe"))
}

// takeSecret writes what kubefarm-pxe keeps of a boot's secret when the
// booting machine takes it.
func (f *fakeFarm) takeSecret(ctx context.Context, machine string) error {
	patch := fmt.Sprintf(`{"status":{"bootCredential":{"sha256":"sha256:%064x","issued":%q}}}`, time.Now().UnixNano(), time.Now().UTC().Format(time.RFC3339))
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: machine}}
	return f.c.Status().Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("fake-pxe"))
}

// setNode writes what the kubelet posts: Ready, and the boot ID.
func (f *fakeFarm) setNode(ctx context.Context, name string, ready bool, bootID string) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"reason":"FakeKubelet","lastHeartbeatTime":%q,"lastTransitionTime":%q}]`, status, now, now)
	if bootID != "" {
		patch += fmt.Sprintf(`,"nodeInfo":{"bootID":%q,"machineID":"m","systemUUID":"s","kernelVersion":"k","osImage":"o","containerRuntimeVersion":"c","kubeletVersion":"v","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}`, bootID)
	}
	patch += "}}"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return f.c.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, []byte(patch)))
}

// playKubelets finishes terminating pods: no container runtime runs them.
func (f *fakeFarm) playKubelets(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.ns)); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			if err := f.c.Delete(ctx, p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// playReplicaSet keeps webReplicas "web" pods, placing a replacement on the
// Ready, schedulable node with the fewest of them, Running at once.
func (f *fakeFarm) playReplicaSet(ctx context.Context) error {
	f.mu.Lock()
	want := f.webReplicas
	f.mu.Unlock()
	if want == 0 {
		return nil
	}
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.ns), client.MatchingLabels{"app": "web"}); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := f.c.List(ctx, nodes); err != nil {
		return err
	}
	perNode := map[string]int{}
	live := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live++
			perNode[p.Spec.NodeName]++
		}
	}
	for ; live < want; live++ {
		best := ""
		for _, n := range nodes.Items {
			if n.Spec.Unschedulable || !nodeReady(&n) || !f.ownsNode(n.Name) {
				continue
			}
			if best == "" || perNode[n.Name] < perNode[best] {
				best = n.Name
			}
		}
		if best == "" {
			return nil
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, GenerateName: "web-", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: best, Containers: []corev1.Container{{Name: "web", Image: "web"}}},
		}
		if err := f.c.Create(ctx, p); err != nil {
			return err
		}
		// Running and Ready: the eviction handler lets a pod that is not
		// Ready go whenever the budget is met (unhealthyPodEvictionPolicy
		// IfHealthyBudget), which would bypass the PDB under test.
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := f.c.Status().Update(ctx, p); err != nil {
			return err
		}
		perNode[best]++
	}
	return nil
}

func (f *fakeFarm) ownsNode(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fm := range f.machines {
		if fm.hostname == name {
			return true
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// playDisruptionController writes each PDB's status from its pods: healthy
// are Running pods not terminating and not already counted as disrupted by
// an eviction (status.disruptedPods, which the eviction handler writes).
// The write is conditional on the PDB's resourceVersion, so an eviction
// that lands meanwhile is never overwritten by a count taken before it.
func (f *fakeFarm) playDisruptionController(ctx context.Context) error {
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := f.c.List(ctx, pdbs, client.InNamespace(f.ns)); err != nil {
		return err
	}
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			return err
		}
		healthy, expected := f.healthy(ctx, sel, pdb.Status.DisruptedPods)
		if healthy < 0 {
			continue
		}
		minAvail := pdb.Spec.MinAvailable.IntValue()
		pdb.Status.ObservedGeneration = pdb.Generation
		pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy, pdb.Status.ExpectedPods = int32(healthy), int32(minAvail), int32(expected)
		pdb.Status.DisruptionsAllowed = int32(max(0, healthy-minAvail))
		pdb.Status.Conditions = []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
			Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now(), ObservedGeneration: pdb.Generation}}
		if pdb.Status.DisruptionsAllowed == 0 {
			pdb.Status.Conditions[0].Status, pdb.Status.Conditions[0].Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
		}
		if err := f.c.Status().Update(ctx, pdb); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeFarm) healthy(ctx context.Context, sel labels.Selector, disrupted map[string]metav1.Time) (healthy, expected int) {
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return -1, 0
	}
	for _, p := range pods.Items {
		expected++
		if _, gone := disrupted[p.Name]; gone || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		healthy++
	}
	return healthy, expected
}

// sample is one consistent look at the pool: the Machines, Nodes and pods
// read at one etcd revision, so that the invariants are checked on a state
// that really existed.
type sample struct {
	unavailable int
	nodes       map[string]*corev1.Node
	machines    []v1alpha1.Machine
	webHealthy  int
}

func (f *fakeFarm) sample(ctx context.Context) (sample, error) {
	var s sample
	ms := &v1alpha1.MachineList{}
	if err := f.c.List(ctx, ms, client.InNamespace(f.ns)); err != nil {
		return s, err
	}
	at := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: ms.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}}
	nodes := &corev1.NodeList{}
	if err := f.c.List(ctx, nodes, at); err != nil {
		return s, err
	}
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.ns), client.MatchingLabels{"app": "web"}, at); err != nil {
		return s, err
	}
	s.nodes = map[string]*corev1.Node{}
	for i := range nodes.Items {
		s.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	s.machines = ms.Items
	for i := range ms.Items {
		m := &ms.Items[i]
		// Counted here, not with the planner's own rule: a sampler that
		// shared the code under test would share its mistakes.
		n := s.nodes[m.Spec.Hostname]
		ro := m.Status.Rollout
		updating := ro != nil && ro.Phase != v1alpha1.RolloutDone && ro.Phase != v1alpha1.RolloutFailed && ro.Phase != v1alpha1.RolloutSkipped
		if updating || n == nil || !nodeReady(n) || n.Spec.Unschedulable {
			s.unavailable++
		}
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			s.webHealthy++
		}
	}
	return s, nil
}

// webPDB protects the "web" pods with minAvailable.
func webPDB(ns string, minAvailable int) *policyv1.PodDisruptionBudget {
	v := intstr.FromInt32(int32(minAvailable))
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &v, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}
