package tenantwatch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/restconfig"
)

// Lifecycle starts, restarts and stops the watch of each TenantCluster in
// a Set. The credential is the internal admin kubeconfig the TenantCluster
// controller writes (tenantcluster.InternalAdminKubeconfigSecretName): it
// exists once the tenant's PKI does, points at the API server's in-cluster
// address, and changes when the PKI does, which is exactly when a watch
// must start, reach the tenant, and restart.
type Lifecycle[W Watch] struct {
	// Client reads TenantClusters and their kubeconfig Secrets from the
	// manager's cache.
	Client  client.Client
	Watches *Set[W]
	// What names the watches in logs ("CSR watch").
	What string
	// UserAgent is the tenant client's user agent, the controller's name
	// in the tenant's audit log.
	UserAgent string
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// SetupWithManager registers the Set (which stops every watch with the
// manager) and the controller called name. The kubeconfig Secrets are
// mapped to their TenantCluster by name; the manager already caches
// Secrets for the TenantCluster controller, so this costs no informer of
// its own.
func (l *Lifecycle[W]) SetupWithManager(mgr ctrl.Manager, name string) error {
	if err := mgr.Add(l.Watches); err != nil {
		return err
	}
	kubeconfig := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return strings.HasSuffix(o.GetName(), kubeconfigSuffix)
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&kubefarmv1.TenantCluster{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(TenantOfKubeconfig), builder.WithPredicates(kubeconfig)).
		Named(name).
		Complete(l)
}

// kubeconfigSuffix is what InternalAdminKubeconfigSecretName appends to the
// TenantCluster's name.
var kubeconfigSuffix = tenantcluster.InternalAdminKubeconfigSecretName("")

// TenantOfKubeconfig maps an internal admin kubeconfig Secret to its
// TenantCluster.
func TenantOfKubeconfig(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := strings.CutSuffix(o.GetName(), kubeconfigSuffix)
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// Reconcile makes the tenant's watch match its credential: none without a
// live TenantCluster and its kubeconfig Secret, else one running with the
// credential the Secret holds now.
func (l *Lifecycle[W]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	stop := func(why string) (ctrl.Result, error) {
		if l.Watches.Stop(req.NamespacedName) {
			logger.Info("stopped the tenant's "+l.What, "why", why)
		}
		return ctrl.Result{}, nil
	}
	tc := &kubefarmv1.TenantCluster{}
	switch err := l.Client.Get(ctx, req.NamespacedName, tc); {
	case apierrors.IsNotFound(err):
		return stop("the TenantCluster is gone")
	case err != nil:
		return ctrl.Result{}, err
	}
	if !tc.DeletionTimestamp.IsZero() {
		return stop("the TenantCluster is being deleted")
	}
	secret := &corev1.Secret{}
	name := tenantcluster.InternalAdminKubeconfigSecretName(tc.Name)
	switch err := l.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: name}, secret); {
	case apierrors.IsNotFound(err):
		return stop("its kubeconfig Secret " + name + " does not exist")
	case err != nil:
		return ctrl.Result{}, err
	}
	cfg, err := RESTConfig(secret.Data[tenantcluster.AdminKubeconfigKey], l.UserAgent)
	if err != nil {
		// Retrying cannot help: the Secret's next change brings the next
		// pass. The credential the watch ran with is superseded.
		logger.Error(err, "unusable kubeconfig; not starting the tenant's "+l.What, "secret", name)
		return stop("its kubeconfig is unusable")
	}
	started, err := l.Watches.Ensure(tc, cfg, restconfig.FingerprintString(cfg))
	if err != nil {
		return ctrl.Result{}, err
	}
	if started {
		logger.Info("started the tenant's "+l.What, "server", cfg.Host)
	}
	return ctrl.Result{}, nil
}

// RESTConfig takes the server, CA and client certificate of the
// kubeconfig's current context, and nothing else. Whoever can write
// Secrets in a tenant's namespace can write this one; honouring the rest of
// a kubeconfig (a token or certificate file, an exec plugin, an auth
// provider, a proxy, impersonation) would let them make the manager read
// its own files, run commands or send its service account token away.
func RESTConfig(data []byte, userAgent string) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("no kubeconfig")
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("parsing the kubeconfig: %w", err)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil {
		return nil, fmt.Errorf("the kubeconfig has no context %q", kc.CurrentContext)
	}
	cluster, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cluster == nil || user == nil {
		return nil, fmt.Errorf("context %q names a cluster or user the kubeconfig lacks", kc.CurrentContext)
	}
	if cluster.Server == "" || len(cluster.CertificateAuthorityData) == 0 ||
		len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 {
		return nil, errors.New("the kubeconfig lacks a server, an embedded CA or an embedded client certificate and key")
	}
	return &rest.Config{
		Host: cluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cluster.CertificateAuthorityData, CertData: user.ClientCertificateData, KeyData: user.ClientKeyData,
		},
		UserAgent: userAgent,
	}, nil
}
