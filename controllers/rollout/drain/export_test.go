package drain

import (
	"context"

	"k8s.io/client-go/kubernetes"
)

// StepWithLimits is Step with a smaller list page and eviction bound, so
// that a test exercises the paging and the bound with a handful of pods.
func StepWithLimits(ctx context.Context, cs kubernetes.Interface, node string, pageSize int64, maxEvictions int) (Result, error) {
	return step(ctx, cs, node, limits{pageSize: pageSize, maxEvictions: maxEvictions})
}
