// Package rollout is the controller of the rolling reboot-to-update of a
// NodePool's machines (ARCHITECTURE.md, "How an update rolls out").
//
// A pass over one pool fetches its BootImage, Machines and the tenant's
// Nodes, drives every machine whose update is in flight through its phases
// (Cordoning, Draining, Rebooting, Verifying, Uncordoning), then starts the
// machines the planner (package plan) selects within the budget, the
// maintenance windows, pause and the failure budget, and writes the pool's
// rollout conditions.
//
// Every phase is written to the Machine's status before its side effect,
// with the Machine's resourceVersion as a precondition: a manager killed at
// any moment finds the phase it was in and repeats only that phase's
// idempotent effect (cordon, one drain pass, uncordon), and a write decided
// from a stale cache fails instead of starting an update twice. The image
// flip rides in the same write as the Rebooting phase, so kubefarm-pxe
// never serves the new image to a machine the rollout has not drained, and
// a machine that reboots out of turn comes back on its old image.
//
// The reboot itself is pulled: kubefarm-agent's heartbeat is answered
// "reboot" while the Machine is Rebooting from the boot the agent runs. A
// machine that does not reboot within spec.rollout.powerCycleAfter is reset
// through its power driver (spec.power), once, recorded before the reset.
package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/controllers/rollout/window"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/power"
)

// FieldOwner is the field manager of the rollout's writes: the Machines'
// status.servedImage, status.rollout and status.history, and the pool's
// rollout status fields and conditions.
const FieldOwner = "kubefarm-rollout"

// bootImageIndex indexes NodePools by spec.bootImage for this controller
// (the NodePool controller keeps an index of the same field under its own
// name; controller-runtime refuses a second registration of one name).
const bootImageIndex = "rollout.spec.bootImage"

// DefaultPoll is how often a pool with updates in flight is looked at
// again when nothing wakes it: the tenant's Nodes (cordon, Ready, boot ID)
// are read, not watched.
const DefaultPoll = 5 * time.Second

// statusRefreshPolls is how many polls apart a pool that cannot start
// machines (paused, halted, outside its window) re-reads its nodes for its
// status: 30 s at the default poll.
const statusRefreshPolls = 6

// maxTransitionsPerPass bounds one machine's phase changes in one pass, so
// a pass always ends; a machine goes through at most five.
const maxTransitionsPerPass = 8

// Reconciler reconciles the rollout of NodePools.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Tenants  Tenants
	// Power resets machines that do not reboot; nil disables the fallback.
	Power power.Cycler
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Poll is DefaultPoll when zero.
	Poll time.Duration

	// afterRecord, in tests, runs right after a phase was recorded and
	// before its side effect: a test cancels ctx there to kill the
	// manager between the two.
	afterRecord func(ctx context.Context, m *v1alpha1.Machine)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return DefaultPoll
}

// SetupWithManager registers the controller: the pool, its Machines (their
// boot reports and node readiness) and its BootImage wake it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := nodepool.IndexByBootImage(mgr.GetFieldIndexer(), bootImageIndex); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.Machine{}).
		Watches(&v1alpha1.BootImage{}, handler.EnqueueRequestsFromMapFunc(nodepool.PoolsOfImage(r.Client, bootImageIndex))).
		// Pools are independent; one pool's passes stay sequential.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("rollout").
		Complete(r)
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools/status,verbs=patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=bootimages,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// pass is what one reconcile knows of one pool.
type pass struct {
	pool     *v1alpha1.NodePool
	target   v1alpha1.ImageRef
	machines []plan.Machine
	cs       kubernetes.Interface
	now      time.Time
	// requeue is the soonest the pass wants to look again (0: no need).
	requeue time.Duration
	// conflicts counts Machines whose write met a newer version than the
	// cache's; they are left to the next pass.
	conflicts int
	// drainBlocked names the first machine whose drain pass met a refused
	// eviction, and why, for the pool's Progressing.
	drainBlocked string
}

func (p *pass) wake(d time.Duration) {
	if d > 0 && (p.requeue == 0 || d < p.requeue) {
		p.requeue = d
	}
}

