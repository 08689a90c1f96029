// Package tenantwatch keeps one watch running per tenant whose control
// plane the manager can reach, for the controllers that act inside the
// tenants (kubelet serving CSR approval, the Machines' nodes): started when
// the tenant's internal admin kubeconfig Secret appears, restarted when the
// credential it holds changes, stopped with the Secret or the TenantCluster
// and with the manager. What a watch watches and does is its controller's
// business (a StartFunc); the lifecycle, the credential and the Machine
// index the watches look nodes up by are shared here.
package tenantwatch

import (
	"context"
	"errors"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Watch is one tenant's running watch.
type Watch interface {
	// Stop stops the watch and returns once its goroutines have, so that
	// nothing acts for the tenant with the old credential after it.
	Stop()
}

// StartFunc starts the watch of tenant tc through cfg, in the background:
// it must not wait for the tenant to answer, so that one unreachable
// tenant does not slow the start of the others.
type StartFunc[W Watch] func(tc *kubefarmv1.TenantCluster, cfg *rest.Config) (W, error)

// Set is the running watches, one per tenant at most, as Cluster API's
// ClusterCache keeps one cache per workload cluster. It is a manager
// Runnable that stops every watch when the manager stops.
//
// The methods are safe for concurrent use.
type Set[W Watch] struct {
	start StartFunc[W]

	mu       sync.Mutex
	byTenant map[types.NamespacedName]running[W]
	// closed: the manager is stopping; no watch starts any more.
	closed bool
}

type running[W Watch] struct {
	watch      W
	credential string
}

// NewSet is an empty Set whose watches start with start.
func NewSet[W Watch](start StartFunc[W]) *Set[W] {
	return &Set[W]{start: start, byTenant: map[types.NamespacedName]running[W]{}}
}

var errClosed = errors.New("the manager is stopping")

// Ensure makes the watch of tc run with the credential cfg, whose
// fingerprint is credential: nothing happens when it already does; a watch
// with another credential is stopped first.
func (s *Set[W]) Ensure(tc *kubefarmv1.TenantCluster, cfg *rest.Config, credential string) (started bool, err error) {
	key := types.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errClosed
	}
	if r, ok := s.byTenant[key]; ok {
		if r.credential == credential {
			return false, nil
		}
		// Under the lock: the tenant's old and new watches never run at
		// the same time. Stop is quick: it cancels and waits for
		// goroutines whose every request is bound to that context.
		r.watch.Stop()
		delete(s.byTenant, key)
	}
	w, err := s.start(tc, cfg)
	if err != nil {
		return false, err
	}
	s.byTenant[key] = running[W]{watch: w, credential: credential}
	return true, nil
}

// Stop stops the watch of tenant, if one runs; it reports whether one did.
// When it returns, nothing acts for the tenant any more.
func (s *Set[W]) Stop(tenant types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byTenant[tenant]
	if !ok {
		return false
	}
	r.watch.Stop()
	delete(s.byTenant, tenant)
	return true
}

// Get is the running watch of tenant, if any.
func (s *Set[W]) Get(tenant types.NamespacedName) (W, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byTenant[tenant]
	return r.watch, ok
}

// Running names the tenants whose watch runs, each with the fingerprint of
// the credential it runs with (a SHA-256, hex), so that a test or a debug
// endpoint can tell a restart from a watch that kept running.
func (s *Set[W]) Running() map[types.NamespacedName]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[types.NamespacedName]string, len(s.byTenant))
	for k, r := range s.byTenant {
		out[k] = r.credential
	}
	return out
}

// Start is the manager Runnable: it waits for the manager to stop, then
// stops every watch. The watches run only on the elected leader, because
// the controller that starts them does.
func (s *Set[W]) Start(ctx context.Context) error {
	<-ctx.Done()
	s.mu.Lock()
	s.closed = true
	all := maps.Clone(s.byTenant)
	clear(s.byTenant)
	s.mu.Unlock()
	for _, r := range all {
		r.watch.Stop()
	}
	return nil
}

// NeedLeaderElection: only the leader acts in the tenants.
func (s *Set[W]) NeedLeaderElection() bool { return true }
