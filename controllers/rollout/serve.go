package rollout

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubefarm/kubefarm/internal/machinestate"
)

// conflictRetry is how soon a pass whose write met a newer version of a
// Machine than its cache's looks again: the cache catches up within
// moments, no need to wait a poll.
const conflictRetry = 100 * time.Millisecond

// serveFirst pins the pool's image as the served image of every Machine
// that has none yet: one the NodePool controller has just made. This
// controller is then the one writer of status.servedImage, from this pin
// to every move of an update.
//
// It runs before the tenant is reached, so a new machine's pin does not
// wait for the tenant's API server. Even before the pin kubefarm-pxe
// serves such a machine its spec.desiredImage (httpboot.ImageFor), so the
// first boot never waits for this pass; the pin only fixes the rootfs
// digest, so a reboot out of turn comes back on the image it ran.
//
// The write carries the resourceVersion read: a cache that has not seen an
// earlier pin or move yet fails it rather than putting the pool's image
// back over it. The event is the one the NodePool controller used to emit.
func (r *Reconciler) serveFirst(ctx context.Context, s *scope) (bool, error) {
	if s.image == nil {
		// The pin waits for the BootImage; its creation wakes the pool.
		return false, nil
	}
	for _, m := range s.listed {
		if !machinestate.NeedsFirstServe(m) {
			continue
		}
		st := m.Status.DeepCopy()
		st.ServedImage = machinestate.Target(s.image)
		switch err := r.applyMachineStatus(ctx, m, st); {
		case apierrors.IsConflict(err):
			s.wake(conflictRetry)
			continue
		case err != nil:
			return false, fmt.Errorf("pinning the first served image of Machine %s: %w", m.Name, err)
		}
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, "ServedImageSet", "Create",
			"first boot will serve BootImage %s (rootfs %s)", s.image.Name, s.image.Spec.Rootfs.Digest)
	}
	return false, nil
}
