package plan

import (
	"fmt"
	"strings"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/conditions"
)

// Hold is why a gate of spec.rollout holds a machine's update before its
// cordon: the reason and message of its RolloutHeld condition.
type Hold struct {
	Reason, Message string
}

// Gates are the facts of one pass the per-machine gates read besides the
// Machine and its Node.
type Gates struct {
	// PodSelector: spec.rollout.blockingPodSelector is set, so
	// BlockingPods (or PodsUnknown) was read.
	PodSelector bool
	// BlockingPods are the "namespace/name" of the running pods matching
	// the selector, by node name, each list sorted.
	BlockingPods map[string][]string
	// PodsUnknown, when set, is why the tenant's pods could not be listed:
	// the gate then holds every machine it is asked about (fails closed).
	PodsUnknown string
	// Pool, when set, holds every machine of the pool: the alert gate's
	// verdict (firing alerts, or a source that could not be read).
	Pool *Hold
}

// maxHoldValue bounds how much of a reboot-hold annotation's value a
// condition message quotes: the value is anybody's text (a tenant's, on
// its Node).
const maxHoldValue = 256

// maxNamedPods bounds the pods a hold's message names.
const maxNamedPods = 5

// HoldOf is what holds m's update, nil when nothing does. The operator's
// annotation on the Machine comes first, then the tenant's on the Node,
// then the pool's alerts, then the blocking pods.
func HoldOf(m Machine, g Gates) *Hold {
	if v, ok := m.M.Annotations[v1alpha1.AnnotationRebootHold]; ok {
		return &Hold{Reason: v1alpha1.ReasonRebootHold,
			Message: fmt.Sprintf("%s is set on the Machine: %q", v1alpha1.AnnotationRebootHold, conditions.Clip(v, maxHoldValue))}
	}
	if m.Node != nil && m.Node.RebootHold != nil {
		return &Hold{Reason: v1alpha1.ReasonRebootHold,
			Message: fmt.Sprintf("%s is set on Node %s: %q", v1alpha1.AnnotationRebootHold, m.M.Spec.Hostname, conditions.Clip(*m.Node.RebootHold, maxHoldValue))}
	}
	if g.Pool != nil {
		h := *g.Pool
		return &h
	}
	if !g.PodSelector {
		return nil
	}
	if g.PodsUnknown != "" {
		return &Hold{Reason: v1alpha1.ReasonBlockingPodsUnknown,
			Message: "the tenant's pods could not be listed for spec.rollout.blockingPodSelector: " + g.PodsUnknown}
	}
	pods := g.BlockingPods[m.M.Spec.Hostname]
	if len(pods) == 0 {
		return nil
	}
	return &Hold{Reason: v1alpha1.ReasonBlockingPods,
		Message: fmt.Sprintf("%s matching spec.rollout.blockingPodSelector %s on Node %s: %s",
			podCount(len(pods)), runVerb(len(pods)), m.M.Spec.Hostname, firstNames(pods, maxNamedPods))}
}

// HeldNames are the machines a pass held, as the pool's Progressing
// condition names them: "name (reason)", at most max of them and a count of
// the rest.
func HeldNames(held []Candidate, max int) string {
	parts := make([]string, 0, min(len(held), max))
	for i, c := range held {
		if i == max {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", c.M.Name, c.Hold.Reason))
	}
	s := strings.Join(parts, ", ")
	if len(held) > max {
		s += fmt.Sprintf(" and %d more", len(held)-max)
	}
	return s
}

func firstNames(list []string, max int) string {
	if len(list) <= max {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:max], ", ") + fmt.Sprintf(" and %d more", len(list)-max)
}

func podCount(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

func runVerb(n int) string {
	if n == 1 {
		return "runs"
	}
	return "run"
}
