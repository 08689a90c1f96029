package rollout

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/restconfig"
	"github.com/kubefarm/kubefarm/internal/tenantwatch"
)

// Tenants gives the rollout a client of a tenant cluster's API server, to
// read its Nodes, cordon, evict and uncordon.
type Tenants interface {
	Clientset(ctx context.Context, namespace, cluster string) (kubernetes.Interface, error)
}

// SecretTenants reaches each tenant with the internal admin kubeconfig the
// TenantCluster controller writes (the credential every tenant watch of the
// manager uses), keeping one clientset per tenant until the credential
// changes.
type SecretTenants struct {
	Client client.Client

	mu      sync.Mutex
	clients map[string]cachedClient
}

type cachedClient struct {
	fingerprint string
	cs          kubernetes.Interface
}

// UserAgent names the rollout in the tenants' audit logs.
const UserAgent = "kubefarm-rollout"

// Clientset implements Tenants.
func (t *SecretTenants) Clientset(ctx context.Context, namespace, cluster string) (kubernetes.Interface, error) {
	secret := &corev1.Secret{}
	name := tenantcluster.InternalAdminKubeconfigSecretName(cluster)
	if err := t.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("reading the kubeconfig Secret %s/%s of TenantCluster %s: %w", namespace, name, cluster, err)
	}
	cfg, err := tenantwatch.RESTConfig(secret.Data[tenantcluster.AdminKubeconfigKey], UserAgent)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig Secret %s/%s: %w", namespace, name, err)
	}
	fp := restconfig.FingerprintString(cfg)
	key := namespace + "/" + cluster
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.clients[key]; ok && c.fingerprint == fp {
		return c.cs, nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the client of TenantCluster %s: %w", key, err)
	}
	if t.clients == nil {
		t.clients = map[string]cachedClient{}
	}
	t.clients[key] = cachedClient{fingerprint: fp, cs: cs}
	return cs, nil
}
