// Package nodepool is the controller of NodePool: it keeps one Machine per
// pool entry (created, updated and deleted with the pool) and reports the
// pool's machines in its status. The Machines come from the pure builder
// in the build subpackage; this package only fetches, applies what differs,
// prunes what the pool no longer names and writes conditions.
//
// The reconcile is a list of phases over a scope, with one deferred status
// write that computes the summary conditions (see Reconcile), the same shape
// as the TenantCluster controller's.
//
// A pool whose catch-all range says unknownMachines: Join also keeps a
// Machine for every MAC that took an address from the range and no
// Machine claims (catchall.go): named after the MAC, not in
// spec.machines, kept across lease lapses, reboots and rollouts.
//
// Every MAC and IP of a Machine is claimed (an AddressClaim, claims.go)
// before the Machine is created or readdressed, and released only once no
// Machine of the pool uses it, also after the pool is deleted
// (docs/addresses.md).
package nodepool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/machinestate"
	"github.com/kubefarm/kubefarm/internal/poolindex"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// FieldOwner is the server-side apply field manager of the NodePool
// controller's writes: the Machines' metadata and spec, and the pool's
// status fields this controller decides (ownStatus). A Machine's
// status.servedImage is not one of them: the rollout controller is its one
// writer, from the first pin on (docs/architecture.md).
const FieldOwner = "kubefarm-nodepool"

// BootImageIndex indexes NodePools by spec.bootImage, so that a BootImage
// appearing wakes exactly the pools that name it.
const BootImageIndex = "spec.bootImage"

// Reconciler reconciles NodePools.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, past the cache: the holder of a
	// claim whose create just failed, and whether a Machine still uses an
	// address before its claim is released. SetupWithManager fills it in
	// from the manager when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Now is the clock leases are judged by (time.Now when nil).
	Now func() time.Time
}

// SetupWithManager registers the controller. Owning the Machines makes a
// Machine's status (its node's readiness) and any hand edit of its spec wake
// the pool, and a Machine's deletion too, also after the pool is gone (its
// claims are released then); the index on spec.bootImage maps a BootImage
// to its pools, and those of the claims map a claim to its holder's pool
// and to the pools that wait for its address.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if err := poolindex.ByBootImage(mgr.GetFieldIndexer(), BootImageIndex); err != nil {
		return err
	}
	if err := indexClaims(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := indexLeases(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if err := setupEnrolled(mgr, r.Recorder); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.Machine{}).
		Watches(&v1alpha1.BootImage{}, handler.EnqueueRequestsFromMapFunc(poolindex.PoolsOfImage(r.Client, BootImageIndex))).
		Watches(&v1alpha1.AddressClaim{}, handler.EnqueueRequestsFromMapFunc(poolsOfClaim(r.Client))).
		Watches(&v1alpha1.DHCPLease{}, handler.EnqueueRequestsFromMapFunc(poolOfLease)).
		Named("nodepool").
		Complete(r)
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools/status,verbs=patch
// Machines block their pool's foreground deletion (blockOwnerDeletion),
// which OwnerReferencesPermissionEnforcement allows only to who may update
// the pool's finalizers.
// +kubebuilder:rbac:groups=kubefarm.io,resources=nodepools/finalizers,verbs=update
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubefarm.io,resources=bootimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=addressclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The leases of catch-all ranges, read for unknownMachines: Join.
// +kubebuilder:rbac:groups=kubefarm.io,resources=dhcpleases,verbs=get;list;watch

// scope is what one pass knows about one pool. Phases fill it in order and
// record their findings on it; the deferred status write turns the findings
// into conditions in one place.
type scope struct {
	pool *v1alpha1.NodePool
	// image is the pool's BootImage; nil when it does not exist.
	image *v1alpha1.BootImage
	// desired are the Machines the pool stands for, from the builder:
	// its entries', then its catch-all Machines.
	desired []*v1alpha1.Machine
	// retired are catch-all Machines to delete: an entry has their MAC or
	// IP now. pruneMachines deletes no other catch-all Machine.
	retired map[string]bool
	// live are the pool's Machines as the API server holds them after this
	// pass's writes, by name.
	live map[string]*v1alpha1.Machine
	// invalid is why the pool cannot be built; nothing is written then.
	invalid error
	// conflicts name the entries whose Machine belongs to someone else.
	conflicts []string
	// addressConflicts are the addresses of entries that another holder
	// has claimed; those entries' Machines are not created or readdressed.
	addressConflicts []addressConflict
}

// phase is one step of a pass. A phase that cannot go on returns stop; an
// error ends the pass too and is reported in Ready.
type phase func(ctx context.Context, s *scope) (stop bool, err error)

// Reconcile drives one NodePool towards its spec. Conditions and counts are
// computed from the scope once, by the deferred status write, so every exit
// (an invalid spec, an error) reports what was observed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	pool := &v1alpha1.NodePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// Gone: its Machines' deletions and its claims bring this request
		// until every claim whose Machine is gone has been released.
		return ctrl.Result{}, r.releaseClaims(ctx, req.Namespace, req.Name, nil)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// The Machines carry owner references to the pool: the garbage
		// collector removes them. The claims cannot carry one (a claim is
		// cluster-scoped), so each is released once its Machine is gone.
		return ctrl.Result{}, r.releaseClaims(ctx, pool.Namespace, pool.Name, nil)
	}
	s := &scope{pool: pool, live: map[string]*v1alpha1.Machine{}}
	before := pool.Status.DeepCopy()
	defer func() {
		r.summarize(s, retErr)
		if equality.Semantic.DeepEqual(before, &s.pool.Status) {
			return
		}
		if err := ssa.ApplyStatus(ctx, r.Client, FieldOwner, ownStatus(s.pool)); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("applying the status of NodePool %s/%s: %w", pool.Namespace, pool.Name, err))
			return
		}
		conditions.EmitTransitions(r.Recorder, s.pool, before.Conditions, s.pool.Status.Conditions,
			v1alpha1.ReasonInvalidSpec, v1alpha1.ReasonReconcileError, v1alpha1.ReasonAddressConflict)
		r.emitNewConflicts(s.pool, before.Conditions)
	}()
	for _, p := range []phase{r.buildMachines, r.buildCatchAll, r.fetchImage, r.applyMachines, r.pruneMachines, r.releasePoolClaims} {
		stop, err := p(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if stop {
			break
		}
	}
	return ctrl.Result{}, nil
}

