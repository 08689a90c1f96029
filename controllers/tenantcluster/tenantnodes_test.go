package tenantcluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
)

// TestCachedTenantNodes: the TenantNodes the manager's tenant cache gives
// reads a tenant's Nodes from its shared informer. The tenant is the
// envtest API server, reached through a credential Secret of the test's
// own (the controller's points at an in-cluster address envtest has not);
// its TenantCluster is an invalid spec, so the controller deploys nothing.
func TestCachedTenantNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const suffix = "-nodes-test-credential"
	// Not registered with a manager (the one under test has its own, and
	// controller names are unique per process): a tenant connects on first
	// use, and Start with a done context stops every connection.
	cache, err := tenantcache.New(env.Client, tenantcache.Options{
		KubeconfigSecret: func(cluster string) string { return cluster + suffix }, KubeconfigKey: "kubeconfig",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done, stop := context.WithCancel(context.Background())
		stop()
		_ = cache.Start(done)
	})

	ns := newNamespace(t)
	tc := &v1alpha1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
		Spec: v1alpha1.TenantClusterSpec{Version: "v1.34.4", Network: v1alpha1.ClusterNetwork{DNSServiceIP: "192.0.2.10"}}}
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	user, err := env.AddUser(envtest.User{Name: "tenantnodes-admin", Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.Name + suffix}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tenantnodes-test"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	setKubelet(ctx, t, node.Name, "v1.33.1")

	nodes := tenantcluster.CachedTenantNodes{Cache: cache}
	poll(ctx, t, "the Node from the tenant cache", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		list, err := nodes.NodeList(ctx, client.ObjectKeyFromObject(tc))
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range list {
			if n.Name == node.Name && n.Status.NodeInfo.KubeletVersion == "v1.33.1" {
				return true, "", nil
			}
		}
		return false, "not among the Nodes listed", nil
	})
}
