package plugin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// FieldManager is the name the plugin's writes are recorded under in
// metadata.managedFields, so that `kubectl get -o yaml
// --show-managed-fields` tells an operator's pause from what GitOps wrote.
const FieldManager = "kubectl-kubefarm"

// PausePatch is the JSON merge patch that sets spec.rollout.paused and
// nothing else.
//
// Why a merge patch and not server-side apply: the pool's spec usually
// belongs to a GitOps tool (ArgoCD applies it, often server-side). A merge
// patch is an update that names one field; the API server records
// kubectl-kubefarm as the manager of spec.rollout.paused alone and leaves
// every other manager's fields, and their ownership, as they were. It can
// never conflict, so it needs no force, and a later apply by the GitOps
// tool that does not mention paused leaves the pause in place. (A
// server-side apply of the same single field would own the same field, but
// fails with a conflict whenever the GitOps manifest sets paused, and
// --force-conflicts would then take the field from the GitOps tool.) If the
// manifest does set paused, the GitOps tool's next sync puts its value back:
// Git wins, as it should; docs/kubectl-plugin.md says so.
//
// Resume writes false rather than deleting the field, so the object says
// explicitly what the operator last asked for.
func PausePatch(paused bool) []byte {
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"rollout": map[string]any{"paused": paused}}})
	return b
}

// RetryPatch is the JSON merge patch that sets the kubefarm.io/rollout-retry
// annotation to value and touches nothing else.
func RetryPatch(value string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationRolloutRetry: value}}})
	return b
}

// RetryValue is a new value for the kubefarm.io/rollout-retry annotation:
// the controller retries when the value differs from status.observedRetry,
// so it must differ from that and from the current annotation. The time
// (UTC, seconds) reads well in `kubectl get -o yaml`; a retry within the
// same second as the last one gets nanoseconds, and (a clock that did not
// move) a counter after them.
func RetryValue(p *v1alpha1.NodePool, now time.Time) string {
	taken := func(v string) bool {
		return v == p.Annotations[v1alpha1.AnnotationRolloutRetry] || v == p.Status.ObservedRetry
	}
	now = now.UTC()
	v := now.Format(time.RFC3339)
	const nanos = "2006-01-02T15:04:05.000000000Z07:00"
	if taken(v) {
		v = now.Format(nanos)
	}
	// At most two values are taken, so this ends by the second turn.
	for i := 2; taken(v); i++ {
		v = fmt.Sprintf("%s-%d", now.Format(nanos), i)
	}
	return v
}

// Halted returns the Halted condition's message when the pool's rollout is
// halted, and ok false otherwise.
func Halted(p *v1alpha1.NodePool) (message string, ok bool) {
	if !meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionHalted) {
		return "", false
	}
	return meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionHalted).Message, true
}

// HistoryEntry is one finished update of one of a pool's machines.
type HistoryEntry struct {
	Machine string
	v1alpha1.RolloutHistoryEntry
}

