package tenantcluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/build"
)

// tenantRBACRetry is how soon a failed write of the tenant's RBAC is
// retried: nothing in the admin cluster changes when the tenant's API
// server starts answering, so no watch would bring the next pass.
const tenantRBACRetry = 10 * time.Second

// tenantClientTimeout bounds every request to a tenant API server, so an
// unreachable tenant cannot hold a reconcile worker.
const tenantClientTimeout = 10 * time.Second

// newTenantClient returns a client of the tenant cluster for cfg. A variable
// so that the integration tests, whose API server is not reachable at the
// tenant Service's name, can point it elsewhere (export_test.go).
var newTenantClient = func(cfg *rest.Config) (client.Client, error) {
	return client.New(cfg, client.Options{})
}

// tenantRESTConfig is the super-admin identity at the API server Service's
// in-cluster name: the manager runs in the admin cluster, which may not
// reach the external endpoint, and the super-admin (system:masters) is the
// only identity with permissions before the bindings below exist.
func tenantRESTConfig(c *build.Cluster, secrets build.SecretData) (*rest.Config, error) {
	s := secrets[c.SecretName(build.RoleSuperAdmin)]
	ca, crt, key := s["ca.crt"], s["tls.crt"], s["tls.key"]
	if len(ca) == 0 || len(crt) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("the super-admin Secret %s lacks ca.crt, tls.crt or tls.key", c.SecretName(build.RoleSuperAdmin))
	}
	return &rest.Config{
		Host:            c.InClusterEndpoint(),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: crt, KeyData: key},
		Timeout:         tenantClientTimeout,
		UserAgent:       FieldOwner,
	}, nil
}

// applyTenantRBAC writes build.TenantRBAC into the tenant cluster: without
// the binding of the admin group to cluster-admin, the admin kubeconfig
// authenticates but may do nothing. Server-side apply, so it is idempotent
// and every pass can run it.
func applyTenantRBAC(ctx context.Context, c *build.Cluster, secrets build.SecretData) error {
	cfg, err := tenantRESTConfig(c, secrets)
	if err != nil {
		return err
	}
	tenant, err := newTenantClient(cfg)
	if err != nil {
		return fmt.Errorf("tenant client: %w", err)
	}
	for _, crb := range build.TenantRBAC(c) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crb)
		if err != nil {
			return err
		}
		pruneNulls(m)
		u := &unstructured.Unstructured{Object: m}
		if err := tenant.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), applyOptions...); err != nil {
			return fmt.Errorf("applying ClusterRoleBinding %s in the tenant cluster: %w", crb.Name, err)
		}
	}
	return nil
}
