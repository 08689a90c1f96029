package csrapproval

import (
	"context"
	"errors"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// The controller around Decide. It has no reconciler of its own: it
// registers a Watch with the manager's tenant cache (internal/tenantcache),
// which runs one queue and worker per TenantCluster whose control plane
// the manager can reach, fed by the cache's shared CSR informers; each
// worker decides its tenant's requests (tenant.go) against the Machines in
// the admin cluster's cache (machines.go).

// TenantWatches are the per-tenant workers of the approval.
type TenantWatches = tenantcache.Workers

// Reconciler registers the approval's Watch with the tenant cache.
type Reconciler struct {
	// Client reads the admin cluster from the manager's cache:
	// Machines and NodePools.
	Client   client.Client
	Recorder events.EventRecorder
	// Tenants is the manager's tenant cache; required.
	Tenants *tenantcache.Cache
	// Watches are set by SetupWithManager; tests read Watches.Running.
	Watches *TenantWatches
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the tenant cache (once; it also registers the
// Machine index the workers read) and the approval's Watch in it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Tenants == nil {
		return errors.New("csrapproval: no tenant cache")
	}
	if err := r.Tenants.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := IndexMachines(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	a := &approver{machines: machineFinder{reader: r.Client}, recorder: r.Recorder}
	var err error
	r.Watches, err = r.Tenants.AddWatch(a.watch())
	return err
}
