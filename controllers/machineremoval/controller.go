// Package machineremoval takes a machine out of its tenant before its
// Machine goes (docs/nodes.md, "Removing a machine"). Every Machine
// carries the finalizer kubefarm.io/machine-removal, added here and
// removed only here; when a Machine is deleted (its pool entry removed,
// its pool deleted, or by hand) a pass:
//
//  1. cordons the tenant's Node of the machine's hostname,
//  2. drains it with the rollout's drain (controllers/rollout/drain: the
//     Eviction API, so PodDisruptionBudgets are honoured), bounded by the
//     pool's spec.rollout.drainTimeout and drainTimeoutPolicy,
//  3. deletes the Node from the tenant,
//  4. powers the machine off where it has spec.power (Reconciler.PowerOff:
//     the manager's power.Control.Off; a driver that cannot power off,
//     qmp, skips the step with an event),
//  5. removes the finalizer, and the Machine goes.
//
// Each step is written to the Machine's Removing condition before its side
// effect, so a manager that restarts resumes at the step it was in, and
// each step's effect is idempotent. Which step comes next is decided by
// Decide from what the pass found (decide.go); the drain's verdict by
// DecideDrain.
//
// A Machine whose Node the tenant's API server says it does not have (the
// machine never joined), whose TenantCluster is gone or being deleted, or
// whose hostname another live Machine of the tenant has taken, goes at
// once. A tenant that does not answer holds the Machine, with the
// condition saying so: without the tenant a machine that never joined
// cannot be told from one whose Node still runs pods. An operator who
// wants it gone anyway removes the finalizer by hand.
//
// The rollout never picks up a Machine being deleted (controllers/rollout
// lists live Machines only), and machinenode leaves its Node alone.
package machineremoval

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// FieldOwner is the field manager of the finalizer and of the Machines'
// Removing condition, and the user agent of the requests to the tenants.
const FieldOwner = "kubefarm-machineremoval"

// DefaultPoll is how soon a removal that waits (a drain in progress or
// held) is looked at again; a held tenant or a failed power off waits
// holdPolls times as long.
const DefaultPoll = 5 * time.Second

const (
	holdPolls = 6
	// tenantTimeout bounds one request to a tenant.
	tenantTimeout = 30 * time.Second
	// maxStepsPerPass bounds one pass; a removal takes at most five steps.
	maxStepsPerPass = 8
)

// DefaultPowerOffTimeout bounds one power off when Reconciler's
// PowerOffTimeout is zero (the drivers bound their own requests and
// retries below it: ipmi 15 s, redfish 20 s by default).
const DefaultPowerOffTimeout = 2 * time.Minute

// Event reasons on the Machine besides the Removing condition's transitions
// (which are conditions.EmitTransitions's: Removing<reason>).
const (
	EventNodeCordoned   = "NodeCordoned"
	EventDrainBlocked   = "DrainBlocked"
	EventDrainTimedOut  = "DrainTimedOut"
	EventNodeDeleted    = "NodeDeleted"
	EventPoweredOff     = "PoweredOff"
	EventPowerOffFailed = "PowerOffFailed"
	EventHeld           = "TenantUnreachable"
	EventReleased       = "Released"
)

// Reconciler adds the removal finalizer to every Machine and takes a
// deleted Machine's machine out of its tenant before removing it.
type Reconciler struct {
	// Client reads the admin cluster from the manager's cache and writes.
	Client client.Client
	// APIReader reads from the API server: a deleted Machine (its recorded
	// step) and its TenantCluster are read there, never from a cache that
	// may be behind the pass's own writes.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Tenants is the manager's tenant cache; required.
	Tenants *tenantcache.Cache
	// PowerOff powers a machine with spec.power off; nil powers nothing
	// off (the Machine goes once its Node is deleted).
	PowerOff func(ctx context.Context, m *kubefarmv1.Machine) error
	// PowerOffTimeout bounds one PowerOff call; DefaultPowerOffTimeout
	// when zero. The manager sets it above the drivers' own timeout.
	PowerOffTimeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Poll is DefaultPoll when zero.
	Poll time.Duration
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=machines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the tenant cache (once; it also registers the
// Machine index) and the controller ("machineremoval").
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Tenants == nil {
		return errors.New("machineremoval: no tenant cache")
	}
	if r.APIReader == nil {
		return errors.New("machineremoval: no API reader")
	}
	if err := r.Tenants.SetupWithManager(mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kubefarmv1.Machine{}).
		// Machines are independent; a slow tenant holds one worker for
		// tenantTimeout at most.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("machineremoval").
		Complete(r)
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

func (r *Reconciler) powerOffTimeout() time.Duration {
	if r.PowerOffTimeout > 0 {
		return r.PowerOffTimeout
	}
	return DefaultPowerOffTimeout
}

// Reconcile adds the finalizer to a live Machine, and runs one removal pass
// over a deleted one that carries it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &kubefarmv1.Machine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.addFinalizer(ctx, m)
	}
	if !controllerutil.ContainsFinalizer(m, kubefarmv1.FinalizerMachineRemoval) {
		return ctrl.Result{}, nil
	}
	// The recorded step decides what the pass does: read it where the
	// pass's own last write surely is.
	live := &kubefarmv1.Machine{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !controllerutil.ContainsFinalizer(live, kubefarmv1.FinalizerMachineRemoval) {
		return ctrl.Result{}, nil
	}
	p := &pass{r: r, m: live, now: r.now()}
	return p.run(ctx)
}

// addFinalizer adds the finalizer with a merge patch of the finalizers
// conditional on the resourceVersion read: the list is replaced whole, so
// a concurrent change of it makes the patch fail (and the pass retry)
// instead of being lost.
func (r *Reconciler) addFinalizer(ctx context.Context, m *kubefarmv1.Machine) error {
	if controllerutil.ContainsFinalizer(m, kubefarmv1.FinalizerMachineRemoval) {
		return nil
	}
	base := m.DeepCopy()
	controllerutil.AddFinalizer(m, kubefarmv1.FinalizerMachineRemoval)
	err := r.Client.Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("adding the finalizer %s to Machine %s: %w", kubefarmv1.FinalizerMachineRemoval, m.Name, err)
	}
	return nil
}
