package plugin

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// The rollout controller's pool conditions, in the order the plugin shows
// them.
var rolloutConditions = []string{
	v1alpha1.ConditionProgressing, v1alpha1.ConditionPaused, v1alpha1.ConditionHalted, v1alpha1.ConditionComplete,
}

// Rollout states that are not a condition's reason.
const (
	StateHalted      = "Halted"
	StatePaused      = "Paused"
	StateProgressing = "Progressing"
	StateComplete    = "Complete"
	// StateUnknown: the pool carries none of the rollout conditions; the
	// rollout controller has not looked at it (or does not run).
	StateUnknown = "Unknown"
)

// RolloutState is one word for a pool's rollout, read from the conditions
// the rollout controller writes, never recomputed from machines: the
// controller is the one authority on budget, windows and failures. The
// first of these that holds wins: Halted (an operator must retry), Paused
// (an operator held it; updates in flight still finish), Progressing
// (updates in flight), Complete. Otherwise the pool waits, and the state is
// Progressing's reason, which says for what (WaitingForBudget,
// WaitingForWindow, BootImageNotReady, InvalidStrategy, ...).
func RolloutState(p *v1alpha1.NodePool) string {
	conds := p.Status.Conditions
	for _, s := range []struct{ cond, state string }{
		{v1alpha1.ConditionHalted, StateHalted},
		{v1alpha1.ConditionPaused, StatePaused},
		{v1alpha1.ConditionProgressing, StateProgressing},
		{v1alpha1.ConditionComplete, StateComplete},
	} {
		if meta.IsStatusConditionTrue(conds, s.cond) {
			return s.state
		}
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionProgressing); c != nil && c.Reason != "" {
		return c.Reason
	}
	return StateUnknown
}

// RolloutStale tells whether the rollout conditions describe an older
// generation of the pool than its current spec: right after `rollout
// pause`, for example, they still say Progressing until the controller has
// acted. Conditions without an observed generation are not judged.
func RolloutStale(p *v1alpha1.NodePool) bool {
	for _, t := range rolloutConditions {
		if c := meta.FindStatusCondition(p.Status.Conditions, t); c != nil && c.ObservedGeneration != 0 && c.ObservedGeneration < p.Generation {
			return true
		}
	}
	return false
}

// staleMark follows a stale state in the status table; staleNote explains
// it below the table.
const (
	staleMark = "*"
	staleNote = "* the rollout controller has not acted on the pool's latest spec yet; its conditions describe an older generation\n"
)

