// Package ssa is how kubefarm's controllers write: server-side apply of a
// complete desired object under one field manager, and of a status alone.
// Every controller writes this way so that `kubectl get -o yaml
// --show-managed-fields` tells which fields kubefarm decides, and so that a
// controller never reads-modifies-writes an object another writer shares.
package ssa

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Apply server-side applies obj, a complete desired object from a builder,
// as fieldOwner with ForceOwnership: the controller is the only writer of
// these fields, and a hand edit of one of them is put back. The server's
// answer, which carries the live status, is decoded into into when it is
// not nil, so the caller reads the status of exactly the object it just
// wrote instead of a possibly older copy from the cache.
//
// The builders return typed objects; they become an apply request through
// their JSON form. That is safe because every field a builder leaves unset
// is omitempty in the API types, except the ones removed here: status
// (never applied with the object) and null values (creationTimestamp of
// object and template metadata), which would otherwise mean "clear this
// field".
func Apply(ctx context.Context, c client.Client, fieldOwner string, obj, into client.Object) error {
	u, err := toApply(c.Scheme(), obj)
	if err != nil {
		return err
	}
	delete(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
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

// ApplyStatus server-side applies obj's status subresource and nothing else:
// the request names the object and carries its status, so the fields of the
// status that fieldOwner stops setting are removed, and the spec is never
// touched.
func ApplyStatus(ctx context.Context, c client.Client, fieldOwner string, obj client.Object) error {
	_, err := applyStatus(ctx, c, fieldOwner, obj, "")
	return err
}

// ApplyStatusAt is ApplyStatus on the condition that the object is still
// at resourceVersion (a Conflict otherwise), for a controller whose write
// decides from what it read; it returns the resourceVersion the write
// made, the precondition of its next write.
func ApplyStatusAt(ctx context.Context, c client.Client, fieldOwner string, obj client.Object, resourceVersion string) (string, error) {
	return applyStatus(ctx, c, fieldOwner, obj, resourceVersion)
}

func applyStatus(ctx context.Context, c client.Client, fieldOwner string, obj client.Object, resourceVersion string) (string, error) {
	full, err := toApply(c.Scheme(), obj)
	if err != nil {
		return "", err
	}
	status, ok := full.Object["status"]
	if !ok {
		status = map[string]any{}
	}
	meta := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": full.GetAPIVersion(),
		"kind":       full.GetKind(),
		"metadata":   meta,
		"status":     status,
	}}
	// The server's answer is decoded back into u.
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("applying the status of %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return u.GetResourceVersion(), nil
}

// toApply converts obj to its unstructured form with apiVersion and kind
// set (objects read from a cache have no TypeMeta) and nulls removed.
func toApply(scheme *runtime.Scheme, obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, fmt.Errorf("%T %s: %w", obj, obj.GetName(), err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T %s: %w", obj, obj.GetName(), err)
	}
	PruneNulls(m)
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(gvk.GroupVersion().String())
	u.SetKind(gvk.Kind)
	return u, nil
}

// PruneNulls removes null values from a JSON object tree in place.
func PruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			PruneNulls(e)
		}
	case []any:
		for _, e := range t {
			PruneNulls(e)
		}
	}
}