// RecentHistory merges the history of the pool's machines, newest first
// (then by machine name, for a stable order), at most limit entries (every
// entry when limit is negative).
func RecentHistory(machines []v1alpha1.Machine, pool string, limit int) []HistoryEntry {
	var out []HistoryEntry
	for _, m := range machines {
		if m.Spec.Pool != pool {
			continue
		}
		for _, h := range m.Status.History {
			out = append(out, HistoryEntry{Machine: m.Name, RolloutHistoryEntry: h})
		}
	}
	slices.SortStableFunc(out, func(a, b HistoryEntry) int {
		return cmp.Or(b.FinishTime.Compare(a.FinishTime.Time), cmp.Compare(a.Machine, b.Machine))
	})
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// RolloutStatus is `kubectl kubefarm rollout status`: the pool's image and
// rollout image, spec.rollout.paused, the counts, the rollout conditions
// with their messages, the machines with a rollout record and the last
// historyLimit finished updates of the pool's machines.
func RolloutStatus(p *v1alpha1.NodePool, machines []v1alpha1.Machine, historyLimit int, now time.Time) string {
	var b strings.Builder
	st := p.Status
	fmt.Fprintf(&b, "NodePool %s/%s (cluster %s): %s\n", p.Namespace, p.Name, p.Spec.Cluster, RolloutState(p))
	fmt.Fprintf(&b, "Image:          %s\n", p.Spec.BootImage)
	if ri := st.RolloutImage; ri != nil {
		fmt.Fprintf(&b, "Rollout image:  %s@%s\n", ri.Name, ri.Digest)
	}
	fmt.Fprintf(&b, "Paused:         %t (spec.rollout.paused)\n", p.Spec.Rollout.Paused)
	budget := int32(v1alpha1.DefaultFailureBudget)
	if fb := p.Spec.Rollout.FailureBudget; fb != nil {
		budget = *fb
	}
	fmt.Fprintf(&b, "Machines:       %d total, %d ready, %d updated, %d updating, %d unavailable\n",
		st.Machines, st.ReadyMachines, st.UpdatedMachines, st.UpdatingMachines, st.UnavailableMachines)
	fmt.Fprintf(&b, "Failed updates: %d (failure budget %d)\n", st.FailedUpdates, budget)
	fmt.Fprintf(&b, "Gates:          %s\n", Gates(p))
	if v := p.Annotations[v1alpha1.AnnotationRolloutRetry]; v != "" {
		fmt.Fprintf(&b, "Last retry:     %s (observed: %s)\n", v, cmp.Or(st.ObservedRetry, none))
	}
	if RolloutStale(p) {
		fmt.Fprintf(&b, "Note: the conditions describe an older generation than the pool's (generation %d); the rollout controller has not acted on the latest spec yet.\n", p.Generation)
	}

	var rows [][]string
	for _, t := range rolloutConditions {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			rows = append(rows, []string{c.Type, string(c.Status), c.Reason, Age(now, c.LastTransitionTime), c.Message})
		}
	}
	b.WriteString("\nConditions:\n")
	if len(rows) == 0 {
		b.WriteString("  none: the rollout controller has not reported on this pool\n")
	} else {
		b.WriteString(indent(Table([]string{"TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"}, rows)))
	}

	rows = nil
	for _, m := range MachinesInRollout(machines, p.Name) {
		ro := m.Status.Rollout
		rows = append(rows, []string{m.Name, string(ro.Phase), string(ro.Reason), Age(now, ro.PhaseStartTime), ro.TargetImage.Name, ro.Message})
	}
	b.WriteString("\nMachines in the rollout:\n")
	if len(rows) == 0 {
		b.WriteString("  none\n")
	} else {
		b.WriteString(indent(Table([]string{"MACHINE", "PHASE", "REASON", "SINCE", "TARGET", "MESSAGE"}, rows)))
	}

	if held := heldRows(machines, p.Name, now); len(held) > 0 {
		b.WriteString("\nMachines held by a gate:\n")
		b.WriteString(indent(Table([]string{"MACHINE", "REASON", "SINCE", "MESSAGE"}, held)))
	}

	if historyLimit != 0 {
		rows = nil
		for _, h := range RecentHistory(machines, p.Name, historyLimit) {
			rows = append(rows, []string{h.Machine, string(h.Result), string(h.Reason), h.Image.Name, Age(now, h.FinishTime), h.Message})
		}
		b.WriteString("\nRecent updates:\n")
		if len(rows) == 0 {
			b.WriteString("  none\n")
		} else {
			b.WriteString(indent(Table([]string{"MACHINE", "RESULT", "REASON", "IMAGE", "AGE", "MESSAGE"}, rows)))
		}
	}
	return b.String()
}

// indent puts two spaces before every line of a table under a heading.
func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}

// RolloutFinished tells `rollout status` whether to stop watching the pool:
// finished with failure "" once the rollout is complete (Complete True, no
// update in flight), or finished with failure saying why when only an
// operator can move it on: halted (Halted True) or a strategy the
// controller cannot evaluate (Progressing InvalidStrategy). Anything else
// (updates in flight, waiting for the budget, a window, an image, the
// machines' first boot, a pause) moves on by itself or by an operator's
// resume, so it keeps waiting. Conditions of an older generation than the
// pool's (RolloutStale), or none at all, say nothing yet: right after an
// edit of spec.bootImage the previous rollout's Complete must not end the
// wait.
func RolloutFinished(p *v1alpha1.NodePool) (finished bool, failure string) {
	conds := p.Status.Conditions
	progressing := meta.FindStatusCondition(conds, v1alpha1.ConditionProgressing)
	if progressing == nil || RolloutStale(p) {
		return false, ""
	}
	if msg, halted := Halted(p); halted {
		return true, "halted: " + msg
	}
	if progressing.Reason == v1alpha1.ReasonInvalidStrategy {
		return true, "its strategy is invalid: " + progressing.Message
	}
	if progressing.Status == metav1.ConditionTrue {
		return false, ""
	}
	return meta.IsStatusConditionTrue(conds, v1alpha1.ConditionComplete), ""
}

// Gates names the gates of the pool's rollout that hold a machine before
// its cordon: the alert gate, the blocking pod selector (as kubectl writes
// a selector) and the reboot-hold annotation, which every pool honours.
func Gates(p *v1alpha1.NodePool) string {
	var gates []string
	if g := p.Spec.Rollout.AlertGate; g != nil {
		a := "alerts firing in " + g.Source
		if g.Include != "" {
			a += fmt.Sprintf(" named %q", g.Include)
		}
		if g.Exclude != "" {
			a += fmt.Sprintf(" except %q", g.Exclude)
		}
		gates = append(gates, a)
	}
	if sel := p.Spec.Rollout.BlockingPodSelector; sel != nil {
		gates = append(gates, "pods matching "+metav1.FormatLabelSelector(sel))
	}
	return strings.Join(append(gates, v1alpha1.AnnotationRebootHold+" on a Machine or its Node"), ", ")
}

// heldRows are the pool's machines a gate holds (RolloutHeld True), by
// name.
func heldRows(machines []v1alpha1.Machine, pool string, now time.Time) [][]string {
	var rows [][]string
	for _, m := range machines {
		if m.Spec.Pool != pool {
			continue
		}
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionRolloutHeld); c != nil && c.Status == metav1.ConditionTrue {
			rows = append(rows, []string{m.Name, c.Reason, Age(now, c.LastTransitionTime), c.Message})
		}
	}
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return rows
}
