package tenantcluster_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
)

// staleClient serves one TenantCluster from a copy taken earlier, as a
// cache that has not caught up with the latest write would.
type staleClient struct {
	client.Client
	stale *v1alpha1.TenantCluster
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if tc, ok := obj.(*v1alpha1.TenantCluster); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(tc)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestStaleCopyWritesNoStatus: a pass that read an older copy of the
// TenantCluster than the one stored does not write its status (every
// condition, those it did not decide too, would put an older pass's
// back); it asks for another pass, without an error.
func TestStaleCopyWritesNoStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = "stale"
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	deleteOnCleanup(t, key)
	stale := tc.DeepCopy() // as created: no finalizer, no status
	// The manager under test moves the stored object on (finalizer,
	// status) meanwhile.
	poll(ctx, t, "the stored TenantCluster has a status", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return len(got.Status.Conditions) > 0 && len(got.Finalizers) > 0, conditionsString(got), nil
	})
	stale.Finalizers = []string{v1alpha1.FinalizerTenantCluster}
	before, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r := &tenantcluster.Reconciler{Client: staleClient{Client: env.Client, stale: stale}, APIReader: env.Client, Scheme: env.Scheme,
		Recorder: mgr.GetEventRecorder("tenantcluster-test"), Images: tenantcluster.DefaultImages("", testToolsImage),
		PXENamespace: pxeNamespace, TenantClients: tenantcluster.NewTenantClients(dialFakeTenant)}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("a pass from a stale copy: %+v, %v; want a requeue after 1s and no error", res, err)
	}
	after, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range before.Status.Conditions {
		if got := meta.FindStatusCondition(after.Status.Conditions, c.Type); got == nil {
			t.Errorf("condition %s was removed by the stale pass", c.Type)
		}
	}
}
