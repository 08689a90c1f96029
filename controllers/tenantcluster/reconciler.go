// Package tenantcluster is the controller of TenantCluster: it runs a tenant
// Kubernetes control plane as pods in the TenantCluster's namespace of the
// admin cluster. The objects it writes come from the pure builders in the
// build subpackage; this package only observes state, feeds the few
// observed facts back into the builders, applies their output and reports
// conditions.
package tenantcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/build"
	"github.com/kubefarm/kubefarm/internal/bootstraptoken"
)

// Finalizer holds a TenantCluster until the controller has handled what
// garbage collection cannot decide alone: etcd's volumes, per
// spec.volumeReclaimPolicy.
const Finalizer = "kubefarm.io/tenantcluster"

// Image defaults: the versions the e2e cluster runs (e2e/cluster/images.go).
const (
	DefaultRegistry        = "registry.k8s.io"
	DefaultEtcdTag         = "3.6.4-0"
	DefaultKonnectivityTag = "v0.34.0"
	// DefaultCoreDNSTag is the CoreDNS release Kubernetes v1.34 ships with.
	DefaultCoreDNSTag = "v1.12.1"
)

// AdminKubeconfigKey is the key of the kubeconfig in the admin kubeconfig
// Secrets.
const AdminKubeconfigKey = "kubeconfig"

// AdminKubeconfigSecretName names the Secret with the admin kubeconfig for
// people: embedded credentials, the external endpoint.
func AdminKubeconfigSecretName(cluster string) string { return cluster + "-admin-kubeconfig" }

// InternalAdminKubeconfigSecretName names the admin kubeconfig that points
// at the API server Service's in-cluster name, for tools (and later the
// add-ons controller) running in the admin cluster, which may not be able to
// reach the external address.
func InternalAdminKubeconfigSecretName(cluster string) string {
	return cluster + "-admin-kubeconfig-internal"
}

// DefaultImages returns the images of a registry (empty: registry.k8s.io),
// with the pinned etcd and Konnectivity tags.
func DefaultImages(registry string) build.Images {
	if registry == "" {
		registry = DefaultRegistry
	}
	return build.Images{Registry: registry, EtcdTag: DefaultEtcdTag, KonnectivityTag: DefaultKonnectivityTag, CoreDNSTag: DefaultCoreDNSTag}
}

// Reconciler reconciles TenantClusters.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server directly, for the few reads that are
	// rare and whose kinds are not worth caching cluster-wide (Nodes for a
	// NodePort endpoint, etcd's PersistentVolumeClaims).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Images and AdminClusterDomain are passed to the builders.
	Images             build.Images
	AdminClusterDomain string
	// AddonsResync is how often the add-ons are applied again to repair
	// changes made inside the tenant; zero means DefaultAddonsResync.
	AddonsResync time.Duration
	// PXENamespace is the namespace kubefarm-pxe runs in. The controller
	// writes there, per tenant, the token issuer's kubeconfig
	// (bootstraptoken.CredentialSecretName), so that kubefarm-pxe needs to
	// read Secrets of its own namespace only, never the tenants' PKI.
	// Empty: no credential is written (no kubefarm-pxe issues join tokens).
	PXENamespace string
}

func (r *Reconciler) addonsResync() time.Duration {
	if r.AddonsResync > 0 {
		return r.AddonsResync
	}
	return DefaultAddonsResync
}

// SetupWithManager registers the controller. Owning the Certificates makes
// issuance and renewal wake the reconciler; owning the workloads makes pod
// readiness and rollouts do so. Certificate Secrets are written by
// cert-manager, not owned by the TenantCluster, so they are mapped back by
// their kubefarm.io/tenant-cluster label.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	pkiSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[build.LabelPKIRole]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.TenantCluster{}).
		Owns(&cmapi.Certificate{}).
		Owns(&corev1.Secret{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(tenantOfLabel), builder.WithPredicates(pkiSecret)).
		Named("tenantcluster").
		Complete(r)
}

func tenantOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[build.LabelTenantCluster]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters/status,verbs=patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers,verbs=create;patch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=list;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile drives one TenantCluster towards its spec. Conditions are
// computed in memory as the phases run and written once, by a deferred
// server-side apply of the status, so every exit path (including errors)
// reports what was observed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	tc := &v1alpha1.TenantCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, tc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, tc)
	}
	if !controllerutil.ContainsFinalizer(tc, Finalizer) {
		// A merge patch with optimistic locking, not an apply: applying
		// metadata.finalizers to an object deleted meanwhile would try to
		// create it again.
		base := tc.DeepCopy()
		controllerutil.AddFinalizer(tc, Finalizer)
		if err := r.Client.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(FieldOwner)); err != nil {
			if apierrors.IsConflict(err) {
				// A newer TenantCluster exists; its event brings the
				// next pass. Not an error worth a backoff or a log.
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	before := tc.Status.DeepCopy()
	defer func() {
		if retErr != nil {
			r.setCondition(tc, notReady(v1alpha1.ConditionReady, v1alpha1.ReasonReconcileError, retErr.Error()))
		}
		tc.Status.ObservedGeneration = tc.Generation
		if equality.Semantic.DeepEqual(before, &tc.Status) {
			return
		}
		if err := r.applyStatus(ctx, tc); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("applying status: %w", err))
			return
		}
		r.emitTransitions(tc, before.Conditions)
	}()
	return r.reconcileNormal(ctx, tc)
}

func (r *Reconciler) options(observedAddress string) build.Options {
	return build.Options{Images: r.Images, AdminClusterDomain: r.AdminClusterDomain, ObservedExternalAddress: observedAddress}
}

