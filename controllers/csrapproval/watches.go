package csrapproval

import (
	"context"
	"errors"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// TenantWatches are the running CSR watches, one per tenant at most, as
// Cluster API's ClusterCache keeps one cache per workload cluster: started
// when a tenant's credential appears, restarted when it changes, stopped
// when the credential or the TenantCluster goes away, and all stopped when
// the manager stops (TenantWatches is a manager Runnable for that).
//
// The methods are safe for concurrent use.
type TenantWatches struct {
	approver *approver

	mu       sync.Mutex
	byTenant map[types.NamespacedName]*tenantWatch
	// closed: the manager is stopping; no watch starts any more.
	closed bool
}

func newTenantWatches(a *approver) *TenantWatches {
	return &TenantWatches{approver: a, byTenant: map[types.NamespacedName]*tenantWatch{}}
}

var errClosed = errors.New("the manager is stopping")

// ensure makes the watch of tc run with the credential cfg, whose
// fingerprint is credential: nothing happens when it already does; a watch
// with another credential is stopped first.
func (t *TenantWatches) ensure(tc *kubefarmv1.TenantCluster, cfg *rest.Config, credential string) (started bool, err error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, errClosed
	}
	if w := t.byTenant[key]; w != nil {
		if w.credential == credential {
			return false, nil
		}
		// Under the lock: the tenant's old and new watches never run at
		// the same time. stop is quick: it cancels and waits for
		// goroutines whose every request is bound to that context.
		w.stop()
		delete(t.byTenant, key)
	}
	w, err := t.approver.startTenantWatch(tc, cfg, credential)
	if err != nil {
		return false, err
	}
	t.byTenant[key] = w
	return true, nil
}

// stop stops the watch of tenant, if one runs; it reports whether one did.
// When it returns, nothing decides the tenant's CSRs any more.
func (t *TenantWatches) stop(tenant types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.byTenant[tenant]
	if w == nil {
		return false
	}
	w.stop()
	delete(t.byTenant, tenant)
	return true
}

// Running names the tenants whose watch runs, each with the fingerprint of
// the credential it runs with (a SHA-256, hex), so that a test or a debug
// endpoint can tell a restart from a watch that kept running.
func (t *TenantWatches) Running() map[types.NamespacedName]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[types.NamespacedName]string, len(t.byTenant))
	for k, w := range t.byTenant {
		out[k] = w.credential
	}
	return out
}

// Start is the manager Runnable: it waits for the manager to stop, then
// stops every watch. The watches run only on the elected leader, because
// the controller that starts them does.
func (t *TenantWatches) Start(ctx context.Context) error {
	<-ctx.Done()
	t.mu.Lock()
	t.closed = true
	all := maps.Clone(t.byTenant)
	clear(t.byTenant)
	t.mu.Unlock()
	for _, w := range all {
		w.stop()
	}
	return nil
}

// NeedLeaderElection: only the leader approves.
func (t *TenantWatches) NeedLeaderElection() bool { return true }
