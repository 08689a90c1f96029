package tenantcluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// tenantRetry is how soon a failed write into the tenant cluster is
// retried: nothing in the admin cluster changes when the tenant's API
// server starts answering, so no watch would bring the next pass.
const tenantRetry = 10 * time.Second

// tenantClientTimeout bounds every request to a tenant API server, so an
// unreachable tenant cannot hold a reconcile worker.
const tenantClientTimeout = 10 * time.Second

// tenantRESTConfig is the super-admin identity at the API server Service's
// in-cluster name: the manager runs in the admin cluster, which may not
// reach the external endpoint, and the super-admin (system:masters) is the
// only identity with permissions before the bindings below exist.
func tenantRESTConfig(c *desired.Cluster, secrets desired.SecretData) (*rest.Config, error) {
	s := secrets[c.SecretName(desired.RoleSuperAdmin)]
	ca, crt, key := c.TrustPEM(desired.RoleCA, secrets), s["tls.crt"], s["tls.key"]
	if len(crt) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("the super-admin Secret %s lacks tls.crt or tls.key", c.SecretName(desired.RoleSuperAdmin))
	}
	if len(ca) == 0 {
		return nil, fmt.Errorf("tenant %s/%s: the cluster CA's certificate (Secret %s) is not read yet", c.Namespace, c.Name, c.SecretName(desired.RoleCA))
	}
	return &rest.Config{
		Host:            c.InClusterEndpoint(),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: crt, KeyData: key},
		Timeout:         tenantClientTimeout,
		UserAgent:       FieldOwner,
	}, nil
}

// applyInTenant server-side applies objects in the tenant cluster, in
// order, with the manager's field owner. ForceOwnership: kubefarm declares
// these objects; a hand edit in the tenant is put back.
func applyInTenant(ctx context.Context, tenant client.Client, objs []client.Object) error {
	for _, o := range objs {
		if err := ssa.Apply(ctx, tenant, FieldOwner, o, nil); err != nil {
			return fmt.Errorf("in the tenant cluster: %w", err)
		}
	}
	return nil
}

// objectName is namespace/name, or name for cluster-scoped objects.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
