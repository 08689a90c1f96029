// Package tenantcluster is the controller of TenantCluster: it runs a tenant
// Kubernetes control plane as pods in the TenantCluster's namespace of the
// admin cluster. The objects it writes come from the pure builders in the
// build subpackage; this package only observes state, feeds the few
// observed facts back into the builders, applies their output and reports
// conditions.
//
// The files follow the pass: reconciler.go is the Reconciler, its watches
// and Reconcile with its one deferred status write; phases.go is the scope
// of one pass and its phases, in order; delete.go is the finalizer;
// credentials.go the kubeconfigs written from the tenant's PKI;
// encryption.go the encryption key Secret and its rotation;
// endpoint.go the arithmetic of the external address; status.go the
// conditions each phase decides; upgrade.go the version each component
// runs (an upgrade's steps, the followers behind the API servers,
// status.observedVersion); tenantclients.go, tenantrbac.go and
// addons.go what the controller does inside the tenant.
package tenantcluster

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/conditions"
	"github.com/kubefarm/kubefarm/internal/kubeversion"
)

// Image defaults: the versions the e2e cluster runs (e2e/cluster/images.go).
const (
	DefaultRegistry        = "registry.k8s.io"
	DefaultEtcdTag         = "3.6.4-0"
	DefaultKonnectivityTag = "v0.34.0"
	// DefaultCoreDNSTag is the CoreDNS release hack/tools/coredns builds
	// for the e2e registry (make verify-pins keeps the two equal). CoreDNS
	// 1.15 still serves Kubernetes v1.34's API (it watches only Services,
	// EndpointSlices and Namespaces, all GA long before).
	DefaultCoreDNSTag = "v1.15.0"
)

// DefaultImages returns the images of a registry (empty: registry.k8s.io),
// with the pinned etcd and Konnectivity tags, and the etcd tools image.
func DefaultImages(registry, tools string) desired.Images {
	if registry == "" {
		registry = DefaultRegistry
	}
	return desired.Images{Registry: registry, EtcdTag: DefaultEtcdTag, KonnectivityTag: DefaultKonnectivityTag, CoreDNSTag: DefaultCoreDNSTag,
		Tools: tools}
}

// Reconciler reconciles TenantClusters.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server directly, for the few reads that are
	// rare and whose kinds are not worth caching cluster-wide (Nodes for a
	// NodePort endpoint, etcd's PersistentVolumeClaims), and for the
	// encryption key Secret, which must never be read stale.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Images and AdminClusterDomain are passed to the builders.
	Images             desired.Images
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
	// TenantClients hands out the client of each tenant's API server, kept
	// from one pass to the next. SetupWithManager makes one that dials the
	// tenant when it is nil; tests pass one with their own dialer. A
	// Reconciler called without SetupWithManager and without one dials a
	// new client every pass.
	TenantClients *TenantClients
	// DialEtcd reaches a tenant's etcd to change its membership; nil dials
	// member 0's client URL. Tests pass one that reaches their own etcd.
	DialEtcd DialEtcd
	// TenantNodes reads a tenant's Nodes for the kubelet skew check before
	// an upgrade step that raises the minor (CachedTenantNodes: the
	// manager's tenant cache). Nil lists them through TenantClients, on
	// the passes that would start such a step only.
	TenantNodes TenantNodes
	// VersionWindow is the minors the control plane may be upgraded
	// through and to; zero is kubeversion.DefaultWindow, the webhook's.
	VersionWindow kubeversion.Window
	// SecretEvents, when set, is where the events of the S3 credentials
	// and backup key Secrets come from: a cache of every Secret's name
	// alone, watched as metav1.PartialObjectMetadata. internal/manager sets
	// it because its cache holds only the Secrets kubefarm labels, and
	// those two are the operator's. Nil watches Secrets in the manager's
	// cache.
	SecretEvents cache.Cache
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
	if r.TenantClients == nil {
		r.TenantClients = NewTenantClients(nil)
	}
	// The PKI Secrets, and the encryption key Secret, which is not owned
	// either (see reconcileDelete) and whose changes carry a key rotation
	// from one step to the next.
	pkiSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, pki := o.GetLabels()[v1alpha1.LabelPKIRole]
		_, keys := o.GetAnnotations()[v1alpha1.AnnotationEncryptionWriteKey]
		return pki || keys
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.TenantCluster{}, backupSecretsIndex, backupSecretsOf); err != nil {
		return fmt.Errorf("indexing TenantClusters by %s: %w", backupSecretsIndex, err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.TenantCluster{}).
		Owns(&cmapi.Certificate{}).
		Owns(&corev1.Secret{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(tenantOfLabel), builder.WithPredicates(pkiSecret))
	// The S3 credentials Secret and the backup key Secret are the
	// operator's (the default key Secret, which is kubefarm's, is matched
	// by name too): created, fixed or removed after the TenantCluster,
	// they decide EtcdBackedUp at once.
	if r.SecretEvents != nil {
		names := &metav1.PartialObjectMetadata{}
		names.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		b = b.WatchesRawSource(source.Kind(r.SecretEvents, names, handler.TypedEnqueueRequestsFromMapFunc(
			func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
				return r.tenantsOfCredentials(ctx, o)
			})))
	} else {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOfCredentials))
	}
	return b.
		// The backup runs are owned by the CronJob, not the TenantCluster.
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(tenantOfLabel), builder.WithPredicates(predicate.NewPredicateFuncs(isBackupJob))).
		Owns(&batchv1.CronJob{}).
		Named("tenantcluster").
		Complete(r)
}

