package tenantcluster

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// FieldOwner is the server-side apply field manager of every write the
// controller makes, so `kubectl get -o yaml --show-managed-fields` tells
// which fields kubefarm decides.
const FieldOwner = "kubefarm-manager"

var applyOptions = []client.ApplyOption{client.FieldOwner(FieldOwner), client.ForceOwnership}

// apply server-side applies obj, a complete desired object from the
// builders, owned (controller reference) by the TenantCluster. The
// server's answer, which carries the live status, is decoded into into when
// it is not nil, so the caller reads the status of exactly the object it
// just wrote instead of a possibly older copy from the cache.
//
// The builders return typed objects; they are turned into an apply request
// through their JSON form. That is safe for them because every field they
// leave unset is omitempty in the API types, except the ones removed here:
// status (never ours to apply) and null values (creationTimestamp of
// object and template metadata), which would otherwise be sent as "clear
// this field".
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
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting %T %s: %w", obj, obj.GetName(), err)
	}
	delete(m, "status")
	pruneNulls(m)
	u := &unstructured.Unstructured{Object: m}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), applyOptions...); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	if into == nil {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("decoding applied %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// pruneNulls removes null values from a JSON object tree in place.
func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range t {
			pruneNulls(e)
		}
	}
}

// applyStatus server-side applies the TenantCluster's status subresource.
// Status is the one place where the applied object is not built from
// scratch: conditions carry lastTransitionTime, which must survive passes
// that change nothing, so the caller passes the status it computed from the
// observed one.
func (r *Reconciler) applyStatus(ctx context.Context, tc *v1alpha1.TenantCluster) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tc.Status)
	if err != nil {
		return err
	}
	pruneNulls(status)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "TenantCluster",
		"metadata":   map[string]any{"name": tc.Name, "namespace": tc.Namespace},
		"status":     status,
	}}
	return r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldOwner), client.ForceOwnership)
}
