package machineremoval

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/drain"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

// The pure decisions: which step a Machine being deleted takes next, and
// what one drain pass's result means under the pool's drain timeout.

// Step is what a pass does next for a Machine being deleted.
type Step string

const (
	// StepRelease removes the finalizer: nothing (more) in the tenant
	// holds the Machine.
	StepRelease Step = "Release"
	// StepHold waits for the tenant's API server to answer.
	StepHold Step = "HoldUnreachable"
	// StepCordon cordons the node (then drains it in the same pass).
	StepCordon Step = "Cordon"
	// StepDrain runs one drain pass.
	StepDrain Step = "Drain"
	// StepDeleteNode deletes the Node from the tenant.
	StepDeleteNode Step = "DeleteNode"
	// StepPowerOff powers the machine off through its driver.
	StepPowerOff Step = "PowerOff"
)

// TenantState is what the pass found of the Machine's tenant.
type TenantState int

const (
	// TenantLive: the TenantCluster exists, is not being deleted, and its
	// API server answered the Node lookup.
	TenantLive TenantState = iota
	// TenantGone: the TenantCluster is gone or being deleted; its nodes go
	// with it.
	TenantGone
	// TenantUnreachable: the TenantCluster is live but its API server did
	// not answer (or the manager has no usable credential of it).
	TenantUnreachable
)

// Facts are what one pass knows of a Machine being deleted, gathered in
// this order (a later fact is not read when an earlier one decides).
type Facts struct {
	Tenant TenantState
	// OtherMachine: another Machine of the tenant, not being deleted, has
	// this Machine's hostname: the Node is that Machine's now (an entry
	// moved to another pool), and this removal must not touch it.
	OtherMachine bool
	// NodeExists is the tenant API server's answer to a GET of the Node
	// of the Machine's hostname (not a cache's).
	NodeExists bool
	// Cordoned: the Node is unschedulable.
	Cordoned bool
	// Recorded is the reason of the Machine's Removing condition when its
	// status is True (the removal began), "" otherwise.
	Recorded string
	// PowerOff: the Machine has spec.power and the manager has a way to
	// power machines off.
	PowerOff bool
	// PoweredOff: this pass powered the machine off. Not recorded: a
	// manager that stops between the power off and the release powers off
	// again, which leaves a machine that is off as it is.
	PoweredOff bool
}

// Decide is the next step of the removal of a Machine being deleted that
// still carries the finalizer.
//
// A Machine whose tenant is gone, whose hostname another live Machine of
// the tenant now has, or whose Node the tenant does not have and never had
// while this removal ran (it never joined, or its Node was deleted by
// someone else before), goes at once: there is nothing of it to drain. A
// tenant that does not answer holds the Machine: a joined machine's Node
// cannot be told from a machine that never joined without it.
//
// Once the removal has begun (Removing True), the recorded step and the
// Node decide: a Node still there is cordoned, drained, then deleted (a
// Node that reappears after the delete is deleted again); a Node gone is
// followed by the power off, when there is one, and the release.
func Decide(f Facts) Step {
	nodeDeleted := f.Recorded == kubefarmv1.ReasonRemovalPowerOff || f.Recorded == kubefarmv1.ReasonRemovalFailed
	switch {
	case f.Tenant == TenantGone, f.OtherMachine:
		return StepRelease
	case f.Tenant == TenantUnreachable && !nodeDeleted:
		return StepHold
	}
	if !f.NodeExists || f.Tenant == TenantUnreachable {
		// Past the Node's delete, the tenant is not needed any more.
		if f.Recorded == "" || !f.PowerOff || f.PoweredOff {
			return StepRelease
		}
		return StepPowerOff
	}
	switch f.Recorded {
	case "", kubefarmv1.ReasonRemovalCordoning:
		return StepCordon
	case kubefarmv1.ReasonRemovalDraining, kubefarmv1.ReasonRemovalDrainHeld:
		if !f.Cordoned {
			// Uncordoned by someone meanwhile: evicted pods would come
			// back to it.
			return StepCordon
		}
		return StepDrain
	default:
		// DeletingNode, PoweringOff, RemovalFailed: the Node was deleted,
		// or was being; it is there, so it goes (again).
		return StepDeleteNode
	}
}

