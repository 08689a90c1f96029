package dynamic_test

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// watchGate holds a cache's DHCPLease watch while closed: the informer
// stops at its transform, and the events wait behind it, as behind a watch
// that lags on a loaded admin cluster.
type watchGate struct {
	mu      sync.Mutex
	waiting chan struct{} // nil while open
}

func (g *watchGate) transform(o any) (any, error) {
	if _, ok := o.(*kubefarmv1.DHCPLease); ok {
		g.mu.Lock()
		ch := g.waiting
		g.mu.Unlock()
		if ch != nil {
			<-ch
		}
	}
	return o, nil
}

// hold closes the gate until open (or the test's end).
func (g *watchGate) hold(t *testing.T) {
	g.mu.Lock()
	g.waiting = make(chan struct{})
	g.mu.Unlock()
	t.Cleanup(g.open)
}

func (g *watchGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting != nil {
		close(g.waiting)
		g.waiting = nil
	}
}

// TestReadYourWrites: a machine asks for its boot script or reports for
// discovery right after its ACK, and the replica that gave the lease
// answers from what it wrote even while its cache's watch has not
// delivered it; a RELEASE stops the answers at once just the same.
func TestReadYourWrites(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 70, 10, 50)
	gate := &watchGate{}
	a := newReplicaOpts(t, leases.NewTable(), newClock(), cache.Options{Scheme: env.Scheme, DefaultTransform: gate.transform})
	a.sees(t, p)
	ctx := context.Background()
	m := mac(1)

	gate.hold(t)
	offered, err := a.Offer(ctx, m, "", nil, local(70))
	must(t, err)
	_, err = a.Ack(ctx, m, offered.IP, "", nil, local(70))
	must(t, err)
	key := client.ObjectKey{Namespace: ns, Name: dynamic.LeaseName("rack", offered.IP)}
	acked := getLease(t, ns, "rack", offered.IP)
	if err := a.cache.Get(ctx, key, &kubefarmv1.DHCPLease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the held cache has lease %s (%v): the test would show nothing", key, err)
	}
	want := dynamic.Held{Namespace: ns, Pool: "rack", MAC: m.String(), IP: offered.IP.String()}
	found := func(when string, ok bool) {
		t.Helper()
		if h, got := a.LeaseOfIP(ctx, offered.IP.String()); got != ok || ok && h != want {
			t.Fatalf("%s: LeaseOfIP(%s) = %+v, %v; want %+v, %v", when, offered.IP, h, got, want, ok)
		}
		if h, got := a.LeaseOfMAC(ctx, m.String()); got != ok || ok && h != want {
			t.Fatalf("%s: LeaseOfMAC(%s) = %+v, %v; want %+v, %v", when, m, h, got, want, ok)
		}
	}
	found("after the ACK, before the cache has the lease", true)

	gate.open()
	waitFor(t, "the cache to catch up with the ACK", func(ctx context.Context) bool {
		var l kubefarmv1.DHCPLease
		return a.cache.Get(ctx, key, &l) == nil && l.ResourceVersion == acked.ResourceVersion
	})
	found("once the cache has the lease", true)

	gate.hold(t)
	must(t, a.Release(ctx, m, offered.IP))
	if err := a.cache.Get(ctx, key, &kubefarmv1.DHCPLease{}); err != nil {
		t.Fatalf("the held cache lost lease %s before its deletion arrived: %v", key, err)
	}
	found("after the RELEASE, before the cache has the deletion", false)
	gate.open()
	waitFor(t, "the cache to drop the released lease", func(ctx context.Context) bool {
		return apierrors.IsNotFound(a.cache.Get(ctx, key, &kubefarmv1.DHCPLease{}))
	})
	found("once the cache has the deletion", false)
}
