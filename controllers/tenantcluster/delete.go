package tenantcluster

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// reconcileDelete runs while the TenantCluster is being deleted. Everything
// the controller wrote in the TenantCluster's namespace carries an owner
// reference to it, so the garbage collector removes those; the finalizer
// exists for the token issuer credential in PXENamespace, which no owner
// reference can reach across namespaces; for etcd's volumes, which
// belong to the StatefulSet controller's claims and outlive the
// StatefulSet, the Secrets cert-manager wrote, which nothing owns (see
// deletePKI), and the encryption key Secret, deliberately not owned (an
// owner reference would let garbage collection delete it under Retain, and
// retained etcd data without its key is unreadable): they are deleted or
// kept as spec.volumeReclaimPolicy says; and to forget the tenant's client.
func (r *Reconciler) reconcileDelete(ctx context.Context, tc *v1alpha1.TenantCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(tc, v1alpha1.FinalizerTenantCluster) {
		return ctrl.Result{}, nil
	}
	// The tenant goes away; so does the client this controller kept for it.
	r.TenantClients.Forget(client.ObjectKeyFromObject(tc))
	if stopped, err := r.stopControlPlane(ctx, tc); err != nil || !stopped {
		// A pod a controller started from a stale cache after the
		// workloads were deleted: the next pass cuts its grace too.
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	if err := r.deleteTokenIssuerCredential(ctx, tc); err != nil {
		return ctrl.Result{}, err
	}
	pvcs, err := r.etcdVolumes(ctx, tc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if tc.Spec.VolumeReclaimPolicy == v1alpha1.VolumeReclaimDelete {
		if done, err := r.deletePKI(ctx, tc); err != nil || !done {
			return ctrl.Result{}, err
		}
		if tc.Spec.Etcd.Backup == nil {
			if err := r.deleteEncryptionKeys(ctx, tc); err != nil {
				return ctrl.Result{}, err
			}
		} else {
			// The snapshots on the backup claim, which outlives the
			// TenantCluster, hold Secrets encrypted with these keys: a
			// restore needs them.
			r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "EncryptionKeysRetained", "Delete",
				"kept the encryption key Secret %s: the etcd snapshots %s need it to be restored; delete both when they are no longer needed",
				desired.EncryptionKeySecretName(tc.Name), desired.EtcdBackupPlace(tc))
		}
		for i := range pvcs {
			if !pvcs[i].DeletionTimestamp.IsZero() {
				continue
			}
			if err := r.Client.Delete(ctx, &pvcs[i], client.Preconditions{UID: &pvcs[i].UID}); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("deleting etcd volume %s: %w", pvcs[i].Name, err)
			}
		}
		if len(pvcs) > 0 {
			r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "VolumesDeleted", "Delete",
				"deleted %d etcd volume claims (volumeReclaimPolicy Delete)", len(pvcs))
		}
	} else if len(pvcs) > 0 {
		r.Recorder.Eventf(tc, nil, corev1.EventTypeNormal, "VolumesRetained", "Delete",
			"kept %d etcd volume claims and the encryption key Secret %s (volumeReclaimPolicy Retain); a TenantCluster of the same name reuses them",
			len(pvcs), desired.EncryptionKeySecretName(tc.Name))
	}
	base := tc.DeepCopy()
	controllerutil.RemoveFinalizer(tc, v1alpha1.FinalizerTenantCluster)
	err = r.Client.Patch(ctx, tc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(FieldOwner))
	if apierrors.IsConflict(err) {
		// Changed meanwhile: the next pass (its event) removes it.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// Grace periods of the control plane pods when their TenantCluster is
// deleted. Their own (75 s for an API server) are for rolling updates,
// where clients move to another replica; a deleted tenant has no other
// replica and no client to serve, and an API server whose etcd is going
// away at the same time spends most of its grace waiting on it (46 s
// measured for the whole deletion before this). etcd gets a little longer
// to exit cleanly; with volumeReclaimPolicy Retain its data is kept, and
// even a kill leaves it consistent (every commit is in its WAL).
const (
	deletionGrace     int64 = 1
	etcdDeletionGrace int64 = 3
)

// stopControlPlane stops the tenant's control plane at once rather than
// through the garbage collector's cascade with each pod's own grace
// period: it deletes the Deployments, their ReplicaSets and the
// StatefulSet (so nothing recreates a pod), orphaning their pods, then the
// pods with deletionGrace (etcd's with etcdDeletionGrace). Orphaning
// matters: with background propagation the garbage collector deleted the
// pods too, with their own grace (75 s for an API server), and when its
// delete reached a kubelet first the container was already being stopped
// with that grace, which a later, shorter one does not cut (e2e: 42 s
// instead of 11 s for "everything gone", twice in a row under load). Each
// is one collection delete by the tenant's labels; run again, it finds
// nothing or shortens nothing further. stopped is false while a pod is not terminating with
// the short grace yet: one a controller created from a stale cache after
// the collection deletes. It does not wait for the kubelets, which may be
// gone.
func (r *Reconciler) stopControlPlane(ctx context.Context, tc *v1alpha1.TenantCluster) (stopped bool, err error) {
	sel := desired.ControlPlaneSelector(tc.Name)
	inNS := client.InNamespace(tc.Namespace)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &appsv1.StatefulSet{}} {
		if err := r.Client.DeleteAllOf(ctx, obj, inNS, client.MatchingLabels(sel), client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
			return false, fmt.Errorf("deleting the %Ts of TenantCluster %s: %w", obj, tc.Name, err)
		}
	}
	for _, pods := range podGraces {
		selector := labels.SelectorFromSet(sel).Add(pods.req)
		if err := r.Client.DeleteAllOf(ctx, &corev1.Pod{}, inNS, client.MatchingLabelsSelector{Selector: selector},
			client.GracePeriodSeconds(pods.grace)); err != nil {
			return false, fmt.Errorf("deleting the pods %s of TenantCluster %s: %w", selector, tc.Name, err)
		}
	}
	// Not in the manager's cache (no pod is): read directly.
	list := &corev1.PodList{}
	if err := r.APIReader.List(ctx, list, inNS, client.MatchingLabels(sel)); err != nil {
		return false, fmt.Errorf("listing the pods of TenantCluster %s: %w", tc.Name, err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		grace := deletionGrace
		if p.Labels[desired.LabelName] == desired.ComponentEtcd {
			grace = etcdDeletionGrace
		}
		if p.DeletionTimestamp.IsZero() || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds > grace {
			return false, nil
		}
	}
	return true, nil
}

// podGraces are the two selections of stopControlPlane's pod deletions, so
// that the shorter grace does not cut etcd's.
var podGraces = func() []struct {
	req   labels.Requirement
	grace int64
} {
	etcd, err := labels.NewRequirement(desired.LabelName, selection.Equals, []string{desired.ComponentEtcd})
	if err != nil {
		panic(err)
	}
	notEtcd, err := labels.NewRequirement(desired.LabelName, selection.NotEquals, []string{desired.ComponentEtcd})
	if err != nil {
		panic(err)
	}
	return []struct {
		req   labels.Requirement
		grace int64
	}{{*etcd, etcdDeletionGrace}, {*notEtcd, deletionGrace}}
}()

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
	if err := r.Client.List(ctx, list, client.InNamespace(tc.Namespace), client.MatchingLabels{v1alpha1.LabelTenantCluster: tc.Name},
		client.HasLabels{v1alpha1.LabelPKIRole}); err != nil {
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
