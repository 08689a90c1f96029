package rollout

import (
	"context"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// SetAfterRecord sets the hook that runs between a phase's record and its
// side effect, for the tests that kill the manager there.
func SetAfterRecord(r *Reconciler, f func(ctx context.Context, m *v1alpha1.Machine)) {
	r.afterRecord = f
}
