package csrapproval

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
	"k8s.io/client-go/tools/events"
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

// The controller around Decide. Its reconciler does not decide CSRs: it
// keeps one CSR watch running per TenantCluster whose control plane the
// manager can reach (TenantWatches), and each watch's worker decides its
// tenant's requests (tenant.go) against the Machines in the admin cluster's
// cache (machines.go).

// Reconciler starts, restarts and stops the CSR watch of each
// TenantCluster. The credential is the internal admin kubeconfig the
// TenantCluster controller writes (tenantcluster.InternalAdminKubeconfigSecretName):
// it exists once the tenant's PKI does, points at the API server's
// in-cluster address, and changes when the PKI does, which is exactly when
// a watch must start, reach the tenant, and restart.
type Reconciler struct {
	// Client reads the admin cluster from the manager's cache:
	// TenantClusters, their kubeconfig Secrets, Machines and NodePools.
	Client   client.Client
	Recorder events.EventRecorder
	// Watches are set by SetupWithManager; tests read Watches.Running.
	Watches *TenantWatches
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller, the Machine index its workers
// read and the TenantWatches, which stop every watch with the manager.
// The kubeconfig Secrets are mapped to their TenantCluster by name; the
// manager already caches Secrets for the TenantCluster controller, so this
// costs no informer of its own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := IndexMachines(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r.Watches = newTenantWatches(&approver{machines: machineFinder{reader: r.Client}, recorder: r.Recorder})
	if err := mgr.Add(r.Watches); err != nil {
		return err
	}
	kubeconfig := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return strings.HasSuffix(o.GetName(), kubeconfigSuffix)
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&kubefarmv1.TenantCluster{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(tenantOfKubeconfig), builder.WithPredicates(kubeconfig)).
		Named("csrapproval").
		Complete(r)
}

// kubeconfigSuffix is what InternalAdminKubeconfigSecretName appends to the
// TenantCluster's name.
var kubeconfigSuffix = tenantcluster.InternalAdminKubeconfigSecretName("")

func tenantOfKubeconfig(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := strings.CutSuffix(o.GetName(), kubeconfigSuffix)
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// Reconcile makes the tenant's watch match its credential: none without a
// live TenantCluster and its kubeconfig Secret, else one running with the
// credential the Secret holds now.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	stop := func(why string) (ctrl.Result, error) {
		if r.Watches.stop(req.NamespacedName) {
			logger.Info("stopped the tenant's CSR watch", "why", why)
		}
		return ctrl.Result{}, nil
	}
	tc := &kubefarmv1.TenantCluster{}
	switch err := r.Client.Get(ctx, req.NamespacedName, tc); {
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
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: name}, secret); {
	case apierrors.IsNotFound(err):
		return stop("its kubeconfig Secret " + name + " does not exist")
	case err != nil:
		return ctrl.Result{}, err
	}
	cfg, err := restConfigFromKubeconfig(secret.Data[tenantcluster.AdminKubeconfigKey])
	if err != nil {
		// Retrying cannot help: the Secret's next change brings the next
		// pass. The credential the watch ran with is superseded.
		logger.Error(err, "unusable kubeconfig; not watching the tenant's CSRs", "secret", name)
		return stop("its kubeconfig is unusable")
	}
	started, err := r.Watches.ensure(tc, cfg, restconfig.FingerprintString(cfg))
	if err != nil {
		return ctrl.Result{}, err
	}
	if started {
		logger.Info("started the tenant's CSR watch", "server", cfg.Host)
	}
	return ctrl.Result{}, nil
}

// restConfigFromKubeconfig takes the server, CA and client certificate of
// the kubeconfig's current context, and nothing else. Whoever can write
// Secrets in a tenant's namespace can write this one; honouring the rest of
// a kubeconfig (a token or certificate file, an exec plugin, an auth
// provider, a proxy, impersonation) would let them make the manager read
// its own files, run commands or send its service account token away.
func restConfigFromKubeconfig(data []byte) (*rest.Config, error) {
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
		UserAgent: FieldOwner,
	}, nil
}
