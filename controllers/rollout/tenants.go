package rollout

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

	once    sync.Once
	clients *restconfig.Cache[types.NamespacedName, kubernetes.Interface]
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
	t.once.Do(func() {
		t.clients = restconfig.NewCache[types.NamespacedName, kubernetes.Interface](func(cfg *rest.Config) (kubernetes.Interface, error) {
			return kubernetes.NewForConfig(cfg)
		})
	})
	cs, err := t.clients.Get(types.NamespacedName{Namespace: namespace, Name: cluster}, cfg)
	if err != nil {
		return nil, fmt.Errorf("the client of TenantCluster %s/%s: %w", namespace, cluster, err)
	}
	return cs, nil
}
