// Package plan holds the rollout's pure decisions: which machines of a pool
// need an update and why, which of them count as unavailable, how large the
// budget is, which machines may start now, and what a machine in a phase
// must see before it moves on. Nothing here reads a clock or a server: the
// controller passes the facts and now in, so every rule is table-tested and
// the controller only fetches, calls these, applies and records.
package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machinestate"
)

// Node is what the rollout needs to know of a machine's tenant Node.
type Node struct {
	Ready         bool
	Unschedulable bool
	// BootID is the kubelet's report of the node's boot (nodeInfo.bootID).
	BootID string
	Labels map[string]string
	// RebootHold is the value of the Node's kubefarm.io/reboot-hold
	// annotation; nil without one.
	RebootHold *string
}

// Machine is one machine of the pool with its Node (nil: the tenant has no
// Node of the machine's hostname).
type Machine struct {
	M    *v1alpha1.Machine
	Node *Node
	// Hold, when set, is the gate that keeps the machine's update from
	// starting in this pass (HoldOf).
	Hold *Hold
}

// Failed tells whether the machine's latest update towards target failed
// and waits for an operator's retry.
func Failed(m *v1alpha1.Machine, target v1alpha1.ImageRef) bool {
	r := m.Status.Rollout
	return r != nil && r.Phase == v1alpha1.RolloutFailed && r.TargetImage == target
}

// Unavailable tells whether the budget counts the machine as unavailable:
// its update is in flight, or its node is missing, not Ready or cordoned,
// whoever made it so.
func Unavailable(m Machine) bool {
	return machinestate.InFlight(m.M) || m.Node == nil || !m.Node.Ready || m.Node.Unschedulable
}

// NeedsUpdate tells why the machine must be rebooted towards target, if it
// must: it is served another image, or it asked for a reboot in the boot it
// runs (its RebootRequired condition, raised for that boot ID).
//
// A Machine with no served image yet needs no update: the NodePool
// controller has just made it, and the rollout's pass pins the pool's image
// on it for its first boot (Reconciler.serveFirst) instead. Starting an
// update there would "update" a machine that has not booted, and at the
// boot timeout power-cycle it in the middle of its first boot.
func NeedsUpdate(m *v1alpha1.Machine, target v1alpha1.ImageRef) (v1alpha1.RolloutReason, bool) {
	if machinestate.NeedsFirstServe(m) {
		return "", false
	}
	if !machinestate.ServedIs(m, target) {
		return v1alpha1.RolloutForImage, true
	}
	if machinestate.RebootRequested(m) {
		return v1alpha1.RolloutForReboot, true
	}
	return "", false
}

