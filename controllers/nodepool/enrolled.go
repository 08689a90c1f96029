package nodepool

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MachineMACIndex indexes Machines by each of their MACs.
const MachineMACIndex = "kubefarm.io/machine-mac"

// enrolledReconciler deletes the DiscoveredMachine of a MAC once a Machine
// has that MAC: the machine is enrolled (an entry of a pool, by `kubectl
// kubefarm enroll` or a values file, or a catch-all Machine of a Join
// pool), and its next boot is the Machine's. It is keyed by the
// DiscoveredMachine, so start-up costs one cache lookup per discovered
// machine (kubefarm-pxe caps their number), not one API call per Machine;
// a Machine's creation or new MAC wakes the DiscoveredMachine of that MAC
// by name, and a DiscoveredMachine recorded after its Machine appeared is
// handled when it arrives.
type enrolledReconciler struct {
	client   client.Client
	recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=discoveredmachines,verbs=get;list;watch;delete

func setupEnrolled(mgr ctrl.Manager, recorder events.EventRecorder) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Machine{}, MachineMACIndex, func(o client.Object) []string {
		return o.(*v1alpha1.Machine).Spec.MACs
	}); err != nil {
		return fmt.Errorf("indexing Machines by MAC: %w", err)
	}
	r := &enrolledReconciler{client: mgr.GetClient(), recorder: recorder}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.DiscoveredMachine{}).
		Watches(&v1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(discoveredOfMachine),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: macsChanged})).
		Named("discoveredmachine-enrolled").
		Complete(r)
}

// discoveredOfMachine names the DiscoveredMachines of a Machine's MACs.
func discoveredOfMachine(_ context.Context, o client.Object) []reconcile.Request {
	m := o.(*v1alpha1.Machine)
	reqs := make([]reconcile.Request, 0, len(m.Spec.MACs))
	for _, mac := range m.Spec.MACs {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: v1alpha1.DiscoveredMachineName(mac)}})
	}
	return reqs
}

// macsChanged keeps a Machine's status writes (every node heartbeat that
// changes a condition) from waking the controller.
func macsChanged(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*v1alpha1.Machine)
	m, ok2 := e.ObjectNew.(*v1alpha1.Machine)
	return !ok1 || !ok2 || !slices.Equal(old.Spec.MACs, m.Spec.MACs)
}

// Reconcile deletes the DiscoveredMachine when a Machine has its MAC. The
// delete carries the UID read: a DiscoveredMachine recorded again under
// the same name meanwhile is judged on its own pass.
func (r *enrolledReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dm := &v1alpha1.DiscoveredMachine{}
	if err := r.client.Get(ctx, req.NamespacedName, dm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !dm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	machines := &v1alpha1.MachineList{}
	if err := r.client.List(ctx, machines, client.MatchingFields{MachineMACIndex: dm.Spec.MAC}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the Machines with MAC %s: %w", dm.Spec.MAC, err)
	}
	if len(machines.Items) == 0 {
		return ctrl.Result{}, nil
	}
	m := &machines.Items[0]
	if err := r.client.Delete(ctx, dm, client.Preconditions{UID: &dm.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("deleting DiscoveredMachine %s, enrolled as Machine %s/%s: %w", dm.Name, m.Namespace, m.Name, err)
	}
	log.FromContext(ctx).Info("enrolled: deleted the DiscoveredMachine", "mac", dm.Spec.MAC, "machine", m.Namespace+"/"+m.Name)
	r.recorder.Eventf(m, nil, corev1.EventTypeNormal, "Enrolled", "DeleteDiscoveredMachine",
		"MAC %s was a DiscoveredMachine; deleted it, this Machine has the MAC now", dm.Spec.MAC)
	return ctrl.Result{}, nil
}
