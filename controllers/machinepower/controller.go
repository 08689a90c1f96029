// Package machinepower keeps each Machine's status.power and PowerControl
// condition current, and performs the power operations people ask for.
//
// For every Machine with spec.power it reads the power state through the
// machine's driver (power.Control: the credentials come from the Secrets
// spec.power names, read uncached) on a bounded, jittered poll (Interval
// ±20%, default 5 minutes), and at once when spec.power changes. It
// writes status.power {state, readTime} and the PowerControl condition
// (True PowerRead; False with the BMC's own words and PowerFailed,
// PowerAuthFailed or PowerCredentialsMissing), and a Warning event with
// those words when a read starts failing or fails differently.
//
// A person asks for an operation with the kubefarm.io/power-request
// annotation ("<on|off|cycle>[,netboot]@<RFC3339 time>", `kubectl kubefarm
// power` sets it). A request whose time is after status.power.
// lastOperationTime is recorded there as Pending before it is performed,
// then as Succeeded or Failed, so that a manager restarted meanwhile never
// performs it twice (it records Interrupted instead). Every write names
// the resourceVersion it was decided on, so a decision from a stale cache
// fails instead of repeating an operation.
//
// Its writes are server-side applies of status.power and the PowerControl
// condition alone, under FieldOwner: the rollout and kubefarm-pxe write
// the Machine's other status fields.
package machinepower

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/ssa"
	"github.com/kubefarm/kubefarm/power"
)

// FieldOwner is the field manager of status.power and the PowerControl
// condition.
const FieldOwner = "kubefarm-machinepower"

const (
	// DefaultInterval is how often a machine's power state is read when
	// nothing else asks: a BMC answers in a second, and a farm of
	// thousands of machines then costs a few reads a second.
	DefaultInterval = 5 * time.Minute
	// DefaultTimeout bounds one read or operation, the drivers' own
	// timeouts and retries included (ipmi 15 s, redfish 20 s).
	DefaultTimeout = time.Minute
	// concurrency is how many machines are read or driven at once.
	concurrency = 8
)

// Event reasons on the Machine.
const (
	ReasonReadFailed       = "PowerReadFailed"
	ReasonReadRecovered    = "PowerReadRecovered"
	ReasonRequestInvalid   = "PowerRequestInvalid"
	ReasonOperation        = "PowerOperation"
	ReasonOperationFailed  = "PowerOperationFailed"
	ReasonOperationUnknown = "PowerOperationInterrupted"
)

// Reconciler is the machinepower controller.
type Reconciler struct {
	// Client reads Machines from the manager's cache and writes their
	// status.
	Client client.Client
	// APIReader reads a Machine afresh when a write meets a newer version.
	APIReader client.Reader
	// Power drives the machines (its Reader reads the Secrets uncached).
	Power    power.Control
	Recorder events.EventRecorder
	// Interval between reads of a machine's power state (DefaultInterval
	// when zero), jittered by ±JitterFraction.
	Interval time.Duration
	// Timeout bounds one read or operation (DefaultTimeout when zero).
	Timeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu sync.Mutex
	// performed is the time of the latest request this process performed,
	// per Machine.
	performed map[types.NamespacedName]time.Time
	// rejected is the request value last rejected, per Machine: one event
	// per value, not one per pass.
	rejected map[types.NamespacedName]string
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller. A Machine is reconciled when
// it is created, when its spec or annotations change and when its poll is
// due; its status writes (the rollout's, kubefarm-pxe's, its own) do not
// wake it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Machine{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("machinepower").
		Complete(r)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) interval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultInterval
}

func (r *Reconciler) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

// Reconcile performs a pending power request, reads the power state when
// it is due, and asks to be woken for the next read.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &v1alpha1.Machine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		// Machine removal powers a leaving machine off; no more reads.
		return ctrl.Result{}, nil
	}
	if m.Spec.Power == nil {
		return ctrl.Result{}, r.forget(ctx, m)
	}
	now := r.now()
	value, present := m.Annotations[v1alpha1.AnnotationPowerRequest]
	d := decideRequest(value, present, m.Status.Power, r.performedAt(req.NamespacedName), now)
	switch d.action {
	case requestRejected:
		r.reject(m, value, d.why)
	case requestInterrupted:
		msg := fmt.Sprintf("%s requested at %s: the manager stopped while it was being performed; it may or may not have happened, and is not repeated",
			d.req.Operation(), d.req.Time.Format(time.RFC3339))
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonOperationUnknown, d.req.Operation(), "%s", msg)
		if err := r.write(ctx, m, func(st *v1alpha1.MachinePowerStatus) *metav1.Condition {
			st.LastOperation = power.LastOperation(d.req, power.OutcomeInterrupted)
			return nil
		}); err != nil {
			return ctrl.Result{}, err
		}
	case requestPerform:
		return r.perform(ctx, m, d.req)
	}
	interval := r.interval()
	if !readDue(now, m, interval) {
		return ctrl.Result{RequeueAfter: nextWait(now, m.Status.Power.ReadTime.Time, interval, rand.Float64())}, nil
	}
	if err := r.read(ctx, m, now, ""); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: nextWait(now, now, interval, rand.Float64())}, nil
}

