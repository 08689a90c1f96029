// Package machinenode keeps each Machine and its Node in the tenant
// cluster in step, from the manager's side:
//
//   - the Machine's NodeReady condition says what the tenant's Node of the
//     machine's hostname says of itself (its Ready condition), or that the
//     tenant has no such Node; the NodePool controller counts ready
//     machines from it;
//   - the taint kubefarm.io/network-unavailable:NoSchedule, which the
//     kubelet registers the Node with, is lifted only once the Machine's
//     NetworkVerified condition is True for the boot the Node runs now
//     (DecideTaint), and no other taint is touched;
//   - the labels of the machine's tags that the kubelet may not set on its
//     own Node (node-role.kubernetes.io/* and the rest of the kubernetes.io
//     and k8s.io namespaces but the kubelet's own) are applied to the Node
//     by server-side apply, so they are owned and put back if removed.
//
// The last two are the manager's because they cannot be the node's: the
// NodeRestriction admission plugin lets a kubelet's credential neither
// remove taints from its Node nor set those labels on it (nor touch any
// other Node). A node's own credential therefore never untaints or
// relabels anything; the manager does, with the tenant's internal admin
// credential, after checking the Machine's record in the admin cluster,
// which the node cannot write.
//
// The controller is a Watch of the manager's tenant cache
// (internal/tenantcache, shared with the CSR approval and the rollout): per
// TenantCluster whose control plane the manager can reach, the tenant's
// shared Node informer feeds the controller's own queue of node names and
// one worker, so a slow or unreachable tenant holds up only its own nodes.
// A Node's changes enqueue its name; so do its Machine's (through a
// controller on Machines and NodePools, which only routes) and the
// connection's start (every Machine of the tenant, once the Node list is
// complete, so that a Machine whose node never registered is told so).
// A Node is acted on only when exactly one Machine of the tenant has its
// name as hostname (tenantcache.MachineNodeIndex).
package machinenode

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// FieldOwner is the field manager of the Machines' NodeReady condition in
// the admin cluster and of the labels and taint removals on the tenants'
// Nodes.
const FieldOwner = "kubefarm-machinenode"

// Event reasons on the Machine besides NodeReady's transitions (which are
// conditions.EmitTransitions's: NodeReady<reason>).
const (
	// ReasonNetworkTaintLifted: the network-unavailable taint was removed
	// from the machine's Node.
	ReasonNetworkTaintLifted = "NetworkTaintLifted"
	// ReasonNodeLabelsApplied: the labels the kubelet may not set were
	// applied to the machine's Node.
	ReasonNodeLabelsApplied = "NodeLabelsApplied"
)

// NodeWatches are the per-tenant workers of the controller.
type NodeWatches = tenantcache.Workers

// Reconciler routes Machine and NodePool changes to the worker of the
// Machine's tenant; SetupWithManager also registers the Watch.
type Reconciler struct {
	// Client reads the admin cluster from the manager's cache and writes
	// the Machines' status.
	Client   client.Client
	Recorder events.EventRecorder
	// Tenants is the manager's tenant cache; required.
	Tenants *tenantcache.Cache
	// Watches are set by SetupWithManager; tests read Watches.Running.
	Watches *NodeWatches
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the tenant cache (once; it also registers the
// Machine index), the controller's Watch in it and the routing controller
// ("machinenode").
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Tenants == nil {
		return errors.New("machinenode: no tenant cache")
	}
	if err := r.Tenants.SetupWithManager(mgr); err != nil {
		return err
	}
	s := &syncer{client: r.Client, recorder: r.Recorder}
	var err error
	if r.Watches, err = r.Tenants.AddWatch(s.watch()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kubefarmv1.Machine{}).
		Watches(&kubefarmv1.NodePool{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfPool)).
		Named("machinenode").
		Complete(r)
}

// machinesOfPool: a pool's tags decide its Machines' labels.
func (r *Reconciler) machinesOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	list := &kubefarmv1.MachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{kubefarmv1.LabelPool: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the Machines of a NodePool", "nodePool", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
	}
	return reqs
}

// Reconcile hands the Machine's hostname to its tenant's worker, which
// does the work in the tenant's own queue. Without a connected tenant
// there is nothing to do: the connection's start goes over every Machine
// of the tenant.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &kubefarmv1.Machine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		// A deleted Machine's Node is left as it is: nothing of the
		// Node is the Machine's to undo.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.Watches.Enqueue(types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Cluster}, m.Spec.Hostname)
	return ctrl.Result{}, nil
}