// Reconcile runs one pass over a pool.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &v1alpha1.NodePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			forgetPool(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := pool.Status.DeepCopy()
	p := &pass{pool: pool, now: r.now()}
	sum, err := r.run(ctx, p)
	if err != nil {
		// A pass that failed saw part of the pool; the status it last
		// wrote stands until a pass completes.
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, pool, p.machines, before, sum); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

// run is the pass. The summary it returns is written when it returns no
// error; a failed pass saw only part of the pool.
func (r *Reconciler) run(ctx context.Context, p *pass) (plan.Summary, error) {
	pool := p.pool
	st := pool.Spec.Rollout
	sum := plan.Summary{Paused: st.Paused, FailureBudget: int(ptr.Deref(st.FailureBudget, v1alpha1.DefaultFailureBudget)), WindowOpen: true}

	img := &v1alpha1.BootImage{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: pool.Spec.BootImage}, img); {
	case apierrors.IsNotFound(err):
		sum.ImageReason, sum.ImageProblem = plan.ReasonImageNotFound, fmt.Sprintf("BootImage %s does not exist", pool.Spec.BootImage)
		img = nil
	case err != nil:
		return sum, fmt.Errorf("reading BootImage %s: %w", pool.Spec.BootImage, err)
	}
	if img != nil {
		p.target = v1alpha1.ImageRef{Name: img.Name, Digest: img.Spec.Rootfs.Digest}
		pool.Status.RolloutImage = p.target.DeepCopy()
		// kubefarm-pxe verifies an image's artifacts (--verify-images);
		// until it has, no machine is rebooted into it. Without the check
		// the condition never appears and nothing waits.
		if c := meta.FindStatusCondition(img.Status.Conditions, v1alpha1.ConditionArtifactsVerified); c != nil && c.Status != metav1.ConditionTrue {
			sum.ImageReason = plan.ReasonImageNotReady
			sum.ImageProblem = fmt.Sprintf("BootImage %s: kubefarm-pxe has not verified its artifacts (%s: %s)", img.Name, c.Reason, c.Message)
		}
	}

	list := &v1alpha1.MachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pool.Namespace), client.MatchingLabels{desired.LabelPool: pool.Name}); err != nil {
		return sum, fmt.Errorf("listing the Machines of NodePool %s: %w", pool.Name, err)
	}
	var ms []*v1alpha1.Machine
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], pool) && list.Items[i].DeletionTimestamp.IsZero() {
			ms = append(ms, &list.Items[i])
		}
	}
	slices.SortFunc(ms, func(a, b *v1alpha1.Machine) int { return strings.Compare(a.Name, b.Name) })
	sum.Total = len(ms)
	if len(ms) == 0 {
		return sum, nil
	}

	cs, nodes, err := r.tenantNodes(ctx, pool)
	if err != nil {
		return sum, err
	}
	p.cs = cs
	for _, m := range ms {
		p.machines = append(p.machines, plan.Machine{M: m, Node: nodes[m.Spec.Hostname]})
	}

	if err := r.retry(ctx, p, &sum); err != nil {
		return sum, err
	}
	for i := range p.machines {
		if plan.InFlight(p.machines[i].M) {
			if err := r.drive(ctx, p, &p.machines[i]); err != nil {
				if !apierrors.IsConflict(err) {
					return sum, err
				}
				// The Machine changed since the cache's copy (a boot
				// report): this one waits for the next pass, the others go on.
				p.conflicts++
			}
		}
	}

	// At refuses invalid windows with every bad field named.
	ws, err := window.At(st.MaintenanceWindows, p.now)
	if err != nil {
		sum.Invalid = err.Error()
		return r.summarize(p, sum), nil
	}
	sum.WindowOpen, sum.NextWindow = ws.Open, ws.Next

	sum = r.summarize(p, sum)
	if sum.Pending > 0 || sum.Unavailable > 0 {
		// The status counts nodes, which are read, not watched: while
		// machines wait (held by a pause, a halt or a closed window) or
		// nodes are unavailable, they are read again now and then, so the
		// pool's status follows a node's recovery or an operator's uncordon
		// without a tenant Node LIST every poll for the days a window may
		// stay closed. Held by the budget, the pool polls (below).
		p.wake(statusRefreshPolls * r.poll())
	}
	if sum.ImageProblem != "" || sum.Paused || sum.Halted() {
		return sum, nil
	}
	if !ws.Open {
		if sum.Pending > 0 && !ws.Next.IsZero() {
			p.wake(ws.Next.Sub(p.now))
		}
		return sum, nil
	}
	sel, err := plan.Select(p.machines, p.target, st, p.now)
	if err != nil {
		sum.Invalid = err.Error()
		return sum, nil
	}
	for _, c := range sel.Start {
		m := &p.machines[c.Index]
		if err := r.record(ctx, m, plan.Start(c, p.target, p.now), nil, nil); err != nil {
			if apierrors.IsConflict(err) {
				// Stale: the next pass decides again with the new copy.
				p.conflicts++
				continue
			}
			return sum, err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutStarted", "update to BootImage %s (%s) started: %s", p.target.Name, p.target.Digest, c.Reason)
		if err := r.drive(ctx, p, m); err != nil {
			if !apierrors.IsConflict(err) {
				return sum, err
			}
			p.conflicts++
		}
	}
	if p.conflicts > 0 {
		// The cache catches up within moments; no need to wait a poll.
		p.wake(100 * time.Millisecond)
	}
	sum.FullDomains = sel.BlockedByDomain
	if !sel.RetryAt.IsZero() {
		p.wake(sel.RetryAt.Sub(p.now))
	}
	if sel.Pending > 0 {
		// Budget held machines back: others' recovery (a node back to
		// Ready, an operator's uncordon) is read, not watched.
		p.wake(r.poll())
	}
	return r.summarize(p, sum), nil
}

