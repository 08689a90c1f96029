package machinenode

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/machineconfig"
	"github.com/kubefarm/kubefarm/internal/machinestate"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

// The pure decisions: what the Machine's NodeReady says of a Node, whether
// the network taint may go, and which labels the manager owns on the Node.

// NodeReadyCondition is the Machine's NodeReady condition for the tenant's
// Node called name, nil when the tenant (whose Nodes the caller has listed
// completely) has none. The message names the node and its boot ID, so
// that a reader can match it with status.lastBoot.
func NodeReadyCondition(name string, node *corev1.Node) metav1.Condition {
	c := metav1.Condition{Type: kubefarmv1.ConditionNodeReady}
	if node == nil {
		c.Status, c.Reason = metav1.ConditionFalse, kubefarmv1.ReasonNodeNotFound
		c.Message = "the tenant cluster has no node " + name
		return c
	}
	prefix := "node " + name
	if id := node.Status.NodeInfo.BootID; id != "" {
		prefix += ", boot " + id
	}
	var ready *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &node.Status.Conditions[i]
		}
	}
	switch {
	case ready == nil:
		c.Status, c.Reason = metav1.ConditionUnknown, kubefarmv1.ReasonNodeStatusUnknown
		c.Message = prefix + ": no Ready condition posted yet"
		return c
	case ready.Status == corev1.ConditionTrue:
		c.Status, c.Reason = metav1.ConditionTrue, kubefarmv1.ReasonNodeReady
	case ready.Status == corev1.ConditionFalse:
		c.Status, c.Reason = metav1.ConditionFalse, kubefarmv1.ReasonNodeNotReady
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, kubefarmv1.ReasonNodeStatusUnknown
	}
	c.Message = prefix
	if ready.Reason != "" {
		c.Message += ": " + ready.Reason
	}
	if ready.Message != "" {
		c.Message += ": " + ready.Message
	}
	// metav1.Condition caps messages at 32768 bytes; the kubelet's are
	// short, but the API server's answer is no place to find out.
	const most = 1024
	if len(c.Message) > most {
		c.Message = c.Message[:most]
	}
	return c
}

// TaintVerdict is what to do with the network-unavailable taint of a Node.
type TaintVerdict int

const (
	// NoTaint: the Node does not carry the taint; nothing to do.
	NoTaint TaintVerdict = iota
	// KeepTaint: the Node carries it, and nothing says its network works.
	KeepTaint
	// LiftTaint: the agent verified the CNI chain in the boot the Node
	// runs now.
	LiftTaint
)

func (v TaintVerdict) String() string {
	switch v {
	case NoTaint:
		return "NoTaint"
	case KeepTaint:
		return "KeepTaint"
	case LiftTaint:
		return "LiftTaint"
	}
	return fmt.Sprintf("TaintVerdict(%d)", int(v))
}

// networkTaintIndex is the index of the network-unavailable taint in the
// Node's taints, -1 without one: its key and effect, whatever its value,
// as the scheduler matches it.
func networkTaintIndex(node *corev1.Node) int {
	return slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == nodeconfig.NetworkUnavailableTaint.Key && t.Effect == nodeconfig.NetworkUnavailableTaint.Effect
	})
}

// DecideTaint says whether the network-unavailable taint may be lifted
// from node, the Node of the Machine whose status is st, and why. Only a
// NetworkVerified condition that is True for the boot the Node runs now
// lifts it: status.lastBoot names that boot (the condition is written in
// the same status write), its boot ID must be the Node's
// status.nodeInfo.bootID, and the condition's message, which kubefarm-pxe
// starts with "boot <id>", must name it too. A verdict of an earlier boot
// never counts: the node may have rebooted into a broken chain.
func DecideTaint(st kubefarmv1.MachineStatus, node *corev1.Node) (TaintVerdict, string) {
	if networkTaintIndex(node) < 0 {
		return NoTaint, "the node does not carry the taint"
	}
	nodeBoot := node.Status.NodeInfo.BootID
	switch {
	case nodeBoot == "":
		return KeepTaint, "the node has not posted its boot ID"
	case st.LastBoot == nil:
		return KeepTaint, "the machine has reported no boot"
	case st.LastBoot.BootID != nodeBoot:
		return KeepTaint, fmt.Sprintf("the machine's last report is of boot %s, the node runs boot %s", st.LastBoot.BootID, nodeBoot)
	case machinestate.Verified(&kubefarmv1.Machine{Status: st}):
		return LiftTaint, "NetworkVerified is True for boot " + nodeBoot
	}
	// Not verified for the boot the node runs: say which part is missing.
	nv := meta.FindStatusCondition(st.Conditions, kubefarmv1.ConditionNetworkVerified)
	switch {
	case nv == nil:
		return KeepTaint, "the machine has no NetworkVerified condition"
	case !kubefarmv1.OfBoot(nv, nodeBoot):
		return KeepTaint, "NetworkVerified does not name the node's boot " + nodeBoot
	}
	return KeepTaint, fmt.Sprintf("NetworkVerified is %s (%s) for boot %s", nv.Status, nv.Reason, nodeBoot)
}

// NodeLabels are the labels of m's resolved tags (internal/machineconfig,
// as kubefarm-pxe hands them to the agent) that the kubelet may not set on
// its own Node (nodeconfig.KubeletMaySet: node-role.kubernetes.io/* and the
// rest of the kubernetes.io and k8s.io namespaces but the kubelet's own),
// so the manager sets them. Nil when there are none.
func NodeLabels(pool *kubefarmv1.NodePool, m *kubefarmv1.Machine) (map[string]string, error) {
	resolved, err := machineconfig.Resolve(pool, m.Spec.Tags)
	if err != nil {
		return nil, err
	}
	var out map[string]string
	for k, v := range resolved.Labels {
		if nodeconfig.KubeletMaySet(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

// OwnedLabels are the label keys fieldOwner holds on node by server-side
// apply, from its managed fields.
func OwnedLabels(node *corev1.Node, fieldOwner string) ([]string, error) {
	var keys []string
	for _, mf := range node.ManagedFields {
		if mf.Manager != fieldOwner || mf.Operation != metav1.ManagedFieldsOperationApply || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Labels map[string]json.RawMessage `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			return nil, fmt.Errorf("reading the managed fields of %s on node %s: %w", fieldOwner, node.Name, err)
		}
		for k := range fields.Metadata.Labels {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// LabelsCurrent: node carries every label of want with its value, and
// the labels the manager owns (owned) are exactly want's, so no apply is
// needed: none to add, change, take over, or give up.
func LabelsCurrent(node *corev1.Node, owned []string, want map[string]string) bool {
	for k, v := range want {
		if have, ok := node.Labels[k]; !ok || have != v {
			return false
		}
	}
	return slices.Equal(owned, slices.Sorted(maps.Keys(want)))
}
