package machineremoval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/power"
)

// pass is one removal pass over a deleted Machine.
type pass struct {
	r   *Reconciler
	m   *kubefarmv1.Machine
	now time.Time

	facts Facts
	// cs is the tenant's client once reached; unreachable why not.
	cs          kubernetes.Interface
	unreachable error
	// other names the Machine that has this hostname now.
	other string
}

func (p *pass) tenantKey() types.NamespacedName {
	return types.NamespacedName{Namespace: p.m.Namespace, Name: p.m.Spec.Cluster}
}

// run gathers the facts, then takes steps until one waits or the Machine
// is released.
func (p *pass) run(ctx context.Context) (ctrl.Result, error) {
	if err := p.gather(ctx); err != nil {
		return ctrl.Result{}, err
	}
	for range maxStepsPerPass {
		var (
			wait time.Duration
			err  error
		)
		switch step := Decide(p.facts); step {
		case StepRelease:
			return ctrl.Result{}, p.release(ctx)
		case StepHold:
			wait, err = p.hold(ctx)
		case StepCordon:
			err = p.cordon(ctx)
		case StepDrain:
			wait, err = p.drain(ctx)
		case StepDeleteNode:
			err = p.deleteNode(ctx)
		case StepPowerOff:
			wait, err = p.powerOff(ctx)
		default:
			return ctrl.Result{}, fmt.Errorf("unknown removal step %q of Machine %s", step, p.m.Name)
		}
		if err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	return ctrl.Result{RequeueAfter: p.r.poll()}, nil
}

// gather reads, in order, what Decide needs, stopping at the first fact
// that decides alone.
func (p *pass) gather(ctx context.Context) error {
	f := &p.facts
	if c := meta.FindStatusCondition(p.m.Status.Conditions, kubefarmv1.ConditionRemoving); c != nil && c.Status == metav1.ConditionTrue {
		f.Recorded = c.Reason
	}
	f.PowerOff = p.m.Spec.Power != nil && p.r.PowerOff != nil

	tc := &kubefarmv1.TenantCluster{}
	switch err := p.r.APIReader.Get(ctx, p.tenantKey(), tc); {
	case apierrors.IsNotFound(err):
		f.Tenant = TenantGone
		return nil
	case err != nil:
		return fmt.Errorf("reading TenantCluster %s of Machine %s: %w", p.tenantKey(), p.m.Name, err)
	case !tc.DeletionTimestamp.IsZero():
		f.Tenant = TenantGone
		return nil
	}

	list := &kubefarmv1.MachineList{}
	if err := p.r.Client.List(ctx, list, client.InNamespace(p.m.Namespace)); err != nil {
		return fmt.Errorf("listing the Machines of namespace %s: %w", p.m.Namespace, err)
	}
	for _, o := range list.Items {
		if o.Name != p.m.Name && o.DeletionTimestamp.IsZero() && o.Spec.Cluster == p.m.Spec.Cluster && o.Spec.Hostname == p.m.Spec.Hostname {
			f.OtherMachine, p.other = true, o.Name
			return nil
		}
	}

	t, err := p.r.Tenants.Get(ctx, p.tenantKey())
	if err != nil {
		f.Tenant, p.unreachable = TenantUnreachable, err
		return nil
	}
	if p.cs, err = t.Client(FieldOwner); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, tenantTimeout)
	defer cancel()
	node, err := p.cs.CoreV1().Nodes().Get(tctx, p.m.Spec.Hostname, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		f.Tenant = TenantLive
	case err != nil:
		f.Tenant = TenantUnreachable
		p.unreachable = fmt.Errorf("reading Node %s of TenantCluster %s: %w", p.m.Spec.Hostname, p.tenantKey(), err)
	default:
		f.Tenant, f.NodeExists, f.Cordoned = TenantLive, true, node.Spec.Unschedulable
	}
	return nil
}

// hold keeps the Machine while its tenant does not answer: Removing
// Unknown before the removal began (nothing is known of its Node), or the
// step it is at with a message saying what holds it.
func (p *pass) hold(ctx context.Context) (time.Duration, error) {
	why := fmt.Sprintf("held: the tenant's API server does not answer, so whether node %s is still in it is not known (%v); "+
		"to let the Machine go anyway, remove its finalizer %s", p.m.Spec.Hostname, p.unreachable, kubefarmv1.FinalizerMachineRemoval)
	status, reason := metav1.ConditionUnknown, kubefarmv1.ReasonRemovalTenantUnreachable
	if p.facts.Recorded != "" {
		status, reason = metav1.ConditionTrue, p.facts.Recorded
	}
	changed, err := p.record(ctx, status, reason, why)
	if err != nil {
		return 0, err
	}
	if changed {
		p.event(corev1.EventTypeWarning, EventHeld, "%s", why)
	}
	return holdPolls * p.r.poll(), nil
}