// summarize counts the machines into sum.
func (r *Reconciler) summarize(p *pass, sum plan.Summary) plan.Summary {
	sum.Updated, sum.InFlight, sum.Failed, sum.Pending, sum.Unavailable, sum.Unbooted, sum.DrainBlocked = 0, 0, 0, 0, 0, 0, p.drainBlocked
	if sum.Budget == 0 {
		sum.Budget, _ = plan.Budget(p.pool.Spec.Rollout.MaxUnavailable, len(p.machines))
	}
	for _, m := range p.machines {
		switch {
		case plan.InFlight(m.M):
			sum.InFlight++
		case plan.Failed(m.M, p.target):
			sum.Failed++
		default:
			if _, needs := plan.NeedsUpdate(m.M, p.target); needs {
				sum.Pending++
			}
		}
		if plan.Unbooted(m.M) {
			sum.Unbooted++
		}
		if plan.Updated(m.M, p.target) {
			sum.Updated++
		}
		if plan.Unavailable(m) {
			sum.Unavailable++
		}
	}
	if sum.InFlight > 0 {
		p.wake(r.poll())
	}
	return sum
}

// retry acts on the kubefarm.io/rollout-retry annotation: a value not yet
// observed forgets the failed updates, uncordoning the nodes the rollout
// had cordoned, so the machines are candidates again. observedRetry is
// written last (with the status), so a pass that dies halfway does it all
// again; both steps are idempotent.
func (r *Reconciler) retry(ctx context.Context, p *pass, sum *plan.Summary) error {
	want := p.pool.Annotations[v1alpha1.AnnotationRolloutRetry]
	if want == "" || want == p.pool.Status.ObservedRetry {
		return nil
	}
	for i := range p.machines {
		m := &p.machines[i]
		ro := m.M.Status.Rollout
		if ro == nil || ro.Phase != v1alpha1.RolloutFailed {
			continue
		}
		if !ro.WasCordoned {
			if err := r.setUnschedulable(ctx, p.cs, m, false); err != nil {
				return err
			}
		}
		if err := r.record(ctx, m, nil, nil, nil); err != nil {
			return err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutRetried", "the failed update is forgotten (%s=%s); the machine is a candidate again",
			v1alpha1.AnnotationRolloutRetry, want)
	}
	p.pool.Status.ObservedRetry = want
	return nil
}

