// Package poolindex maps a BootImage to the NodePools that name it, through
// an index of the manager's cache, for every controller that wakes pools
// when their image appears or changes (nodepool, rollout).
package poolindex

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// ByBootImage registers an index of NodePools by spec.bootImage
// called name. Each controller that maps BootImages to pools registers its
// own (the NodePool controller BootImageIndex, the rollout controller
// another name): controller-runtime refuses a name twice, and neither
// controller then depends on the other being set up.
func ByBootImage(indexer client.FieldIndexer, name string) error {
	if err := indexer.IndexField(context.Background(), &v1alpha1.NodePool{}, name,
		func(o client.Object) []string { return []string{o.(*v1alpha1.NodePool).Spec.BootImage} }); err != nil {
		return fmt.Errorf("indexing NodePools by spec.bootImage (%s): %w", name, err)
	}
	return nil
}

// PoolsOfImage maps a BootImage to a request for each NodePool that names
// it, through the index called name.
func PoolsOfImage(c client.Reader, name string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		pools := &v1alpha1.NodePoolList{}
		if err := c.List(ctx, pools, client.MatchingFields{name: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing the NodePools of a BootImage", "bootImage", o.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(pools.Items))
		for _, p := range pools.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
		return reqs
	}
}