// read reads the power state and writes it with the PowerControl
// condition; prefix, when set, starts the condition's message (the
// operation just performed).
func (r *Reconciler) read(ctx context.Context, m *v1alpha1.Machine, now time.Time, prefix string) error {
	opCtx, cancel := context.WithTimeout(ctx, r.timeout())
	state, err := r.Power.Status(opCtx, m)
	cancel()
	msg := "the power control reports " + string(state)
	if err != nil {
		state, msg = power.StateUnknown, err.Error()
	}
	if prefix != "" {
		msg = prefix + "; " + msg
	}
	c := conditions.New(v1alpha1.ConditionPowerControl, err == nil, power.Reason(err), msg)
	before := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionPowerControl)
	if err := r.write(ctx, m, func(st *v1alpha1.MachinePowerStatus) *metav1.Condition {
		st.State, st.ReadTime = v1alpha1.PowerState(state), metav1.NewTime(now)
		return &c
	}); err != nil {
		return err
	}
	r.readEvent(m, before, c)
	return nil
}

// readEvent tells a read that starts failing, fails differently or
// recovers.
func (r *Reconciler) readEvent(m *v1alpha1.Machine, before *metav1.Condition, c metav1.Condition) {
	switch {
	case c.Status == metav1.ConditionFalse && (before == nil || before.Status != c.Status || before.Reason != c.Reason || before.Message != c.Message):
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonReadFailed, "PowerStatus", "%s: %s", c.Reason, c.Message)
	case c.Status == metav1.ConditionTrue && before != nil && before.Status == metav1.ConditionFalse:
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonReadRecovered, "PowerStatus", "%s", c.Message)
	}
}

// perform records req Pending, performs it, then records the outcome and
// the power state read after it.
func (r *Reconciler) perform(ctx context.Context, m *v1alpha1.Machine, req power.Request) (ctrl.Result, error) {
	now := r.now()
	// Recorded before it is tried, on the version it was decided on: a
	// stale cache conflicts here (and the next pass decides again), and a
	// restart finds it Pending and does not try again.
	if err := r.apply(ctx, m, func(st *v1alpha1.MachinePowerStatus) *metav1.Condition {
		st.LastOperation, st.LastOperationTime = power.LastOperation(req, power.OutcomePending), &metav1.Time{Time: req.Time}
		return nil
	}); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	r.setPerformed(client.ObjectKeyFromObject(m), req.Time)
	opCtx, cancel := context.WithTimeout(ctx, r.timeout())
	var err error
	switch req.Op {
	case power.OpOn:
		err = r.Power.On(opCtx, m, req.Options())
	case power.OpOff:
		err = r.Power.Off(opCtx, m)
	case power.OpCycle:
		err = r.Power.Cycle(opCtx, m, req.Options())
	}
	cancel()
	what := fmt.Sprintf("%s requested at %s", req.Operation(), req.Time.Format(time.RFC3339))
	if err != nil {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonOperationFailed, req.Operation(), "%s failed: %v", what, err)
		c := conditions.New(v1alpha1.ConditionPowerControl, false, power.Reason(err), what+" failed: "+err.Error())
		return ctrl.Result{RequeueAfter: nextWait(now, now, r.interval(), rand.Float64())},
			r.write(ctx, m, func(st *v1alpha1.MachinePowerStatus) *metav1.Condition {
				st.LastOperation = power.LastOperation(req, power.OutcomeFailed)
				return &c
			})
	}
	r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonOperation, req.Operation(), "%s: done", what)
	// The outcome rides in the same write as the state read after it, so
	// whoever sees Succeeded sees that read's condition too.
	if err := r.recordOutcome(ctx, m, req, what); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: nextWait(now, now, r.interval(), rand.Float64())}, nil
}

