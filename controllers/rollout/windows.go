package rollout

import (
	"context"

	"github.com/kubefarm/kubefarm/internal/window"
)

// gateWindows counts the pool and stops the pass before any start while
// starts are held: by a bad or closed maintenance window, a BootImage that
// is missing or unverified, a pause or a halt.
func (r *Reconciler) gateWindows(_ context.Context, s *scope) (bool, error) {
	// At refuses invalid windows with every bad field named.
	ws, err := window.At(s.pool.Spec.Rollout.MaintenanceWindows, s.now)
	if err != nil {
		s.sum.Invalid = err.Error()
		r.summarize(s)
		return true, nil
	}
	s.sum.WindowOpen, s.sum.NextWindow = ws.Open, ws.Next
	r.summarize(s)
	if s.sum.Pending > 0 || s.sum.Unavailable > 0 {
		// The status counts nodes, which are read, not watched: while
		// machines wait (held by a pause, a halt or a closed window) or
		// nodes are unavailable, they are read again now and then, so the
		// pool's status follows a node's recovery or an operator's uncordon
		// without a tenant Node LIST every poll for the days a window may
		// stay closed. Held by the budget, the pool polls (requeueAfter).
		s.wake(statusRefreshPolls * r.poll())
	}
	if s.sum.ImageProblem != "" || s.sum.Paused || s.sum.Halted() {
		return true, nil
	}
	if !ws.Open {
		if s.sum.Pending > 0 && !ws.Next.IsZero() {
			s.wake(ws.Next.Sub(s.now))
		}
		return true, nil
	}
	return false, nil
}
