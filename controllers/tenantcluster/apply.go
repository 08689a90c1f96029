package tenantcluster

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/ssa"
)

// FieldOwner is the server-side apply field manager of every write the
// controller makes, so `kubectl get -o yaml --show-managed-fields` tells
// which fields kubefarm decides.
const FieldOwner = "kubefarm-manager"

// apply server-side applies obj, a complete desired object from the
// builders, owned (controller reference) by the TenantCluster, and decodes
// the server's answer into into when it is not nil (see ssa.Apply).
//
// ForceOwnership: the manager is the only writer of these objects' spec; if
// someone edited a field by hand, the TenantCluster wins, which is what
// "declared by the TenantCluster" means.
func (r *Reconciler) apply(ctx context.Context, owner *v1alpha1.TenantCluster, obj, into client.Object) error {
	if err := controllerutil.SetControllerReference(owner, obj, r.Scheme); err != nil {
		return err
	}
	return r.applyUnowned(ctx, obj, into)
}

// applyUnowned is apply without the owner reference, for the one object
// outside the TenantCluster's namespace, which an owner reference cannot
// reach (the garbage collector would delete it at once as an orphan).
func (r *Reconciler) applyUnowned(ctx context.Context, obj, into client.Object) error {
	return ssa.Apply(ctx, r.Client, FieldOwner, obj, into)
}

// applyStatus server-side applies the TenantCluster's status subresource.
// Status is the one place where the applied object is not built from
// scratch: conditions carry lastTransitionTime, which must survive passes
// that change nothing, so the caller passes the status it computed from the
// observed one. That is also why the write is conditional on the
// resourceVersion the pass read (a Conflict otherwise): the status carries
// every condition, including those the pass did not decide, and from a
// stale copy it would put an older pass's back.
func (r *Reconciler) applyStatus(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	_, err := ssa.ApplyStatusAt(ctx, r.Client, FieldOwner, tc, tc.ResourceVersion)
	return err
}