// backupSecretsIndex indexes TenantClusters by the Secrets their backups
// read (spec.etcd.backup.s3.credentialsSecret, and the backup key Secret:
// spec.etcd.backup.keys.secretName or the default), so that a Secret's
// event wakes exactly the tenants that use it, from the cache.
const backupSecretsIndex = "spec.etcd.backup.secrets"

func backupSecretsOf(o client.Object) []string {
	tc := o.(*v1alpha1.TenantCluster)
	var out []string
	for _, name := range []string{restoreKeyOf(tc), restoreCredentialsOf(tc)} {
		if name != "" {
			out = append(out, name)
		}
	}
	b := tc.Spec.Etcd.Backup
	if b == nil {
		return out
	}
	key := b.Keys.SecretName
	if key == "" {
		key = desired.EtcdBackupKeySecretName(tc.Name)
	}
	out = append(out, key)
	if b.S3 != nil && b.S3.CredentialsSecret != "" {
		out = append(out, b.S3.CredentialsSecret)
	}
	// Each name once, in the order first seen.
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(n string) bool {
		dup := seen[n]
		seen[n] = true
		return dup
	})
}

// restoreKeyOf is the restore's backup key Secret, so that its creation
// (an operator supplying the identity) wakes the tenant at once; "" when
// it cannot be told (the resolved spec reports that).
func restoreKeyOf(tc *v1alpha1.TenantCluster) string {
	r := tc.Spec.Etcd.RestoreFrom
	if r == nil {
		return ""
	}
	if r.BackupKeySecretName != "" {
		return r.BackupKeySecretName
	}
	if tenant, ok := desired.SnapshotTenant(r.Snapshot); ok {
		return desired.EtcdBackupKeySecretName(tenant)
	}
	return ""
}

// restoreCredentialsOf is restoreFrom.s3's credentials Secret, or "".
func restoreCredentialsOf(tc *v1alpha1.TenantCluster) string {
	if r := tc.Spec.Etcd.RestoreFrom; r != nil && r.S3 != nil {
		return r.S3.CredentialsSecret
	}
	return ""
}

// tenantsOfCredentials maps a Secret to the TenantClusters of its
// namespace whose backups read it (the S3 credentials, the backup key).
func (r *Reconciler) tenantsOfCredentials(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.TenantClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{backupSecretsIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the TenantClusters whose backups use a Secret", "secret", client.ObjectKeyFromObject(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, tc := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&tc)})
	}
	return reqs
}

func tenantOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[v1alpha1.LabelTenantCluster]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters/status,verbs=patch
// +kubebuilder:rbac:groups=kubefarm.io,resources=tenantclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers,verbs=create;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=list;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubefarm.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch;create;patch;deletecollection
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=deletecollection
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;deletecollection
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile drives one TenantCluster towards its spec. The phases (phases.go)
// record on a scope what they observed; the status, including the summary
// conditions, is decided from it once, by a deferred server-side apply, so
// every exit path (including errors) reports what was observed and no exit
// path decides Ready on its own.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	tc := &v1alpha1.TenantCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, tc); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone (the finalizer's pass normally forgets it first).
			r.TenantClients.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tc.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, tc)
	}
	if !controllerutil.ContainsFinalizer(tc, v1alpha1.FinalizerTenantCluster) {
		// A merge patch with optimistic locking, not an apply: applying
		// metadata.finalizers to an object deleted meanwhile would try to
		// create it again.
		base := tc.DeepCopy()
		controllerutil.AddFinalizer(tc, v1alpha1.FinalizerTenantCluster)
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
	s := &scope{tc: tc}
	defer func() {
		if p := recover(); p != nil {
			// A phase panicked: reported like an error, not summarised
			// from the conditions observed so far (which would say Ready
			// with none observed), and logged with its stack.
			log.FromContext(ctx).Error(fmt.Errorf("%v", p), "a phase panicked", "stack", string(debug.Stack()))
			retErr = fmt.Errorf("panic: %v", p)
		}
		r.summarise(s, retErr)
		tc.Status.ObservedGeneration = tc.Generation
		if equality.Semantic.DeepEqual(before, &tc.Status) {
			return
		}
		if err := r.applyStatus(ctx, tc); err != nil {
			if apierrors.IsConflict(err) && retErr == nil {
				// The pass read a TenantCluster the cache had not
				// caught up with (another watch's event came first):
				// its conditions would write an older pass's back over
				// a newer one's. The newer object's event brings the
				// next pass; the requeue is a backstop.
				result = ctrl.Result{RequeueAfter: time.Second}
				return
			}
			retErr = errors.Join(retErr, fmt.Errorf("applying status: %w", err))
			return
		}
		conditions.EmitTransitions(r.Recorder, tc, before.Conditions, tc.Status.Conditions,
			v1alpha1.ReasonInvalidSpec, v1alpha1.ReasonReconcileError, v1alpha1.ReasonKubeletSkew, v1alpha1.ReasonKubeletVersionUnparsable,
			v1alpha1.ReasonNodesUnreadable, v1alpha1.ReasonDowngradeRefused, v1alpha1.ReasonVersionUnsupported)
	}()
	return r.runPhases(ctx, s)
}

// summarise sets the summary conditions, and is the only place that does:
// Ready, from the conditions the phases observed this pass and what else
// they found holding the control plane back; and AddonsReady when the phase
// that decides it did not get to run because the pass stopped to wait.
// A failed pass and an invalid spec say so in Ready and leave the other
// conditions as the phases left them.
func (r *Reconciler) summarise(s *scope, err error) {
	tc := s.tc
	switch {
	case err != nil:
		r.setCondition(tc, notReady(v1alpha1.ConditionReady, v1alpha1.ReasonReconcileError, err.Error()))
		return
	case s.invalidSpec != nil:
		r.setCondition(tc, notReady(v1alpha1.ConditionReady, v1alpha1.ReasonInvalidSpec, s.invalidSpec.Error()))
		return
	}
	if s.observed(v1alpha1.ConditionAddonsReady) == nil {
		switch s.waitingFor {
		case waitingForCertificates:
			// An AddonsReady from an earlier pass still describes the
			// tenant, whose API server keeps running while a
			// certificate is reissued.
			if meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionAddonsReady) == nil {
				r.setCondition(tc, notReady(v1alpha1.ConditionAddonsReady, v1alpha1.ReasonWaitingForCertificates, "waiting for certificates"))
			}
		case waitingForEtcd, waitingForRestore:
			r.setCondition(tc, addonsWaitingForAPIServer())
		}
	}
	r.setCondition(tc, readyCondition(s.conditions, s.notReady))
}

func (r *Reconciler) options(observedAddress string) desired.Options {
	return desired.Options{Images: r.Images, AdminClusterDomain: r.AdminClusterDomain, ObservedExternalAddress: observedAddress}
}

func (r *Reconciler) setCondition(tc *v1alpha1.TenantCluster, c metav1.Condition) {
	conditions.Set(&tc.Status.Conditions, tc.Generation, c)
}