func (r *Reconciler) setCondition(tc *v1alpha1.TenantCluster, c metav1.Condition) {
	c.ObservedGeneration = tc.Generation
	meta.SetStatusCondition(&tc.Status.Conditions, c)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, tc *v1alpha1.TenantCluster) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	// Resolve twice: first to validate the spec and learn the Service's name,
	// then with the address the admin cluster published for that Service.
	c, err := build.Resolve(tc, r.options(""))
	if err != nil {
		// The spec is wrong, not the world: retrying cannot help, and the
		// watch on the TenantCluster brings the next pass when it is edited.
		r.setCondition(tc, notReady(v1alpha1.ConditionReady, v1alpha1.ReasonInvalidSpec, err.Error()))
		logger.Info("invalid spec", "error", err.Error())
		return ctrl.Result{}, nil
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		svc = nil
	}
	nodeAddr := ""
	if c.ExposeType == v1alpha1.ExposeNodePort && tc.Spec.APIServer.Expose.ExternalIP == "" {
		nodes := &corev1.NodeList{}
		if err := r.APIReader.List(ctx, nodes); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing nodes for the NodePort endpoint: %w", err)
		}
		nodeAddr = nodeAddress(nodes.Items)
	}
	if c, err = build.Resolve(tc, r.options(observedAddress(svc, nodeAddr))); err != nil {
		return ctrl.Result{}, err
	}

	// Services first: a LoadBalancer's address ends up in the serving
	// certificate, so asking for it before issuing saves one reissue and
	// one rollout.
	if err := r.apply(ctx, tc, build.EtcdService(c), nil); err != nil {
		return ctrl.Result{}, err
	}
	svc = &corev1.Service{}
	if err := r.apply(ctx, tc, build.APIServerService(c), svc); err != nil {
		return ctrl.Result{}, err
	}
	endpoint := endpointURL(c.ExternalAddress, endpointPort(svc, c.ServicePort))
	tc.Status.Endpoint = endpoint

	// Phase PKI.
	for _, is := range build.Issuers(c) {
		if err := r.apply(ctx, tc, is, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	var certs []namedCertificate
	for _, want := range build.Certificates(c) {
		got := &cmapi.Certificate{}
		if err := r.apply(ctx, tc, want, got); err != nil {
			return ctrl.Result{}, err
		}
		certs = append(certs, namedCertificate{name: want.Name, cert: got})
	}
	certCond, certsReady := certificatesCondition(certs)
	r.setCondition(tc, certCond)
	var secrets build.SecretData
	if certsReady {
		var missing []string
		secrets, missing, err = r.readSecrets(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(missing) > 0 {
			// Issued but not yet in the cache; the Secret's arrival wakes us.
			certsReady = false
			certCond = notReady(v1alpha1.ConditionCertificatesReady, v1alpha1.ReasonIssuing, "waiting for Secrets: "+strings.Join(missing, ", "))
			r.setCondition(tc, certCond)
		}
	}
	if !certsReady {
		// The workloads are left as they are: new pods would only wait for
		// their Secret volumes, and would roll again as each certificate
		// arrives. What already runs (a reissue after a SAN change) keeps
		// running and is reported as it is.
		etcdCond, apiCond, err := r.observeWhileIssuing(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.setCondition(tc, etcdCond)
		r.setCondition(tc, apiCond)
		if meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionAddonsReady) == nil {
			r.setCondition(tc, notReady(v1alpha1.ConditionAddonsReady, v1alpha1.ReasonWaitingForCertificates, "waiting for certificates"))
		}
		r.setCondition(tc, readyCondition([]metav1.Condition{certCond, etcdCond, apiCond}, nil))
		return ctrl.Result{}, nil
	}

	desiredConfig, err := build.ConfigMap(c)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The pods' checksums hash the ConfigMap as applied.
	cm := &corev1.ConfigMap{}
	if err := r.apply(ctx, tc, desiredConfig, cm); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.applyKubeconfigs(ctx, tc, c, endpoint, secrets); err != nil {
		return ctrl.Result{}, err
	}

	// Phase etcd.
	etcdCond, err := r.reconcileEtcd(ctx, tc, c, secrets)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.setCondition(tc, etcdCond)

	// Phase API server, then the components that talk to it. A first API
	// server started before etcd answers exits, and the kubelet's restart
	// back-off then outlasts etcd's start (Ready took 27 s instead of 10 s
	// on the e2e cluster), so the control plane is first created only once
	// etcd is ready. An existing one is always kept up to date.
	if etcdCond.Status != metav1.ConditionTrue {
		existing := &appsv1.Deployment{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, existing)
		if apierrors.IsNotFound(err) {
			apiCond := notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForEtcd, "created once etcd is ready")
			r.setCondition(tc, apiCond)
			r.setCondition(tc, notReady(v1alpha1.ConditionAddonsReady, v1alpha1.ReasonWaitingForAPIServer, "waiting for the tenant API server"))
			r.setCondition(tc, readyCondition([]metav1.Condition{certCond, etcdCond, apiCond}, nil))
			return ctrl.Result{}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	api, err := build.APIServerDeployment(c, cm, secrets)
	if err != nil {
		return ctrl.Result{}, err
	}
	apiLive := &appsv1.Deployment{}
	if err := r.apply(ctx, tc, api, apiLive); err != nil {
		return ctrl.Result{}, err
	}
	apiCond, apiReady := apiServerCondition(apiLive)
	r.setCondition(tc, apiCond)
	// The tenant's own RBAC and add-ons, once its API server answers:
	// without them the admin kubeconfig can do nothing and no node can
	// join, so Ready waits for them. They are applied again every
	// AddonsResync, since nothing in the admin cluster notices a change
	// inside the tenant.
	var result ctrl.Result
	var extra []string
	addonsCond := notReady(v1alpha1.ConditionAddonsReady, v1alpha1.ReasonWaitingForAPIServer, "waiting for the tenant API server")
	if apiReady {
		var rbacApplied bool
		addonsCond, rbacApplied = r.reconcileTenantObjects(ctx, tc, c, secrets, svc, endpoint)
		switch {
		case !rbacApplied:
			logger.Info("tenant RBAC not applied yet", "error", addonsCond.Message)
			result.RequeueAfter = tenantRetry
		case addonsCond.Status != metav1.ConditionTrue && addonsCond.Reason == v1alpha1.ReasonApplyFailed:
			logger.Info("tenant add-ons not applied", "error", addonsCond.Message)
			result.RequeueAfter = tenantRetry
		default:
			result.RequeueAfter = r.addonsResync()
		}
	}
	r.setCondition(tc, addonsCond)
	if err := r.reconcilePDBs(ctx, tc, c); err != nil {
		return ctrl.Result{}, err
	}
	live := []*appsv1.Deployment{apiLive}
	follower := c
	if v := followerVersion(c.Version, tc.Status.ObservedVersion, apiLive); v != c.Version {
		held := *c
		held.Version = v
		follower = &held
		// Not a reason for Ready=False: the control plane serves
		// throughout; status.observedVersion tells the upgrade's progress.
		logger.Info("upgrade in progress: controller-manager and scheduler wait for the API servers", "running", v, "desired", c.Version)
	}
	for _, b := range []struct {
		what  string
		build func(*build.Cluster, *corev1.ConfigMap, build.SecretData) (*appsv1.Deployment, error)
	}{{"kube-controller-manager", build.ControllerManagerDeployment}, {"kube-scheduler", build.SchedulerDeployment}} {
		d, err := b.build(follower, cm, secrets)
		if err != nil {
			return ctrl.Result{}, err
		}
		got := &appsv1.Deployment{}
		if err := r.apply(ctx, tc, d, got); err != nil {
			return ctrl.Result{}, err
		}
		live = append(live, got)
		if ok, msg := deploymentAvailable(got, b.what); !ok {
			extra = append(extra, msg)
		}
	}
	if endpoint == "" {
		extra = append(extra, "the external endpoint is not known yet (waiting for the Service's address)")
	}
	r.setCondition(tc, readyCondition([]metav1.Condition{certCond, etcdCond, apiCond, addonsCond}, extra))

	// The observed version moves only when every component runs it, so
	// during an upgrade it keeps naming the version still (partly) running.
	allRolledOut := true
	for _, d := range live {
		allRolledOut = allRolledOut && rolledOut(d)
	}
	if allRolledOut {
		tc.Status.ObservedVersion = c.Version
	}
	return result, nil
}

// observeWhileIssuing reports etcd and the API server from the cache while
// certificates are being issued: WaitingForCertificates when they were never
// deployed, their observed readiness otherwise.
func (r *Reconciler) observeWhileIssuing(ctx context.Context, c *build.Cluster) (etcd, api metav1.Condition, err error) {
	waiting := "waiting for certificates"
	etcd = notReady(v1alpha1.ConditionEtcdReady, v1alpha1.ReasonWaitingForCertificates, waiting)
	api = notReady(v1alpha1.ConditionAPIServerReady, v1alpha1.ReasonWaitingForCertificates, waiting)
	sts := &appsv1.StatefulSet{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdServiceName()}, sts); {
	case err == nil:
		etcd, _ = etcdCondition(sts)
	case !apierrors.IsNotFound(err):
		return etcd, api, err
	}
	d := &appsv1.Deployment{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.APIServerServiceName()}, d); {
	case err == nil:
		api, _ = apiServerCondition(d)
	case !apierrors.IsNotFound(err):
		return etcd, api, err
	}
	return etcd, api, nil
}

// readSecrets reads every certificate Secret for the checksums and the
// kubeconfigs; missing names the ones not there yet.
func (r *Reconciler) readSecrets(ctx context.Context, c *build.Cluster) (build.SecretData, []string, error) {
	data := build.SecretData{}
	var missing []string
	for _, cert := range build.Certificates(c) {
		s := &corev1.Secret{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: cert.Spec.SecretName}, s)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, cert.Spec.SecretName)
		case err != nil:
			return nil, nil, err
		default:
			data[s.Name] = s.Data
		}
	}
	return data, missing, nil
}