// buildMachines runs the builder. A pool it refuses is an invalid spec:
// retrying cannot help, and the pool's next edit brings the next pass.
func (r *Reconciler) buildMachines(ctx context.Context, s *scope) (bool, error) {
	want, err := desired.Machines(s.pool)
	if err != nil {
		s.invalid = err
		log.FromContext(ctx).Info("invalid NodePool", "error", err.Error())
		return true, nil
	}
	s.desired = want
	return false, nil
}

// fetchImage reads the pool's BootImage, the target its updatedMachines
// count is taken against. A missing one does not stop the pass: the
// Machines' identity does not depend on it, and kubefarm-pxe can already
// answer their DHCP; only a new Machine's served image waits (the rollout
// controller pins it once the BootImage exists).
func (r *Reconciler) fetchImage(ctx context.Context, s *scope) (bool, error) {
	img := &v1alpha1.BootImage{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: s.pool.Spec.BootImage}, img); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading BootImage %s: %w", s.pool.Spec.BootImage, err)
	}
	s.image = img
	return false, nil
}

// applyMachines writes each desired Machine whose live copy differs.
// Comparing
// first keeps a pass that changes nothing free of writes: every Machine's
// status update wakes its pool, and a pool of 250 would otherwise cost 250
// applies per node heartbeat that changes a condition.
func (r *Reconciler) applyMachines(ctx context.Context, s *scope) (bool, error) {
	for _, want := range s.desired {
		live := &v1alpha1.Machine{}
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return false, fmt.Errorf("reading Machine %s: %w", want.Name, err)
		}
		if live != nil && !metav1.IsControlledBy(live, s.pool) {
			s.conflicts = append(s.conflicts, want.Name)
			continue
		}
		// The addresses are claimed before the Machine is created or
		// readdressed: the Machine webhook refuses it otherwise, and the
		// claim's create is what keeps two pools from taking one address.
		conflicts, err := r.claimAddresses(ctx, want)
		if err != nil {
			return false, err
		}
		if len(conflicts) > 0 {
			s.addressConflicts = append(s.addressConflicts, conflicts...)
			if live != nil {
				// It keeps the addresses it has, which it holds.
				s.live[live.Name] = live
			}
			continue
		}
		if live == nil || !upToDate(live, want) {
			applied := &v1alpha1.Machine{}
			if err := ssa.Apply(ctx, r.Client, FieldOwner, want, applied); err != nil {
				return false, err
			}
			live = applied
		}
		s.live[live.Name] = live
	}
	return false, nil
}