// Status is `kubectl kubefarm status`: the TenantClusters, the NodePools
// with their machine counts and rollout state, and every machine that has
// a rollout record (an update in flight, or a failed one waiting for a
// retry). Each table is sorted by namespace and name, so the output is the
// same for the same objects whatever order the server lists them in. The
// NAMESPACE column appears only with allNamespaces, as in kubectl get.
func Status(clusters []v1alpha1.TenantCluster, pools []v1alpha1.NodePool, machines []v1alpha1.Machine, scope string, allNamespaces bool, now time.Time) string {
	if len(clusters) == 0 && len(pools) == 0 && len(machines) == 0 {
		if allNamespaces {
			return "No TenantClusters, NodePools or Machines found.\n"
		}
		return fmt.Sprintf("No TenantClusters, NodePools or Machines found in namespace %s.\n", scope)
	}
	var sections []string
	ns := func(namespace string, cells ...string) []string {
		if allNamespaces {
			return append([]string{namespace}, cells...)
		}
		return cells
	}
	headers := func(h ...string) []string { return ns("NAMESPACE", h...) }

	clusters = slices.Clone(clusters)
	slices.SortFunc(clusters, func(a, b v1alpha1.TenantCluster) int { return byKey(a.ObjectMeta, b.ObjectMeta) })
	var rows [][]string
	for i := range clusters {
		tc := &clusters[i]
		ready := meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionReady)
		status, reason := "Unknown", ""
		if ready != nil {
			status, reason = string(ready.Status), ready.Reason
		}
		rows = append(rows, ns(tc.Namespace, tc.Name, clusterVersion(tc), status, reason, tc.Status.Endpoint))
	}
	if len(rows) > 0 {
		sections = append(sections, "TENANT CLUSTERS\n"+Table(headers("NAME", "VERSION", "READY", "REASON", "ENDPOINT"), rows))
	}
	if rows := upgradeRows(clusters, ns); len(rows) > 0 {
		sections = append(sections, "VERSION UPGRADES\n"+Table(headers("NAME", "REASON", "MESSAGE"), rows))
	}
	if rows := falseConditionRows(clusters, v1alpha1.ConditionCARotated, ns); len(rows) > 0 {
		sections = append(sections, "CA ROTATIONS\n"+Table(headers("NAME", "REASON", "MESSAGE"), rows))
	}

	pools = slices.Clone(pools)
	slices.SortFunc(pools, func(a, b v1alpha1.NodePool) int { return byKey(a.ObjectMeta, b.ObjectMeta) })
	rows = nil
	stale := false
	for i := range pools {
		p := &pools[i]
		state := RolloutState(p)
		if RolloutStale(p) {
			state += staleMark
			stale = true
		}
		st := p.Status
		rows = append(rows, ns(p.Namespace, p.Name, p.Spec.Cluster, p.Spec.BootImage,
			itoa(st.ReadyMachines), itoa(st.UpdatedMachines), itoa(st.Machines), state))
	}
	if len(rows) > 0 {
		s := "NODE POOLS\n" + Table(headers("NAME", "CLUSTER", "IMAGE", "READY", "UPDATED", "MACHINES", "ROLLOUT"), rows)
		if stale {
			s += staleNote
		}
		sections = append(sections, s)
	}

	inRollout := MachinesInRollout(machines, "")
	rows = nil
	for i := range inRollout {
		m := &inRollout[i]
		ro := m.Status.Rollout
		rows = append(rows, ns(m.Namespace, m.Spec.Pool, m.Name, string(ro.Phase), Age(now, ro.PhaseStartTime), ro.TargetImage.Name, ro.Message))
	}
	if len(rows) > 0 {
		sections = append(sections, "MACHINES IN A ROLLOUT\n"+Table(headers("POOL", "MACHINE", "PHASE", "SINCE", "TARGET", "MESSAGE"), rows))
	}
	return strings.Join(sections, "\n")
}

// MachinesInRollout are the machines with a rollout record (of pool, or of
// every pool when pool is empty), sorted by namespace, pool and name.
func MachinesInRollout(machines []v1alpha1.Machine, pool string) []v1alpha1.Machine {
	var out []v1alpha1.Machine
	for _, m := range machines {
		if m.Status.Rollout != nil && (pool == "" || m.Spec.Pool == pool) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.Machine) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Spec.Pool, b.Spec.Pool), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// upgradeRows are the clusters whose spec.version is being stepped to or
// was refused (VersionRolledOut False, but for a new cluster's first
// rollout): the step and the steps left, or why it waits.
func upgradeRows(clusters []v1alpha1.TenantCluster, ns func(namespace string, cols ...string) []string) [][]string {
	var rows [][]string
	for i := range clusters {
		tc := &clusters[i]
		c := meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ConditionVersionRolledOut)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason == v1alpha1.ReasonRollingOut {
			continue
		}
		rows = append(rows, ns(tc.Namespace, tc.Name, c.Reason, c.Message))
	}
	return rows
}

// falseConditionRows are the clusters whose condition typ is False, with
// its reason and message: a CA rotation in progress says its step and
// what it waits for.
func falseConditionRows(clusters []v1alpha1.TenantCluster, typ string, ns func(namespace string, cols ...string) []string) [][]string {
	var rows [][]string
	for i := range clusters {
		tc := &clusters[i]
		if c := meta.FindStatusCondition(tc.Status.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse {
			rows = append(rows, ns(tc.Namespace, tc.Name, c.Reason, c.Message))
		}
	}
	return rows
}

// clusterVersion is the spec's version, and during an upgrade the version
// every component still runs.
func clusterVersion(tc *v1alpha1.TenantCluster) string {
	v, observed := tc.Spec.Version, tc.Status.ObservedVersion
	if observed != "" && observed != v {
		return v + " (running " + observed + ")"
	}
	return v
}

func byKey(a, b metav1.ObjectMeta) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