// Budget resolves an absolute-or-percent budget against total machines:
// percentages round down, and a budget is at least one, so that a rollout
// of a small pool can always move.
func Budget(v *intstr.IntOrString, total int) (int, error) {
	if v == nil {
		return 1, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil {
		return 0, fmt.Errorf("maxUnavailable %s: %w", v.String(), err)
	}
	return max(n, 1), nil
}

// Domain is the failure domain of a machine: the value of label on its
// node, "" without one (or without a node).
func Domain(m Machine, label string) string {
	if label == "" || m.Node == nil {
		return ""
	}
	return m.Node.Labels[label]
}

// Candidate is a machine that may be started, and why.
type Candidate struct {
	Machine
	// Index is the machine's place in the slice Select was given.
	Index  int
	Reason v1alpha1.RolloutReason
	// SkippedLast: its latest finished update towards the target was
	// Skipped, so it goes after the others.
	SkippedLast bool
}

// Selection is what the planner decided for one pass.
type Selection struct {
	// Start are the machines to start, in order.
	Start []Candidate
	// Pending are the machines that need an update and are not started.
	Pending int
	// Unavailable is the pool's count before the starts; Budget its bound.
	Unavailable, Budget int
	// BlockedByDomain names domains whose own budget held a machine back.
	BlockedByDomain []string
	// Held are the machines that need an update and may start but for a
	// gate (Machine.Hold), in the order of machines; they count in Pending.
	Held []Candidate
	// RetryAt is when the earliest skipped machine may be tried again
	// (zero: none waits).
	RetryAt time.Time
}

// SkipBackoff is how long a machine whose drain timed out under the Skip
// policy waits before it is tried again: as long as the drain timeout, so a
// node whose pods cannot leave is not cordoned again and again.
func SkipBackoff(st v1alpha1.RolloutStrategy) time.Duration {
	if st.DrainTimeout != nil && st.DrainTimeout.Duration > 0 {
		return st.DrainTimeout.Duration
	}
	return 15 * time.Minute
}

// Select picks, in a deterministic order, the machines to start within the
// budget: the pool's (every unavailable machine counts, not only the
// rollout's own) and, with a failure-domain label, each domain's.
//
// Order: machines whose last attempt was skipped go last; among the rest,
// machines already unavailable (a NotReady node) go first, since updating
// them costs no more availability; then by name. A machine already
// unavailable still needs room in the budget: past it, nothing starts.
//
// A machine skipped last time waits SkipBackoff from its skip first; it
// counts as pending meanwhile.
func Select(machines []Machine, target v1alpha1.ImageRef, st v1alpha1.RolloutStrategy, now time.Time) (Selection, error) {
	budget, err := Budget(st.MaxUnavailable, len(machines))
	if err != nil {
		return Selection{}, err
	}
	sel := Selection{Budget: budget}
	doms := tallyDomains(machines, st.FailureDomainLabel)
	sel.Unavailable = doms.unavailable
	cands := candidates(machines, target, st, now, &sel)
	sortCandidates(cands)
	if err := admit(&sel, cands, doms, st); err != nil {
		return sel, err
	}
	sel.Pending += len(cands) - len(sel.Start)
	return sel, nil
}

// domains counts a pool's machines, and its unavailable ones, by failure
// domain ("" without a label).
type domains struct {
	total, unavail map[string]int
	unavailable    int
}

func tallyDomains(machines []Machine, label string) domains {
	d := domains{total: map[string]int{}, unavail: map[string]int{}}
	for _, m := range machines {
		dom := Domain(m, label)
		d.total[dom]++
		if Unavailable(m) {
			d.unavailable++
			d.unavail[dom]++
		}
	}
	return d
}

// candidates are the machines that need an update and may start now, in
// the order of machines. A machine skipped last time that is still within
// SkipBackoff counts in sel.Pending and sets sel.RetryAt instead; one a
// gate holds counts in sel.Pending and sel.Held.
func candidates(machines []Machine, target v1alpha1.ImageRef, st v1alpha1.RolloutStrategy, now time.Time, sel *Selection) []Candidate {
	var cands []Candidate
	for i, m := range machines {
		if machinestate.InFlight(m.M) || Failed(m.M, target) {
			continue
		}
		reason, ok := NeedsUpdate(m.M, target)
		if !ok {
			continue
		}
		skipped := skippedLast(m.M, target)
		if skipped {
			if at := m.M.Status.History[0].FinishTime.Add(SkipBackoff(st)); now.Before(at) {
				sel.Pending++
				if sel.RetryAt.IsZero() || at.Before(sel.RetryAt) {
					sel.RetryAt = at
				}
				continue
			}
		}
		c := Candidate{Machine: m, Index: i, Reason: reason, SkippedLast: skipped}
		if m.Hold != nil {
			// A gate holds it: it waits without taking the budget's room
			// from the machines behind it.
			sel.Pending++
			sel.Held = append(sel.Held, c)
			continue
		}
		cands = append(cands, c)
	}
	return cands
}

// sortCandidates orders cands as Select documents: skipped last, then the
// unavailable first, then by name.
func sortCandidates(cands []Candidate) {
	slices.SortFunc(cands, func(a, b Candidate) int {
		if a.SkippedLast != b.SkippedLast {
			if a.SkippedLast {
				return 1
			}
			return -1
		}
		ua, ub := Unavailable(a.Machine), Unavailable(b.Machine)
		if ua != ub {
			if ua {
				return -1
			}
			return 1
		}
		return strings.Compare(a.M.Name, b.M.Name)
	})
}

// admit appends to sel.Start the candidates, in order, that fit the
// pool's budget and, with a failure-domain label and a per-domain budget,
// their domain's; it names the domains that held one back.
func admit(sel *Selection, cands []Candidate, doms domains, st v1alpha1.RolloutStrategy) error {
	unavail := sel.Unavailable
	blocked := map[string]bool{}
	perDomain := st.MaxUnavailablePerDomain != nil && st.FailureDomainLabel != ""
	for _, c := range cands {
		add := 0
		if !Unavailable(c.Machine) {
			add = 1
		}
		if unavail+add > sel.Budget {
			continue
		}
		d := Domain(c.Machine, st.FailureDomainLabel)
		if perDomain {
			db, err := Budget(st.MaxUnavailablePerDomain, doms.total[d])
			if err != nil {
				return err
			}
			if doms.unavail[d]+add > db {
				blocked[d] = true
				continue
			}
		}
		unavail += add
		doms.unavail[d] += add
		sel.Start = append(sel.Start, c)
	}
	for d := range blocked {
		sel.BlockedByDomain = append(sel.BlockedByDomain, d)
	}
	slices.Sort(sel.BlockedByDomain)
	return nil
}

// skippedLast: the newest history entry is a Skipped update to target.
func skippedLast(m *v1alpha1.Machine, target v1alpha1.ImageRef) bool {
	h := m.Status.History
	return len(h) > 0 && h[0].Result == v1alpha1.RolloutSkipped && h[0].Image == target
}

// Start is the record that begins c's update at now, written before the
// cordon. wasCordoned comes from the node as it is now, or from a failed
// earlier update's record: that update may have cordoned the node itself,
// and the operator's intent is what the first record saw.
func Start(c Candidate, target v1alpha1.ImageRef, now time.Time) *v1alpha1.MachineRollout {
	was := c.Node != nil && c.Node.Unschedulable
	if prev := c.M.Status.Rollout; prev != nil && prev.Phase == v1alpha1.RolloutFailed {
		was = prev.WasCordoned
	}
	t := metav1.NewTime(now)
	r := &v1alpha1.MachineRollout{
		Phase: v1alpha1.RolloutCordoning, Reason: c.Reason, TargetImage: target,
		PhaseStartTime: t, StartTime: &t, WasCordoned: was,
		Message: "cordoning the node",
	}
	if lb := c.M.Status.LastBoot; lb != nil {
		r.PreviousBootID = lb.BootID
	}
	if c.Node == nil {
		r.Message = "the tenant has no Node for this machine; nothing to cordon"
	}
	return r
}

// Next is r moved to phase at now, with msg; the phase's own fields start
// empty.
func Next(r *v1alpha1.MachineRollout, phase v1alpha1.RolloutPhase, now time.Time, msg string) *v1alpha1.MachineRollout {
	out := r.DeepCopy()
	out.Phase, out.PhaseStartTime, out.Message = phase, metav1.NewTime(now), msg
	out.ReadySince = nil
	return out
}

// Expired tells whether the phase that began at start has outlasted d, and
// how long is left otherwise. A nil or zero d never expires.
func Expired(start metav1.Time, d *metav1.Duration, now time.Time) (bool, time.Duration) {
	if d == nil || d.Duration <= 0 {
		return false, time.Duration(math.MaxInt64)
	}
	left := start.Add(d.Duration).Sub(now)
	return left <= 0, left
}

// Rebooted tells whether the machine reported a boot other than the one
// the update started from.
func Rebooted(m *v1alpha1.Machine) bool {
	r, lb := m.Status.Rollout, m.Status.LastBoot
	return r != nil && lb != nil && lb.BootID != "" && lb.BootID != r.PreviousBootID
}

// BootStarted tells whether the machine began a new boot since the current
// phase began: kubefarm-pxe handed a boot its secret (status.bootCredential)
// after that. In Rebooting it is the proof that the agent did reboot the
// machine, long before the boot's report, which comes only once the node
// image runs (minutes on a slow machine or a busy boot network): a reset
// then would only restart a boot that is under way.
func BootStarted(m *v1alpha1.Machine) bool {
	r, bc := m.Status.Rollout, m.Status.BootCredential
	return r != nil && bc != nil && bc.Issued.After(r.PhaseStartTime.Time)
}

// Verdict is what Verify found.
type Verdict struct {
	// Good: the machine runs the target image and its node is Ready on this
	// boot; Since how long is for the caller to track (ReadySince).
	Good bool
	// Why not, for the phase's message.
	Why string
}

// Verify checks a rebooted machine: it reported the target's digest, its
// Node exists, is Ready, and reports the boot ID the machine reported (so
// the Ready is the new boot's, not a stale status of the old one).
func Verify(m Machine) Verdict {
	r, lb := m.M.Status.Rollout, m.M.Status.LastBoot
	switch {
	case r == nil || lb == nil:
		return Verdict{Why: "no boot reported"}
	case lb.ImageDigest != r.TargetImage.Digest:
		return Verdict{Why: fmt.Sprintf("booted rootfs %s, not the target %s", lb.ImageDigest, r.TargetImage.Digest)}
	case m.Node == nil:
		return Verdict{Why: "the node has not registered"}
	case m.Node.BootID != lb.BootID:
		return Verdict{Why: fmt.Sprintf("the node reports boot %s, not the reported boot %s yet", orNone(m.Node.BootID), lb.BootID)}
	case !m.Node.Ready:
		return Verdict{Why: "the node is not Ready"}
	}
	return Verdict{Good: true}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Finished is the history entry of an update ending with result at now,
// prepended to h and capped at ten entries (the API's bound).
func Finished(h []v1alpha1.RolloutHistoryEntry, r *v1alpha1.MachineRollout, result v1alpha1.RolloutPhase, now time.Time, msg string) []v1alpha1.RolloutHistoryEntry {
	e := v1alpha1.RolloutHistoryEntry{Image: r.TargetImage, Result: result, Reason: r.Reason, FinishTime: metav1.NewTime(now), Message: msg}
	out := append([]v1alpha1.RolloutHistoryEntry{e}, h...)
	if len(out) > 10 {
		out = out[:10]
	}
	return out
}