// upToDate tells whether live already carries everything the builder
// decides: spec, the builder's labels, and the owner reference. What others
// added (labels, owner references) does not count: applying would not
// remove it, so it would only make every pass write.
func upToDate(live, want *v1alpha1.Machine) bool {
	if !equality.Semantic.DeepEqual(live.Spec, want.Spec) {
		return false
	}
	for k, v := range want.Labels {
		if live.Labels[k] != v {
			return false
		}
	}
	for _, ref := range want.OwnerReferences {
		if !slices.ContainsFunc(live.OwnerReferences, func(o metav1.OwnerReference) bool {
			return equality.Semantic.DeepEqual(o, ref)
		}) {
			return false
		}
	}
	return true
}

// pruneMachines deletes the pool's Machines whose entry is gone. Only
// Machines the pool controls are touched, with a UID precondition, so a
// Machine recreated meanwhile under the same name survives.
func (r *Reconciler) pruneMachines(ctx context.Context, s *scope) (bool, error) {
	list := &v1alpha1.MachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(s.pool.Namespace),
		client.MatchingLabels{v1alpha1.LabelPool: s.pool.Name}); err != nil {
		return false, fmt.Errorf("listing the Machines of NodePool %s: %w", s.pool.Name, err)
	}
	wanted := make(map[string]bool, len(s.desired))
	for _, m := range s.desired {
		wanted[m.Name] = true
	}
	for i := range list.Items {
		m := &list.Items[i]
		if wanted[m.Name] || !metav1.IsControlledBy(m, s.pool) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		// A catch-all Machine has no entry to be gone: it goes only when
		// an entry took its MAC or address. Deciding that from the list
		// alone would delete one the cache showed here but not to
		// buildCatchAll a moment before.
		if m.Labels[v1alpha1.LabelCatchAll] != "" && !s.retired[m.Name] {
			continue
		}
		if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting Machine %s: %w", m.Name, err)
		}
		why := "its entry is no longer in the pool"
		if s.retired[m.Name] {
			why = "an entry of spec.machines has its MAC or address now"
		}
		r.Recorder.Eventf(s.pool, m, corev1.EventTypeNormal, "MachineDeleted", "Delete", "deleted Machine %s: %s", m.Name, why)
	}
	return false, nil
}

// releasePoolClaims releases the claims of entries that are gone or
// readdressed, once their Machine no longer uses the address.
func (r *Reconciler) releasePoolClaims(ctx context.Context, s *scope) (bool, error) {
	return false, r.releaseClaims(ctx, s.pool.Namespace, s.pool.Name, s.desired)
}

// emitNewConflicts records a Warning event when the pool's address
// conflicts change while it already had some: the condition's transition
// event (EmitTransitions) tells only of the first.
func (r *Reconciler) emitNewConflicts(pool *v1alpha1.NodePool, before []metav1.Condition) {
	old := meta.FindStatusCondition(before, v1alpha1.ConditionAddressesClaimed)
	now := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionAddressesClaimed)
	if old == nil || now == nil || now.Reason != v1alpha1.ReasonAddressConflict ||
		old.Reason != now.Reason || old.Message == now.Message {
		return
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonAddressConflict, "Reconcile", "%s", now.Message)
}