// applyKubeconfigs writes the admin kubeconfigs. The external one waits for
// the endpoint: a kubeconfig with an address clients cannot use is worse
// than none, and status.adminKubeconfigSecret tells when it is there.
func (r *Reconciler) applyKubeconfigs(ctx context.Context, tc *v1alpha1.TenantCluster, c *build.Cluster, endpoint string, secrets build.SecretData) error {
	admin := secrets[c.SecretName(build.RoleAdmin)]
	ca, crt, key := admin["ca.crt"], admin["tls.crt"], admin["tls.key"]
	internal, err := build.AdminKubeconfig(c, false, ca, crt, key)
	if err != nil {
		return err
	}
	if err := r.apply(ctx, tc, r.kubeconfigSecret(c, InternalAdminKubeconfigSecretName(c.Name), internal), nil); err != nil {
		return err
	}
	if err := r.applyTokenIssuerCredential(ctx, c, secrets); err != nil {
		return err
	}
	if endpoint == "" {
		return nil
	}
	// Built from the endpoint rather than build.AdminKubeconfig(c, true, ...):
	// for NodePort the port clients use is the node port, not the
	// Service port the builder knows.
	external, err := build.Kubeconfig(c.Name, endpoint, build.UserAdmin, build.ClientCredentials{CAData: ca, CertData: crt, KeyData: key})
	if err != nil {
		return err
	}
	name := AdminKubeconfigSecretName(c.Name)
	if err := r.apply(ctx, tc, r.kubeconfigSecret(c, name, external), nil); err != nil {
		return err
	}
	tc.Status.AdminKubeconfigSecret = name
	return nil
}