// cordon records Cordoning, cordons the Node as kubectl cordon does (a
// merge patch of spec.unschedulable), then records Draining: the drain's
// first pass follows in the same pass.
func (p *pass) cordon(ctx context.Context) error {
	name := p.m.Spec.Hostname
	if _, err := p.record(ctx, metav1.ConditionTrue, kubefarmv1.ReasonRemovalCordoning, "cordoning node "+name); err != nil {
		return err
	}
	p.facts.Recorded = kubefarmv1.ReasonRemovalCordoning
	if !p.facts.Cordoned {
		tctx, cancel := context.WithTimeout(ctx, tenantTimeout)
		defer cancel()
		_, err := p.cs.CoreV1().Nodes().Patch(tctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`),
			metav1.PatchOptions{FieldManager: FieldOwner})
		switch {
		case apierrors.IsNotFound(err):
			// Gone meanwhile: nothing to drain; the power off follows.
			p.facts.NodeExists = false
			return nil
		case err != nil:
			return fmt.Errorf("cordoning Node %s of TenantCluster %s: %w", name, p.tenantKey(), err)
		}
		p.facts.Cordoned = true
		p.event(corev1.EventTypeNormal, EventNodeCordoned, "cordoned node %s", name)
	}
	if _, err := p.record(ctx, metav1.ConditionTrue, kubefarmv1.ReasonRemovalDraining, "evicting the pods of node "+name); err != nil {
		return err
	}
	p.facts.Recorded = kubefarmv1.ReasonRemovalDraining
	return nil
}

// drain runs one drain pass and acts on its verdict: the Node's delete
// follows a finished (or, under Skip, timed out) drain in the same pass;
// otherwise the condition says what holds it, and the next pass comes
// within the poll.
func (p *pass) drain(ctx context.Context) (time.Duration, error) {
	tctx, cancel := context.WithTimeout(ctx, tenantTimeout)
	defer cancel()
	res, err := drain.Step(tctx, p.cs, p.m.Spec.Hostname)
	if err != nil {
		return 0, fmt.Errorf("draining Node %s of TenantCluster %s: %w", p.m.Spec.Hostname, p.tenantKey(), err)
	}
	pool, err := p.pool(ctx)
	if err != nil {
		return 0, err
	}
	timeout, policy := DrainPolicy(pool)
	started := p.now
	if c := meta.FindStatusCondition(p.m.Status.Conditions, kubefarmv1.ConditionRemoving); c != nil {
		started = c.LastTransitionTime.Time
	}
	out := DecideDrain(res, started, p.now, timeout, policy, p.r.poll())
	if out.Proceed {
		if out.TimedOut {
			p.event(corev1.EventTypeWarning, EventDrainTimedOut, "%s", out.Message)
		}
		return 0, p.deleteNode(ctx)
	}
	before := meta.FindStatusCondition(p.m.Status.Conditions, kubefarmv1.ConditionRemoving)
	changed, err := p.record(ctx, metav1.ConditionTrue, out.Reason, out.Message)
	if err != nil {
		return 0, err
	}
	p.facts.Recorded = out.Reason
	switch {
	case out.TimedOut && (before == nil || !strings.HasPrefix(before.Message, "drain timed out")):
		p.event(corev1.EventTypeWarning, EventDrainTimedOut, "%s", out.Message)
	case out.Blocked && changed:
		// The blocked pods change rarely: one event per change.
		p.event(corev1.EventTypeWarning, EventDrainBlocked, "%s", out.Message)
	}
	return out.Requeue, nil
}

// pool is the Machine's NodePool, nil when it is gone (deleted with its
// Machines).
func (p *pass) pool(ctx context.Context) (*kubefarmv1.NodePool, error) {
	pool := &kubefarmv1.NodePool{}
	switch err := p.r.Client.Get(ctx, client.ObjectKey{Namespace: p.m.Namespace, Name: p.m.Spec.Pool}, pool); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading NodePool %s of Machine %s: %w", p.m.Spec.Pool, p.m.Name, err)
	}
	return pool, nil
}

// deleteNode records DeletingNode, then deletes the Node from the tenant.
func (p *pass) deleteNode(ctx context.Context) error {
	name := p.m.Spec.Hostname
	if _, err := p.record(ctx, metav1.ConditionTrue, kubefarmv1.ReasonRemovalDeleteNode, "deleting node "+name+" from the tenant"); err != nil {
		return err
	}
	p.facts.Recorded = kubefarmv1.ReasonRemovalDeleteNode
	tctx, cancel := context.WithTimeout(ctx, tenantTimeout)
	defer cancel()
	err := p.cs.CoreV1().Nodes().Delete(tctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s of TenantCluster %s: %w", name, p.tenantKey(), err)
	}
	p.facts.NodeExists = false
	if err == nil {
		p.event(corev1.EventTypeNormal, EventNodeDeleted, "deleted node %s from TenantCluster %s", name, p.m.Spec.Cluster)
	}
	return nil
}

// powerOff records PoweringOff, then powers the machine off. A failure is
// recorded (RemovalFailed, the driver's words) and tried again later: the
// Machine goes only once the machine is off.
func (p *pass) powerOff(ctx context.Context) (time.Duration, error) {
	driver := p.m.Spec.Power.Driver
	if _, err := p.record(ctx, metav1.ConditionTrue, kubefarmv1.ReasonRemovalPowerOff,
		fmt.Sprintf("powering the machine off through %s", driver)); err != nil {
		return 0, err
	}
	p.facts.Recorded = kubefarmv1.ReasonRemovalPowerOff
	pctx, cancel := context.WithTimeout(ctx, p.r.powerOffTimeout())
	defer cancel()
	err := p.r.PowerOff(pctx, p.m)
	if errors.Is(err, power.ErrUnsupported) {
		// qmp cannot power a machine off: nothing will change that, so
		// holding the Machine would only strand it.
		p.facts.PoweredOff = true
		p.event(corev1.EventTypeNormal, EventPoweredOff, "not powered off: %s cannot power a machine off", driver)
		return 0, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		msg := fmt.Sprintf("powering the machine off through %s failed, tried again in %s: %v; "+
			"to let the Machine go with the machine on, remove its finalizer %s", driver, holdPolls*p.r.poll(), err, kubefarmv1.FinalizerMachineRemoval)
		if _, rerr := p.record(ctx, metav1.ConditionTrue, kubefarmv1.ReasonRemovalFailed, msg); rerr != nil {
			return 0, rerr
		}
		p.event(corev1.EventTypeWarning, EventPowerOffFailed, "%s", msg)
		return holdPolls * p.r.poll(), nil
	}
	p.facts.PoweredOff = true
	p.event(corev1.EventTypeNormal, EventPoweredOff, "powered the machine off through %s", driver)
	return 0, nil
}

// release removes the finalizer: a merge patch of the finalizers
// conditional on the resourceVersion, retried on a conflict with a fresh
// read so that a step already taken (a power off) is not taken again.
func (p *pass) release(ctx context.Context) error {
	why := p.releaseReason()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !controllerutil.ContainsFinalizer(p.m, kubefarmv1.FinalizerMachineRemoval) {
			return nil
		}
		base := p.m.DeepCopy()
		controllerutil.RemoveFinalizer(p.m, kubefarmv1.FinalizerMachineRemoval)
		err := p.r.Client.Patch(ctx, p.m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
		if apierrors.IsConflict(err) {
			fresh := &kubefarmv1.Machine{}
			if gerr := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(p.m), fresh); gerr != nil {
				return gerr
			}
			p.m = fresh
		}
		return err
	})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the finalizer %s of Machine %s: %w", kubefarmv1.FinalizerMachineRemoval, p.m.Name, err)
	}
	p.event(corev1.EventTypeNormal, EventReleased, "%s", why)
	return nil
}

// releaseReason says why the Machine may go.
func (p *pass) releaseReason() string {
	f, host := p.facts, p.m.Spec.Hostname
	switch {
	case f.Tenant == TenantGone:
		return fmt.Sprintf("released: TenantCluster %s is gone or being deleted", p.m.Spec.Cluster)
	case f.OtherMachine:
		return fmt.Sprintf("released: node %s is Machine %s's now; it was left alone", host, p.other)
	case f.Recorded == "":
		return fmt.Sprintf("released at once: the tenant has no node %s (the machine never joined)", host)
	case f.PoweredOff:
		return fmt.Sprintf("released: node %s drained and deleted, the machine powered off", host)
	default:
		return fmt.Sprintf("released: node %s drained and deleted", host)
	}
}

// record applies the Removing condition, and only it, when it says
// something new; a change of status or reason is an event. changed says
// whether it wrote.
func (p *pass) record(ctx context.Context, status metav1.ConditionStatus, reason, msg string) (bool, error) {
	want := metav1.Condition{Type: kubefarmv1.ConditionRemoving, Status: status, Reason: reason, Message: msg}
	if have := meta.FindStatusCondition(p.m.Status.Conditions, want.Type); have != nil &&
		have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message {
		return false, nil
	}
	// A request sent on a cancelled context may still be applied while
	// the caller sees only the cancellation; not sending it keeps the
	// step recorded the one whose outcome is known.
	if err := ctx.Err(); err != nil {
		return false, err
	}
	after := slices.Clone(p.m.Status.Conditions)
	conditions.Set(&after, p.m.Generation, want)
	patch := &kubefarmv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: p.m.Namespace, Name: p.m.Name}}
	patch.Status.Conditions = []metav1.Condition{*meta.FindStatusCondition(after, want.Type)}
	if err := ssa.ApplyStatus(ctx, p.r.Client, FieldOwner, patch); err != nil {
		return false, fmt.Errorf("recording the removal of Machine %s (%s): %w", p.m.Name, reason, err)
	}
	conditions.EmitTransitions(p.r.Recorder, p.m, p.m.Status.Conditions, after,
		kubefarmv1.ReasonRemovalDrainHeld, kubefarmv1.ReasonRemovalFailed, kubefarmv1.ReasonRemovalTenantUnreachable)
	p.m.Status.Conditions = after
	return true, nil
}

func (p *pass) event(typ, reason, format string, args ...any) {
	p.r.Recorder.Eventf(p.m, nil, typ, reason, "Remove", format, args...)
}