// summarize turns the scope into the pool's status: the counts and the
// MachinesReady and Ready conditions. It is the only place either
// condition is decided.
func (r *Reconciler) summarize(s *scope, passErr error) {
	pool := s.pool
	pool.Status.ObservedGeneration = pool.Generation
	set := func(c metav1.Condition) { conditions.Set(&pool.Status.Conditions, pool.Generation, c) }
	if s.invalid != nil {
		set(conditions.New(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, s.invalid.Error()))
		return
	}
	counts := countMachines(s.image, s.desired, s.live)
	pool.Status.Machines, pool.Status.ReadyMachines, pool.Status.UpdatedMachines =
		int32(len(s.desired)), int32(counts.ready), int32(counts.updated)

	machinesReady := conditions.New(v1alpha1.ConditionMachinesReady, true, v1alpha1.ReasonAllMachinesReady,
		fmt.Sprintf("%d of %d machines are Ready nodes", counts.ready, len(s.desired)))
	switch {
	case len(s.desired) == 0:
		machinesReady = conditions.New(v1alpha1.ConditionMachinesReady, false, v1alpha1.ReasonNoMachines, "the pool has no machines")
	case len(counts.notReady) > 0:
		machinesReady = conditions.New(v1alpha1.ConditionMachinesReady, false, v1alpha1.ReasonMachinesNotReady,
			fmt.Sprintf("%d of %d machines are Ready nodes; not Ready: %s", counts.ready, len(s.desired), someOf(counts.notReady)))
	}
	claimed := conditions.New(v1alpha1.ConditionAddressesClaimed, true, v1alpha1.ReasonAddressesClaimed,
		"every address of the pool's machines is claimed for it")
	if len(s.addressConflicts) > 0 {
		claimed = conditions.New(v1alpha1.ConditionAddressesClaimed, false, v1alpha1.ReasonAddressConflict,
			"addresses claimed by others; these machines are not created or readdressed until they are free: "+someConflicts(s.addressConflicts))
	}
	if passErr == nil {
		// A failed pass saw only part of the Machines; the previous
		// MachinesReady and AddressesClaimed stay rather than a partial
		// count.
		set(machinesReady)
		set(claimed)
	}

	var ready metav1.Condition
	switch {
	case passErr != nil:
		ready = conditions.New(v1alpha1.ConditionReady, false, v1alpha1.ReasonReconcileError, passErr.Error())
	case s.image == nil:
		ready = conditions.New(v1alpha1.ConditionReady, false, v1alpha1.ReasonBootImageNotFound,
			fmt.Sprintf("BootImage %s does not exist; new machines get a served image once it does", pool.Spec.BootImage))
	case len(s.conflicts) > 0:
		ready = conditions.New(v1alpha1.ConditionReady, false, v1alpha1.ReasonMachineConflict,
			"these Machines exist and belong to something else, so their entries are not applied: "+someOf(s.conflicts))
	case claimed.Status != metav1.ConditionTrue:
		ready = conditions.New(v1alpha1.ConditionReady, false, claimed.Reason, claimed.Message)
	case machinesReady.Status != metav1.ConditionTrue:
		ready = conditions.New(v1alpha1.ConditionReady, false, machinesReady.Reason, machinesReady.Message)
	default:
		ready = conditions.New(v1alpha1.ConditionReady, true, v1alpha1.ReasonPoolReady, machinesReady.Message)
	}
	set(ready)
}

// ownStatus is the part of the pool's status this controller decides: the
// counts and the Ready, MachinesReady and AddressesClaimed conditions. The rollout controller
// writes the rest under its own field manager; applying the whole status
// read from the cache would take its fields over and put stale values back.
func ownStatus(pool *v1alpha1.NodePool) *v1alpha1.NodePool {
	out := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace}}
	st := &pool.Status
	out.Status = v1alpha1.NodePoolStatus{ObservedGeneration: st.ObservedGeneration,
		Machines: st.Machines, ReadyMachines: st.ReadyMachines, UpdatedMachines: st.UpdatedMachines}
	for _, c := range st.Conditions {
		if c.Type == v1alpha1.ConditionReady || c.Type == v1alpha1.ConditionMachinesReady ||
			c.Type == v1alpha1.ConditionAddressesClaimed {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out
}

type machineCounts struct {
	ready, updated int
	notReady       []string
}

// countMachines counts the desired Machines whose node is Ready (their
// NodeReady condition) and those up to date with the pool's BootImage
// (machinestate.UpToDate, the rule the rollout's Complete uses too); with
// no BootImage, none is up to date.
func countMachines(image *v1alpha1.BootImage, desired []*v1alpha1.Machine, live map[string]*v1alpha1.Machine) machineCounts {
	var c machineCounts
	target := machinestate.Target(image)
	for _, want := range desired {
		m := live[want.Name]
		if m != nil && meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ConditionNodeReady) {
			c.ready++
		} else {
			c.notReady = append(c.notReady, want.Name)
		}
		if m != nil && target != nil && machinestate.UpToDate(m, *target) {
			c.updated++
		}
	}
	sort.Strings(c.notReady)
	return c
}

// someConflicts names up to five conflicts, like someOf.
func someConflicts(cs []addressConflict) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.String()
	}
	return someOf(names)
}

// someOf names up to five items, and how many more there are, so that a
// condition message stays short for a pool of 250.
func someOf(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}
