package csrapproval

import (
	"context"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/tenantwatch"
)

// The controller around Decide. Its reconciler does not decide CSRs: it
// keeps one CSR watch running per TenantCluster whose control plane the
// manager can reach (TenantWatches, with internal/tenantwatch's
// lifecycle), and each watch's worker decides its tenant's requests
// (tenant.go) against the Machines in the admin cluster's cache
// (machines.go).

// TenantWatches are the running CSR watches, one per tenant at most.
type TenantWatches = tenantwatch.Set[*tenantWatch]

// Reconciler starts, restarts and stops the CSR watch of each
// TenantCluster with its internal admin kubeconfig Secret (see
// tenantwatch.Lifecycle).
type Reconciler struct {
	// Client reads the admin cluster from the manager's cache:
	// TenantClusters, their kubeconfig Secrets, Machines and NodePools.
	Client   client.Client
	Recorder events.EventRecorder
	// Watches are set by SetupWithManager; tests read Watches.Running.
	Watches *TenantWatches
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller, the Machine index its workers
// read and the TenantWatches, which stop every watch with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := IndexMachines(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	a := &approver{machines: machineFinder{reader: r.Client}, recorder: r.Recorder}
	r.Watches = tenantwatch.NewSet(a.startTenantWatch)
	return (&tenantwatch.Lifecycle[*tenantWatch]{
		Client: r.Client, Watches: r.Watches, What: "CSR watch", UserAgent: FieldOwner,
	}).SetupWithManager(mgr, "csrapproval")
}
