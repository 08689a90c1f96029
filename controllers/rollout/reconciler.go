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
// A Machine the NodePool controller has just made gets its first served
// image here too (serveFirst), before the tenant is reached, so this
// controller is the one writer of status.servedImage.
//
// The pass is a list of phases over a scope (phases below), the same shape
// as the TenantCluster and NodePool controllers'; the pool's status is
// written once, by Reconcile's deferred write, when the pass completes.
//
// The reboot itself is pulled: kubefarm-agent's heartbeat is answered
// "reboot" while the Machine is Rebooting from the boot the agent runs. A
// machine that does not reboot within spec.rollout.powerCycleAfter is reset
// through its power driver (spec.power), once, recorded before the reset.
package rollout

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
	"github.com/kubefarm/kubefarm/internal/poolindex"
	"github.com/kubefarm/kubefarm/power"
)

// FieldOwner is the field manager of the rollout's writes: the Machines'
// status.servedImage (its first pin and every move), status.rollout and
// status.history, and the pool's rollout status fields and conditions.
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
	// Power resets machines that do not reboot (with a one-time network
	// boot for a BMC's machine); nil disables the fallback.
	Power *power.Control
	// Alerts reads the alert sources spec.rollout.alertGate names; nil
	// makes every pool with an alert gate an invalid strategy.
	Alerts AlertReader
	// Notifier posts spec.rollout.notify's notifications; nil sends none.
	Notifier Notifier
	// SecretReader reads the notification URL's Secret, an operator's
	// that the manager's cache does not hold (nil: Client).
	SecretReader client.Reader
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Poll is DefaultPoll when zero.
	Poll time.Duration

	// haltsNotified are the pools whose current halt was notified
	// (notifyHalt), by namespace and name.
	haltsNotified sync.Map

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
	if err := poolindex.ByBootImage(mgr.GetFieldIndexer(), bootImageIndex); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.Machine{}).
		Watches(&v1alpha1.BootImage{}, handler.EnqueueRequestsFromMapFunc(poolindex.PoolsOfImage(r.Client, bootImageIndex))).
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

// scope is what one pass knows of one pool. Phases fill it in order.
type scope struct {
	pool *v1alpha1.NodePool
	// image is the pool's BootImage; nil when it does not exist.
	image  *v1alpha1.BootImage
	target v1alpha1.ImageRef
	// listed are the pool's live Machines, by name; machines pairs each
	// with its tenant Node once the tenant was read.
	listed   []*v1alpha1.Machine
	machines []plan.Machine
	cs       kubernetes.Interface
	now      time.Time
	// sum is the pool as the pass sees it, written as its status.
	sum plan.Summary
	// sel is what the planner decided.
	sel plan.Selection
	// requeue is the soonest the pass wants to look again (0: no need).
	requeue time.Duration
	// conflicts counts Machines whose write met a newer version than the
	// cache's; they are left to the next pass.
	conflicts int
	// drainBlocked names the first machine whose drain pass met a refused
	// eviction, and why, for the pool's Progressing.
	drainBlocked string
}

// wake asks for the next pass within d at the latest (d <= 0: no ask).
func (s *scope) wake(d time.Duration) {
	if d > 0 && (s.requeue == 0 || d < s.requeue) {
		s.requeue = d
	}
}

// phase is one step of a pass. A phase that leaves nothing for the later
// ones returns stop; an error ends the pass, and the pool's status is not
// written (a failed pass saw part of the pool; the status it last wrote
// stands until a pass completes).
type phase func(ctx context.Context, s *scope) (stop bool, err error)

// phases is the pass, in order: gate the image, list the Machines, pin a
// first image on new ones, read the tenant, act on a retry, drive the
// updates in flight, apply pause, halt and windows, read the per-machine
// gates (blocking pods, reboot holds), start what the planner selects,
// write the machines' holds, and decide when to look again.
func (r *Reconciler) phases() []phase {
	return []phase{r.gateImage, r.listMachines, r.serveFirst, r.readTenant,
		r.retry, r.driveInFlight, r.gateWindows, r.readGates, r.startSelected, r.writeHolds, r.requeueAfter}
}

// Reconcile runs one pass over a pool. The pool's status is written once,
// by the deferred write, when every phase ran without an error.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	pool := &v1alpha1.NodePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			forgetPool(req.Namespace, req.Name)
			r.haltsNotified.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := pool.Status.DeepCopy()
	st := pool.Spec.Rollout
	s := &scope{pool: pool, now: r.now(), sum: plan.Summary{Paused: st.Paused,
		FailureBudget: int(ptr.Deref(st.FailureBudget, v1alpha1.DefaultFailureBudget)), WindowOpen: true}}
	defer func() {
		if retErr != nil {
			return
		}
		if err := r.writeStatus(ctx, s, before); err != nil {
			res, retErr = ctrl.Result{}, err
		}
	}()
	for _, ph := range r.phases() {
		stop, err := ph(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if stop {
			break
		}
	}
	return ctrl.Result{RequeueAfter: s.requeue}, nil
}
