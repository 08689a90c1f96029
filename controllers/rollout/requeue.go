package rollout

import (
	"context"
)

// requeueAfter decides when the pool is looked at again, and counts it
// once more after the starts.
func (r *Reconciler) requeueAfter(_ context.Context, s *scope) (bool, error) {
	if s.conflicts > 0 {
		s.wake(conflictRetry)
	}
	s.sum.FullDomains = s.sel.BlockedByDomain
	if !s.sel.RetryAt.IsZero() {
		s.wake(s.sel.RetryAt.Sub(s.now))
	}
	if s.sel.Pending > len(s.sel.Held) {
		// Budget held machines back: others' recovery (a node back to
		// Ready, an operator's uncordon) is read, not watched.
		s.wake(r.poll())
	}
	r.noteHeld(s)
	r.summarize(s)
	return false, nil
}
