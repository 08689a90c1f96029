package plan

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
)

// Summary is the pool as the rollout sees it after a pass.
type Summary struct {
	Total, Updated, InFlight, Failed, Pending, Unavailable, Budget int
	// Unbooted are the machines, none in flight, that never reported a
	// boot (no status.lastBoot).
	Unbooted      int
	FailureBudget int
	Paused        bool
	// Window: the maintenance windows allow starts now; NextWindow is when
	// that changes (zero: never).
	WindowOpen bool
	NextWindow time.Time
	// ImageProblem, when set, is why no update can start: the BootImage is
	// missing or kubefarm-pxe has not verified its artifacts. ImageReason is
	// the condition reason for it.
	ImageProblem, ImageReason string
	// Invalid is why the strategy cannot be evaluated (a bad window).
	Invalid string
	// FullDomains are the failure domains whose own budget held a machine
	// back in this pass (Selection.BlockedByDomain).
	FullDomains []string
	// DrainBlocked names the first machine whose drain a refused eviction
	// held up in this pass, and what refused it.
	DrainBlocked string
	// Held is how many waiting machines a gate held in this pass, and
	// HeldNames names them (plan.HeldNames).
	Held      int
	HeldNames string
}

// Halted tells whether the failures exceed the failure budget.
func (s Summary) Halted() bool { return s.Failed > s.FailureBudget }

// Conditions are the pool's rollout conditions for s: Progressing, Paused,
// Halted and Complete.
func Conditions(s Summary) []metav1.Condition {
	paused := conditions.New(v1alpha1.ConditionPaused, false, v1alpha1.ReasonNotPaused, "new machine updates may start")
	if s.Paused {
		paused = conditions.New(v1alpha1.ConditionPaused, true, v1alpha1.ReasonRolloutPaused,
			fmt.Sprintf("spec.rollout.paused holds new updates back; %d in flight finish", s.InFlight))
	}
	halted := conditions.New(v1alpha1.ConditionHalted, false, v1alpha1.ReasonFailureBudgetLeft,
		fmt.Sprintf("%d failed updates, failure budget %d", s.Failed, s.FailureBudget))
	if s.Halted() {
		halted = conditions.New(v1alpha1.ConditionHalted, true, v1alpha1.ReasonFailureBudgetSpent,
			fmt.Sprintf("%d failed updates exceed the failure budget %d; annotate the pool with %s=<anything new> to retry them",
				s.Failed, s.FailureBudget, v1alpha1.AnnotationRolloutRetry))
	}
	complete := conditions.New(v1alpha1.ConditionComplete, true, v1alpha1.ReasonAllUpdated,
		fmt.Sprintf("all %d machines run the pool's image", s.Total))
	if s.Updated < s.Total {
		complete = conditions.New(v1alpha1.ConditionComplete, false, v1alpha1.ReasonMachinesPending,
			fmt.Sprintf("%d of %d machines run the pool's image", s.Updated, s.Total))
	}

	waiting := s.Pending > 0
	var progressing metav1.Condition
	switch {
	case s.Invalid != "":
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonInvalidStrategy, s.Invalid)
	case s.ImageProblem != "":
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, s.ImageReason, s.ImageProblem)
	case s.InFlight > 0:
		msg := fmt.Sprintf("%d updating, %d waiting, %d of %d unavailable (budget %d)", s.InFlight, s.Pending, s.Unavailable, s.Total, s.Budget)
		if s.DrainBlocked != "" {
			msg += "; drain blocked: " + s.DrainBlocked
		}
		progressing = conditions.New(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonMachinesUpdating, msg+s.heldSuffix())
	case !waiting && s.Unbooted > 0:
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonWaitingForFirstBoot,
			fmt.Sprintf("no machine waits for an update; %d of %d machines have not booted yet", s.Unbooted, s.Total))
	case !waiting:
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutComplete, "no machine waits for an update")
	case s.Halted():
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutHalted, halted.Message)
	case s.Paused:
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutPaused,
			fmt.Sprintf("%d machines wait; the rollout is paused", s.Pending))
	case !s.WindowOpen:
		msg := fmt.Sprintf("%d machines wait for a maintenance window", s.Pending)
		if !s.NextWindow.IsZero() {
			msg += "; the next opens at " + s.NextWindow.UTC().Format(time.RFC3339)
		}
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonWaitingForWindow, msg)
	case s.Held > 0 && s.Held >= s.Pending:
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutHeld,
			fmt.Sprintf("%d machines wait, held by the rollout's gates: %s", s.Pending, s.HeldNames))
	default:
		msg := fmt.Sprintf("%d machines wait: %d of %d unavailable already (budget %d)", s.Pending, s.Unavailable, s.Total, s.Budget)
		if len(s.FullDomains) > 0 {
			msg += "; failure domains at their own budget: " + strings.Join(s.FullDomains, ", ")
		}
		progressing = conditions.New(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonWaitingForBudget, msg+s.heldSuffix())
	}
	return []metav1.Condition{progressing, paused, halted, complete}
}

// heldSuffix names the held machines after another message.
func (s Summary) heldSuffix() string {
	if s.Held == 0 {
		return ""
	}
	return fmt.Sprintf("; %d held by the rollout's gates: %s", s.Held, s.HeldNames)
}