// DefaultDrainTimeout is the drain timeout of a Machine whose pool is gone
// (deleted with it), the API's default of spec.rollout.drainTimeout.
const DefaultDrainTimeout = 15 * time.Minute

// DrainPolicy is the pool's spec.rollout.drainTimeout and
// drainTimeoutPolicy, with the API's defaults for a pool that is gone or
// was written without them.
func DrainPolicy(pool *kubefarmv1.NodePool) (*metav1.Duration, kubefarmv1.DrainTimeoutPolicy) {
	timeout := &metav1.Duration{Duration: DefaultDrainTimeout}
	policy := kubefarmv1.DrainHalt
	if pool == nil {
		return timeout, policy
	}
	if t := pool.Spec.Rollout.DrainTimeout; t != nil {
		timeout = t
	}
	if p := pool.Spec.Rollout.DrainTimeoutPolicy; p != "" {
		policy = p
	}
	return timeout, policy
}

// DrainOutcome is what one drain pass's result means.
type DrainOutcome struct {
	// Proceed: the Node may be deleted (drained, or timed out under Skip).
	Proceed bool
	// Reason is the Removing reason while the drain goes on: Draining (pods
	// terminating) or DrainHeld (an eviction refused, or timed out under
	// Halt). Empty when Proceed.
	Reason string
	// Message says how far the drain is, naming a few blocked pods and the
	// API server's words.
	Message string
	// TimedOut: the drain outlasted drainTimeout.
	TimedOut bool
	// Blocked: an eviction was refused in this pass.
	Blocked bool
	// Requeue is when to look again while the drain goes on.
	Requeue time.Duration
}

// DecideDrain is what the drain pass res means for a removal that began at
// started (the Removing condition's transition to True, the cordon just
// before the drain's first pass): drained, the Node may go; past timeout,
// policy Skip lets it go anyway (the pods still on it are left to the
// tenant's pod garbage collector once the Node is gone: their budget is
// not consulted again) and Halt holds the Machine, draining on, until the
// budget allows or an operator steps in; before it, the drain goes on, and
// the next pass comes within poll.
func DecideDrain(res drain.Result, started, now time.Time, timeout *metav1.Duration, policy kubefarmv1.DrainTimeoutPolicy, poll time.Duration) DrainOutcome {
	if res.Remaining == 0 {
		return DrainOutcome{Proceed: true, Message: "drained"}
	}
	msg := drainMessage(res)
	blocked := len(res.Blocked) > 0
	expired, left := plan.Expired(metav1.NewTime(started), timeout, now)
	if expired {
		if policy == kubefarmv1.DrainSkip {
			return DrainOutcome{Proceed: true, TimedOut: true, Blocked: blocked,
				Message: fmt.Sprintf("drain timed out after %s; drainTimeoutPolicy Skip removes the node anyway: %s", timeout.Duration, msg)}
		}
		return DrainOutcome{Reason: kubefarmv1.ReasonRemovalDrainHeld, TimedOut: true, Blocked: blocked, Requeue: poll,
			Message: fmt.Sprintf("drain timed out after %s; drainTimeoutPolicy Halt holds the Machine until the drain finishes: %s", timeout.Duration, msg)}
	}
	out := DrainOutcome{Reason: kubefarmv1.ReasonRemovalDraining, Blocked: blocked, Message: msg, Requeue: min(left, poll)}
	if blocked {
		out.Reason = kubefarmv1.ReasonRemovalDrainHeld
	}
	return out
}

// drainMessage names what holds a drain up, three pods at most.
func drainMessage(res drain.Result) string {
	if len(res.Blocked) == 0 {
		// Stable while the count is: each change is a status write.
		return fmt.Sprintf("%d pods still on the node, evicted and terminating", res.Remaining)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d pods left; eviction refused for", res.Remaining)
	for i, bl := range res.Blocked {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(res.Blocked)-3)
			break
		}
		fmt.Fprintf(&b, " %s (%s)", bl.Pod, bl.Reason)
	}
	return b.String()
}