// drive moves one in-flight machine through as many phases as it can in
// this pass.
func (r *Reconciler) drive(ctx context.Context, p *pass, m *plan.Machine) error {
	for range maxTransitionsPerPass {
		ro := m.M.Status.Rollout
		if !plan.InFlight(m.M) {
			return nil
		}
		h, ok := handlers[ro.Phase]
		if !ok {
			return fmt.Errorf("machine %s: unknown rollout phase %q", m.M.Name, ro.Phase)
		}
		moved, err := h(r, ctx, p, m)
		if err != nil {
			return fmt.Errorf("machine %s, phase %s: %w", m.M.Name, ro.Phase, err)
		}
		if !moved {
			return nil
		}
	}
	return nil
}

// phaseHandler does a phase's side effect (idempotently) and records the next
// phase when the phase is complete; moved says it did.
type phaseHandler func(r *Reconciler, ctx context.Context, p *pass, m *plan.Machine) (moved bool, err error)

var handlers = map[v1alpha1.RolloutPhase]phaseHandler{
	v1alpha1.RolloutCordoning:   (*Reconciler).cordoning,
	v1alpha1.RolloutDraining:    (*Reconciler).draining,
	v1alpha1.RolloutRebooting:   (*Reconciler).rebooting,
	v1alpha1.RolloutVerifying:   (*Reconciler).verifying,
	v1alpha1.RolloutUncordoning: (*Reconciler).uncordoning,
}

func (r *Reconciler) cordoning(ctx context.Context, p *pass, m *plan.Machine) (bool, error) {
	if err := r.setUnschedulable(ctx, p.cs, m, true); err != nil {
		return false, err
	}
	return true, r.transition(ctx, p, m, v1alpha1.RolloutDraining, "evicting the node's pods")
}

func (r *Reconciler) draining(ctx context.Context, p *pass, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	res, err := drain.Step(ctx, p.cs, m.M.Spec.Hostname)
	if err != nil {
		return false, err
	}
	if res.Remaining == 0 {
		next := plan.Next(ro, v1alpha1.RolloutRebooting, p.now, "waiting for kubefarm-agent to reboot into the target image")
		if lb := m.M.Status.LastBoot; lb != nil {
			// A reboot out of turn since the start came back on the old
			// image; the proof of the update's reboot is a boot after this one.
			next.PreviousBootID = lb.BootID
		}
		target := ro.TargetImage
		if err := r.record(ctx, m, next, &target, nil); err != nil {
			return false, err
		}
		r.event(m.M, corev1.EventTypeNormal, "RolloutRebooting", "drained; serving BootImage %s (%s) from the next boot and asking the machine to reboot",
			target.Name, target.Digest)
		return true, nil
	}
	msg := drainMessage(res)
	if len(res.Blocked) > 0 && p.drainBlocked == "" {
		p.drainBlocked = m.M.Name + ": " + msg
	}
	if expired, left := plan.Expired(ro.PhaseStartTime, p.pool.Spec.Rollout.DrainTimeout, p.now); expired {
		if p.pool.Spec.Rollout.DrainTimeoutPolicy == v1alpha1.DrainSkip {
			next := plan.Next(ro, v1alpha1.RolloutUncordoning, p.now, "drain timed out, skipping this machine for now: "+msg)
			next.Result = v1alpha1.RolloutSkipped
			if err := r.record(ctx, m, next, nil, nil); err != nil {
				return false, err
			}
			r.event(m.M, corev1.EventTypeWarning, "DrainTimedOut", "skipping the machine for now: %s", msg)
			return true, nil
		}
		return true, r.fail(ctx, p, m, "drain timed out: "+msg)
	} else {
		p.wake(min(left, r.poll()))
	}
	if len(res.Blocked) > 0 && ro.Message != msg {
		// The blocked pods change rarely; one event per change, not per pass.
		next := ro.DeepCopy()
		next.Message = msg
		if err := r.record(ctx, m, next, nil, nil); err != nil {
			return false, err
		}
		r.event(m.M, corev1.EventTypeWarning, "DrainBlocked", "%s", msg)
	}
	return false, nil
}