func (r *Reconciler) kubeconfigSecret(c *build.Cluster, name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: map[string]string{
			build.LabelTenantCluster: c.Name,
			build.LabelManagedBy:     "kubefarm",
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{AdminKubeconfigKey: kubeconfig},
	}
}

// applyTokenIssuerCredential writes the token issuer's kubeconfig into
// PXENamespace. It points at the in-cluster endpoint, like the internal
// admin kubeconfig: kubefarm-pxe runs in the admin cluster and need not
// reach the external address. The Secret is in another namespace than the
// TenantCluster, so it can have no owner reference; reconcileDelete
// deletes it.
func (r *Reconciler) applyTokenIssuerCredential(ctx context.Context, c *build.Cluster, secrets build.SecretData) error {
	if r.PXENamespace == "" {
		return nil
	}
	s := secrets[c.SecretName(build.RoleTokenIssuer)]
	kubeconfig, err := build.Kubeconfig(c.Name, c.InClusterEndpoint(), build.UserTokenIssuer,
		build.ClientCredentials{CAData: s["ca.crt"], CertData: s["tls.crt"], KeyData: s["tls.key"]})
	if err != nil {
		return err
	}
	labels := bootstraptoken.CredentialLabels(c.Namespace, c.Name)
	labels[build.LabelManagedBy] = "kubefarm"
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: bootstraptoken.CredentialSecretName(c.Namespace, c.Name), Namespace: r.PXENamespace, Labels: labels,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{bootstraptoken.KeyKubeconfig: kubeconfig},
	}
	err = r.applyUnowned(ctx, secret, nil)
	if apierrors.IsNotFound(err) {
		// The namespace does not exist: kubefarm-pxe is not installed
		// there. The tenant's control plane does not depend on it, so this
		// is no reason to hold the TenantCluster back; the next pass
		// writes the credential once the namespace is there.
		log.FromContext(ctx).Info("not writing the token issuer credential: the PXE namespace does not exist", "namespace", r.PXENamespace)
		return nil
	}
	return err
}