// recordOutcome reads the state after a successful operation and writes
// it with the Succeeded outcome.
func (r *Reconciler) recordOutcome(ctx context.Context, m *v1alpha1.Machine, req power.Request, what string) error {
	now := r.now()
	opCtx, cancel := context.WithTimeout(ctx, r.timeout())
	state, err := r.Power.Status(opCtx, m)
	cancel()
	msg := fmt.Sprintf("%s: done; the power control reports %s", what, state)
	if err != nil {
		state, msg = power.StateUnknown, fmt.Sprintf("%s: done; reading the state after it: %v", what, err)
	}
	c := conditions.New(v1alpha1.ConditionPowerControl, err == nil, power.Reason(err), msg)
	return r.write(ctx, m, func(st *v1alpha1.MachinePowerStatus) *metav1.Condition {
		st.State, st.ReadTime = v1alpha1.PowerState(state), metav1.NewTime(now)
		st.LastOperation = power.LastOperation(req, power.OutcomeSucceeded)
		return &c
	})
}

// reject records one Warning event per rejected value.
func (r *Reconciler) reject(m *v1alpha1.Machine, value, why string) {
	key := client.ObjectKeyFromObject(m)
	r.mu.Lock()
	if r.rejected == nil {
		r.rejected = map[types.NamespacedName]string{}
	}
	seen := r.rejected[key] == value
	r.rejected[key] = value
	r.mu.Unlock()
	if !seen {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonRequestInvalid, "PowerRequest", "%s", why)
	}
}

func (r *Reconciler) performedAt(key types.NamespacedName) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.performed[key]
}

func (r *Reconciler) setPerformed(key types.NamespacedName, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.performed == nil {
		r.performed = map[types.NamespacedName]time.Time{}
	}
	r.performed[key] = t
}

// forget removes what this controller wrote on a Machine whose spec.power
// is gone: an empty apply gives up its fields, and the API server removes
// them.
func (r *Reconciler) forget(ctx context.Context, m *v1alpha1.Machine) error {
	if m.Status.Power == nil && meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionPowerControl) == nil {
		return nil
	}
	return ssa.ApplyStatus(ctx, r.Client, FieldOwner, &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}})
}

// mutation changes a copy of the Machine's status.power and returns the
// PowerControl condition to write (nil: keep the one there).
type mutation func(st *v1alpha1.MachinePowerStatus) *metav1.Condition

// write applies mutate to m; when m is older than the server's copy
// (another writer changed the status since the cache's), it reads m
// afresh and applies mutate to that, a few times at most.
func (r *Reconciler) write(ctx context.Context, m *v1alpha1.Machine, mutate mutation) error {
	var err error
	for range 4 {
		if err = r.apply(ctx, m, mutate); !apierrors.IsConflict(err) {
			return err
		}
		fresh := &v1alpha1.Machine{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		*m = *fresh
	}
	return err
}

// apply writes status.power and the PowerControl condition, as mutate
// leaves them from m's, by server-side apply under FieldOwner with m's
// resourceVersion as a precondition; m is updated with what was written.
func (r *Reconciler) apply(ctx context.Context, m *v1alpha1.Machine, mutate mutation) error {
	st := &v1alpha1.MachinePowerStatus{State: v1alpha1.PowerUnknown, ReadTime: metav1.NewTime(r.now())}
	if m.Status.Power != nil {
		st = m.Status.Power.DeepCopy()
	}
	c := mutate(st)
	conds := slices.Clone(m.Status.Conditions)
	if c != nil {
		conditions.Set(&conds, m.Generation, *c)
	}
	status := v1alpha1.MachineStatus{Power: st}
	if have := meta.FindStatusCondition(conds, v1alpha1.ConditionPowerControl); have != nil {
		status.Conditions = []metav1.Condition{*have}
	}
	owned := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace}, Status: status}
	rv, err := ssa.ApplyStatusAt(ctx, r.Client, FieldOwner, owned, m.ResourceVersion)
	if err != nil {
		if !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "writing status.power", "machine", m.Name)
		}
		return fmt.Errorf("writing status.power of Machine %s/%s: %w", m.Namespace, m.Name, err)
	}
	m.ResourceVersion = rv
	m.Status.Power, m.Status.Conditions = st, conds
	return nil
}