// drainMessage names what holds a drain up, a few pods at most.
func drainMessage(res drain.Result) string {
	if len(res.Blocked) == 0 {
		return fmt.Sprintf("%d pods still terminating", res.Remaining)
	}
	msg := fmt.Sprintf("%d pods left; eviction refused for", res.Remaining)
	for i, b := range res.Blocked {
		if i == 3 {
			msg += fmt.Sprintf(" and %d more", len(res.Blocked)-3)
			break
		}
		msg += fmt.Sprintf(" %s (%s)", b.Pod, b.Reason)
	}
	return msg
}

func (r *Reconciler) rebooting(ctx context.Context, p *pass, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	if plan.Rebooted(m.M) {
		return true, r.transition(ctx, p, m, v1alpha1.RolloutVerifying,
			fmt.Sprintf("rebooted (boot %s); waiting for the target image and a Ready node", m.M.Status.LastBoot.BootID))
	}
	st := p.pool.Spec.Rollout
	if expired, left := plan.Expired(ro.PhaseStartTime, st.BootTimeout, p.now); expired {
		return true, r.fail(ctx, p, m, fmt.Sprintf("the machine reported no new boot within %s", st.BootTimeout.Duration))
	} else {
		p.wake(min(left, r.poll()))
	}
	if m.M.Spec.Power == nil || r.Power == nil || ro.PowerCycleTime != nil {
		return false, nil
	}
	expired, left := plan.Expired(ro.PhaseStartTime, st.PowerCycleAfter, p.now)
	if !expired {
		p.wake(left)
		return false, nil
	}
	next := ro.DeepCopy()
	t := metav1.NewTime(p.now)
	next.PowerCycleTime = &t
	next.Message = fmt.Sprintf("kubefarm-agent did not reboot within %s; reset through %s", st.PowerCycleAfter.Duration, m.M.Spec.Power.Driver)
	if err := r.record(ctx, m, next, nil, nil); err != nil {
		return false, err
	}
	if err := r.Power.PowerCycle(ctx, *m.M.Spec.Power); err != nil {
		// Recorded before it was tried, so it is not tried again: the boot
		// timeout decides. Said loudly.
		r.event(m.M, corev1.EventTypeWarning, "PowerCycleFailed", "%v", err)
		return false, nil
	}
	r.event(m.M, corev1.EventTypeNormal, "PowerCycled", "%s", next.Message)
	return false, nil
}

func (r *Reconciler) verifying(ctx context.Context, p *pass, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	st := p.pool.Spec.Rollout
	v := plan.Verify(*m)
	if !v.Good {
		if lb := m.M.Status.LastBoot; lb != nil && lb.ImageDigest != ro.TargetImage.Digest {
			// A finished boot of another image will not turn into the
			// target by waiting.
			return true, r.fail(ctx, p, m, v.Why)
		}
		if expired, left := plan.Expired(ro.PhaseStartTime, st.BootTimeout, p.now); expired {
			return true, r.fail(ctx, p, m, fmt.Sprintf("not verified within %s: %s", st.BootTimeout.Duration, v.Why))
		} else {
			p.wake(min(left, r.poll()))
		}
		if ro.ReadySince != nil || ro.Message != v.Why {
			next := ro.DeepCopy()
			next.ReadySince, next.Message = nil, v.Why
			return false, r.record(ctx, m, next, nil, nil)
		}
		return false, nil
	}
	if ro.ReadySince == nil {
		next := ro.DeepCopy()
		t := metav1.NewTime(p.now)
		next.ReadySince = &t
		next.Message = fmt.Sprintf("runs the target image and is Ready; verified after %ds", ptr.Deref(st.MinReadySeconds, v1alpha1.DefaultMinReadySeconds))
		if err := r.record(ctx, m, next, nil, nil); err != nil {
			return false, err
		}
		ro = next
	}
	minReady := ptr.Deref(st.MinReadySeconds, v1alpha1.DefaultMinReadySeconds)
	// readySince is stored in whole seconds (metav1.Time), rounded down:
	// one second more guarantees the node was Ready for minReady at least.
	if left := ro.ReadySince.Add(time.Duration(minReady)*time.Second + time.Second).Sub(p.now); left > 0 {
		p.wake(left)
		return false, nil
	}
	next := plan.Next(ro, v1alpha1.RolloutUncordoning, p.now, "verified; uncordoning")
	next.Result = v1alpha1.RolloutDone
	if err := r.record(ctx, m, next, nil, nil); err != nil {
		return false, err
	}
	r.event(m.M, corev1.EventTypeNormal, "RolloutVerified", "boot %s runs %s (%s) and stayed Ready for %ds",
		m.M.Status.LastBoot.BootID, ro.TargetImage.Name, ro.TargetImage.Digest, minReady)
	return true, nil
}