// deleteTokenIssuerCredential deletes the credential written by
// applyTokenIssuerCredential. It is deleted whatever the volumeReclaimPolicy:
// it grants access to a tenant that is going away, and a TenantCluster
// recreated on retained PKI writes it again.
func (r *Reconciler) deleteTokenIssuerCredential(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	if r.PXENamespace == "" {
		return nil
	}
	s := &corev1.Secret{}
	s.Namespace, s.Name = r.PXENamespace, bootstraptoken.CredentialSecretName(tc.Namespace, tc.Name)
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the token issuer credential %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// reconcileEtcd applies the etcd StatefulSet with the initial cluster state
// decided from what exists (see decideEtcdState).
func (r *Reconciler) reconcileEtcd(ctx context.Context, tc *v1alpha1.TenantCluster, c *build.Cluster, secrets build.SecretData) (metav1.Condition, error) {
	var current *appsv1.StatefulSet
	sts := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.EtcdServiceName()}, sts)
	switch {
	case err == nil:
		current = sts
	case !apierrors.IsNotFound(err):
		return metav1.Condition{}, err
	}
	volumes := 0
	if current == nil {
		// Only worth a (direct, uncached) read when there is no StatefulSet
		// to tell the story.
		pvcs, err := r.etcdVolumes(ctx, tc)
		if err != nil {
			return metav1.Condition{}, err
		}
		volumes = len(pvcs)
	}
	desired, err := build.EtcdStatefulSet(c, decideEtcdState(current, volumes), secrets)
	if err != nil {
		return metav1.Condition{}, err
	}
	live := &appsv1.StatefulSet{}
	if err := r.apply(ctx, tc, desired, live); err != nil {
		return metav1.Condition{}, err
	}
	cond, _ := etcdCondition(live)
	return cond, nil
}

// etcdVolumes lists the PersistentVolumeClaims of the tenant's etcd
// members. The StatefulSet controller gives each claim the labels of the
// claim template, which identify the tenant and the component.
func (r *Reconciler) etcdVolumes(ctx context.Context, tc *v1alpha1.TenantCluster) ([]corev1.PersistentVolumeClaim, error) {
	list := &corev1.PersistentVolumeClaimList{}
	err := r.APIReader.List(ctx, list, client.InNamespace(tc.Namespace), client.MatchingLabels{
		build.LabelInstance:      tc.Name,
		build.LabelName:          build.ComponentEtcd,
		build.LabelTenantCluster: tc.Name,
	})
	return list.Items, err
}

// reconcilePDBs applies the disruption budgets the builder wants and deletes
// the ones it no longer wants (a component scaled down to one replica),
// which would otherwise block every drain of that replica's node.
func (r *Reconciler) reconcilePDBs(ctx context.Context, tc *v1alpha1.TenantCluster, c *build.Cluster) error {
	wanted := map[string]bool{}
	for _, pdb := range build.PodDisruptionBudgets(c) {
		wanted[pdb.Name] = true
		if err := r.apply(ctx, tc, pdb, nil); err != nil {
			return err
		}
	}
	for _, name := range []string{c.EtcdServiceName(), c.APIServerServiceName()} {
		if wanted[name] {
			continue
		}
		pdb := &policyv1.PodDisruptionBudget{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, pdb)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !metav1.IsControlledBy(pdb, tc) {
			continue
		}
		if err := r.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// reconcileDelete runs while the TenantCluster is being deleted. Everything
// the controller wrote in the TenantCluster's namespace carries an owner
// reference to it, so the garbage collector removes those; the finalizer
// exists for the token issuer credential in PXENamespace, which no owner
// reference can reach across namespaces, and for etcd's volumes, which
// belong to the StatefulSet controller's claims and outlive the
// StatefulSet: they are deleted or kept as spec.volumeReclaimPolicy says.
func (r *Reconciler) reconcileDelete(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	if !controllerutil.ContainsFinalizer(tc, Finalizer) {
		return nil
	}
	if err := r.deleteTokenIssuerCredential(ctx, tc); err != nil {
		return err
	}
	pvcs, err := r.etcdVolumes(ctx, tc)
	if err != nil {
		return err
	}
	if tc.Spec.VolumeReclaimPolicy == v1alpha1.VolumeReclaimDelete {
		if done, err := r.deletePKI(ctx, tc); err != nil || !done {
			return err
		}
		for i := range pvcs {
			if !pvcs[i].DeletionTimestamp.IsZero() {
				continue
			}
			if err := r.Client.Delete(ctx, &pvcs[i], client.Preconditions{UID: &pvcs[i].UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting etcd volume %s: %w", pvcs[i].Name, err)
			}
		}
		if len(pvcs) > 0 {
			r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "VolumesDeleted", "Delete",
				"deleted %d etcd volume claims (volumeReclaimPolicy Delete)", len(pvcs))
		}
	} else if len(pvcs) > 0 {
		r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "VolumesRetained", "Delete",
			"kept %d etcd volume claims (volumeReclaimPolicy Retain); a TenantCluster of the same name reuses them", len(pvcs))
	}
	base := tc.DeepCopy()
	controllerutil.RemoveFinalizer(tc, Finalizer)
	err = r.Client.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(FieldOwner))
	if apierrors.IsConflict(err) {
		// Changed meanwhile: the next pass (its event) removes it.
		return nil
	}
	return client.IgnoreNotFound(err)
}

