package tenantwatch

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

type fakeWatch struct {
	tenant  string
	stopped bool
}

func (w *fakeWatch) Stop() { w.stopped = true }

// TestSetLifecycle: one watch per tenant, kept for the same credential,
// replaced (the old one stopped first) for another, stopped on request and
// all stopped with the manager, after which none starts.
func TestSetLifecycle(t *testing.T) {
	var started []*fakeWatch
	s := NewSet(func(tc *kubefarmv1.TenantCluster, _ *rest.Config) (*fakeWatch, error) {
		for _, w := range started {
			if w.tenant == tc.Name && !w.stopped {
				t.Fatalf("a second watch of %s starts while one runs", tc.Name)
			}
		}
		w := &fakeWatch{tenant: tc.Name}
		started = append(started, w)
		return w, nil
	})
	tc := func(name string) *kubefarmv1.TenantCluster {
		return &kubefarmv1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	ensure := func(name, credential string, want bool) {
		t.Helper()
		got, err := s.Ensure(tc(name), &rest.Config{}, credential)
		if err != nil || got != want {
			t.Fatalf("Ensure(%s, %s) = %v, %v; want %v", name, credential, got, err, want)
		}
	}
	ensure("a", "c1", true)
	ensure("a", "c1", false)
	ensure("b", "c1", true)
	ensure("a", "c2", true)
	if !started[0].stopped || started[1].stopped || started[2].stopped {
		t.Fatalf("after a's new credential: %+v %+v %+v", started[0], started[1], started[2])
	}
	if w, ok := s.Get(types.NamespacedName{Namespace: "ns", Name: "a"}); !ok || w != started[2] {
		t.Fatalf("Get(a) = %v, %v", w, ok)
	}
	if got := s.Running(); len(got) != 2 || got[types.NamespacedName{Namespace: "ns", Name: "a"}] != "c2" {
		t.Fatalf("Running() = %v", got)
	}
	if !s.Stop(types.NamespacedName{Namespace: "ns", Name: "b"}) || !started[1].stopped {
		t.Fatal("b's watch did not stop")
	}
	if s.Stop(types.NamespacedName{Namespace: "ns", Name: "b"}) {
		t.Fatal("stopping b twice reported a watch")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !started[2].stopped || len(s.Running()) != 0 {
		t.Fatal("the manager's stop left a watch running")
	}
	if _, err := s.Ensure(tc("c"), &rest.Config{}, "c1"); err == nil {
		t.Fatal("a watch started after the manager stopped")
	}
}