func (r *Reconciler) uncordoning(ctx context.Context, p *pass, m *plan.Machine) (bool, error) {
	ro := m.M.Status.Rollout
	if !ro.WasCordoned {
		if err := r.setUnschedulable(ctx, p.cs, m, false); err != nil {
			return false, err
		}
	}
	result := ro.Result
	if result == "" {
		result = v1alpha1.RolloutDone
	}
	msg := "updated"
	if ro.WasCordoned {
		msg = "updated; the node stays cordoned, as it was before the update"
	}
	if result == v1alpha1.RolloutSkipped {
		msg = ro.Message
	}
	history := plan.Finished(m.M.Status.History, ro, result, p.now, msg)
	if err := r.record(ctx, m, nil, nil, history); err != nil {
		return false, err
	}
	observePhase(ro, p.now)
	observeResult(p.pool, result)
	r.event(m.M, corev1.EventTypeNormal, "Rollout"+string(result), "%s (%s): %s", ro.TargetImage.Name, ro.TargetImage.Digest, msg)
	return true, nil
}

// transition records ro's next phase.
func (r *Reconciler) transition(ctx context.Context, p *pass, m *plan.Machine, phase v1alpha1.RolloutPhase, msg string) error {
	ro := m.M.Status.Rollout
	if err := r.record(ctx, m, plan.Next(ro, phase, p.now, msg), nil, nil); err != nil {
		return err
	}
	observePhase(ro, p.now)
	r.event(m.M, corev1.EventTypeNormal, "Rollout"+string(phase), "%s", msg)
	return nil
}

// fail ends the update as Failed: the record stays (so the operator sees
// where it stopped) and the history says why. The node is left as it is:
// cordoned when the drain timed out, for the operator to look at.
func (r *Reconciler) fail(ctx context.Context, p *pass, m *plan.Machine, why string) error {
	ro := m.M.Status.Rollout
	next := plan.Next(ro, v1alpha1.RolloutFailed, p.now, why)
	history := plan.Finished(m.M.Status.History, ro, v1alpha1.RolloutFailed, p.now, fmt.Sprintf("in phase %s: %s", ro.Phase, why))
	if err := r.record(ctx, m, next, nil, history); err != nil {
		return err
	}
	observePhase(ro, p.now)
	observeResult(p.pool, v1alpha1.RolloutFailed)
	r.event(m.M, corev1.EventTypeWarning, "RolloutFailed", "in phase %s: %s", ro.Phase, why)
	return nil
}