// deletePKI deletes the tenant's Certificates and then the Secrets
// cert-manager wrote for them. cert-manager does not own those Secrets (its
// owner-reference option is off by default), so garbage collection would
// leave every key of a deleted tenant behind; and while a Certificate
// exists cert-manager recreates a deleted Secret, so the Certificates go
// first and the Secrets only once the Certificates are gone (their deletion
// events bring the next pass). With volumeReclaimPolicy Retain all of it
// stays with the volumes: the retained etcd data holds service-account
// tokens and CA bundles that only the same keys keep valid for a
// TenantCluster recreated on them.
func (r *Reconciler) deletePKI(ctx context.Context, tc *v1alpha1.TenantCluster) (done bool, err error) {
	certs := &cmapi.CertificateList{}
	if err := r.Client.List(ctx, certs, client.InNamespace(tc.Namespace)); err != nil {
		return false, err
	}
	remaining := 0
	for i := range certs.Items {
		cert := &certs.Items[i]
		if !metav1.IsControlledBy(cert, tc) {
			continue
		}
		remaining++
		if !cert.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, cert, client.Preconditions{UID: &cert.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting Certificate %s: %w", cert.Name, err)
		}
	}
	if remaining > 0 {
		return false, nil
	}
	list := &corev1.SecretList{}
	if err := r.Client.List(ctx, list, client.InNamespace(tc.Namespace), client.MatchingLabels{build.LabelTenantCluster: tc.Name},
		client.HasLabels{build.LabelPKIRole}); err != nil {
		return false, err
	}
	for i := range list.Items {
		s := &list.Items[i]
		// No UID precondition: whatever holds this name now is the
		// tenant's key material and goes too.
		if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting certificate Secret %s: %w", s.Name, err)
		}
	}
	if len(list.Items) > 0 {
		r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "SecretsDeleted", "Delete",
			"deleted %d certificate Secrets (volumeReclaimPolicy Delete)", len(list.Items))
	}
	return true, nil
}

// emitTransitions records an event for every condition whose status or
// reason changed: Normal when it became True or moved along, Warning when it
// fell from True or failed.
func (r *Reconciler) emitTransitions(tc *v1alpha1.TenantCluster, before []metav1.Condition) {
	for _, c := range tc.Status.Conditions {
		old := meta.FindStatusCondition(before, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		typ := transitionEventType(old, c)
		r.Recorder.Eventf(tc, nil, typ, c.Type+c.Reason, "Reconcile", "%s=%s: %s", c.Type, c.Status, c.Message)
	}
}

func transitionEventType(old *metav1.Condition, c metav1.Condition) string {
	switch {
	case c.Reason == v1alpha1.ReasonInvalidSpec || c.Reason == v1alpha1.ReasonReconcileError:
		return corev1.EventTypeWarning
	case c.Status == metav1.ConditionFalse && old != nil && old.Status == metav1.ConditionTrue:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}