// record writes the machine's rollout record (nil clears it), with the
// served image when served is set and the history when history is set, in
// one server-side apply of the status under FieldOwner, on the condition
// that the Machine is still the version this pass read. m is updated with
// the server's answer.
func (r *Reconciler) record(ctx context.Context, m *plan.Machine, ro *v1alpha1.MachineRollout, served *v1alpha1.ImageRef, history []v1alpha1.RolloutHistoryEntry) error {
	// A request sent on a cancelled context may still be applied over
	// HTTP/2 while the caller sees only the cancellation; not sending it
	// keeps the last write of a stopping manager one whose outcome is known.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recording the rollout of Machine %s: %w", m.M.Name, err)
	}
	st := m.M.Status.DeepCopy()
	st.Rollout = ro
	if served != nil {
		st.ServedImage = served
	}
	if history != nil {
		st.History = history
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1alpha1.Machine{Status: v1alpha1.MachineStatus{
		ServedImage: st.ServedImage, Rollout: st.Rollout, History: st.History}})
	if err != nil {
		return err
	}
	ssa.PruneNulls(obj)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Machine",
		"metadata": map[string]any{"name": m.M.Name, "namespace": m.M.Namespace, "resourceVersion": m.M.ResourceVersion},
		"status":   obj["status"],
	}}
	if u.Object["status"] == nil {
		u.Object["status"] = map[string]any{}
	}
	// The server's answer is decoded back into u: its resourceVersion is
	// the precondition of this pass's next write.
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("recording the rollout of Machine %s: %w", m.M.Name, err)
	}
	m.M.ResourceVersion = u.GetResourceVersion()
	m.M.Status.Rollout, m.M.Status.ServedImage, m.M.Status.History = st.Rollout, st.ServedImage, st.History
	if r.afterRecord != nil {
		r.afterRecord(ctx, m.M)
	}
	return nil
}

// setUnschedulable cordons or uncordons the machine's node with a merge
// patch of spec.unschedulable alone, as kubectl cordon does; a missing node
// has nothing to change.
func (r *Reconciler) setUnschedulable(ctx context.Context, cs kubernetes.Interface, m *plan.Machine, on bool) error {
	if m.Node == nil || m.Node.Unschedulable == on {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	_, err := cs.CoreV1().Nodes().Patch(ctx, m.M.Spec.Hostname, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldOwner})
	switch {
	case apierrors.IsNotFound(err):
		m.Node = nil
		return nil
	case err != nil:
		verb := "uncordoning"
		if on {
			verb = "cordoning"
		}
		return fmt.Errorf("%s Node %s: %w", verb, m.M.Spec.Hostname, err)
	}
	m.Node.Unschedulable = on
	return nil
}

func (r *Reconciler) event(m *v1alpha1.Machine, typ, reason, format string, args ...any) {
	r.Recorder.Eventf(m, nil, typ, reason, "Rollout", format, args...)
}

// writeStatus applies the rollout's part of the pool's status when it
// changed, and turns condition changes into events.
func (r *Reconciler) writeStatus(ctx context.Context, pool *v1alpha1.NodePool, machines []plan.Machine, before *v1alpha1.NodePoolStatus, sum plan.Summary) error {
	st := &pool.Status
	for _, c := range plan.Conditions(sum) {
		conditions.Set(&st.Conditions, pool.Generation, c)
	}
	st.FailedUpdates, st.UpdatingMachines, st.UnavailableMachines = int32(sum.Failed), int32(sum.InFlight), int32(sum.Unavailable)
	observeMachines(pool, machines, sum)
	if equality.Semantic.DeepEqual(before, st) {
		return nil
	}
	out := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace}}
	out.Status = v1alpha1.NodePoolStatus{FailedUpdates: st.FailedUpdates, UpdatingMachines: st.UpdatingMachines,
		UnavailableMachines: st.UnavailableMachines, RolloutImage: st.RolloutImage, ObservedRetry: st.ObservedRetry}
	for _, c := range st.Conditions {
		switch c.Type {
		case v1alpha1.ConditionProgressing, v1alpha1.ConditionPaused, v1alpha1.ConditionHalted, v1alpha1.ConditionComplete:
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	if err := ssa.ApplyStatus(ctx, r.Client, FieldOwner, out); err != nil {
		return fmt.Errorf("applying the rollout status of NodePool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	conditions.EmitTransitions(r.Recorder, pool, before.Conditions, st.Conditions, plan.ReasonRolloutHalted, plan.ReasonFailureBudgetSpent, plan.ReasonInvalidStrategy)
	return nil
}
