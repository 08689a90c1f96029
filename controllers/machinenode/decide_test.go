package machinenode

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/nodeconfig"
)

const (
	boot1 = "11111111-1111-4111-8111-111111111111"
	boot2 = "22222222-2222-4222-8222-222222222222"
)

func node(bootID string, ready *corev1.NodeCondition, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}
	n.Spec.Taints = taints
	n.Status.NodeInfo.BootID = bootID
	if ready != nil {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, *ready}
	}
	return n
}

func TestNodeReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"no node", nil, metav1.ConditionFalse, kubefarmv1.ReasonNodeNotFound, "the tenant cluster has no node m1"},
		{"ready", node(boot1, &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelet is posting ready status"}),
			metav1.ConditionTrue, kubefarmv1.ReasonNodeReady, "node m1, boot " + boot1 + ": KubeletReady: kubelet is posting ready status"},
		{"not ready", node(boot1, &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			Reason: "KubeletNotReady", Message: "container runtime network not ready"}),
			metav1.ConditionFalse, kubefarmv1.ReasonNodeNotReady, "node m1, boot " + boot1 + ": KubeletNotReady: container runtime network not ready"},
		{"unknown", node(boot1, &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}),
			metav1.ConditionUnknown, kubefarmv1.ReasonNodeStatusUnknown, "node m1, boot " + boot1 + ": NodeStatusUnknown: Kubelet stopped posting node status."},
		{"no Ready yet, no boot ID", node("", nil),
			metav1.ConditionUnknown, kubefarmv1.ReasonNodeStatusUnknown, "node m1: no Ready condition posted yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NodeReadyCondition("m1", tc.node)
			if c.Type != kubefarmv1.ConditionNodeReady || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("got %s=%s %s %q, want %s %s %q", c.Type, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
			}
		})
	}
	long := node(boot1, &corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: string(make([]byte, 5000))})
	if c := NodeReadyCondition("m1", long); len(c.Message) > 1024 {
		t.Errorf("message of %d bytes", len(c.Message))
	}
}

func verified(bootID string, status metav1.ConditionStatus, reason string) kubefarmv1.MachineStatus {
	return kubefarmv1.MachineStatus{
		LastBoot: &kubefarmv1.BootRecord{BootID: bootID, ImageDigest: "sha256:aa"},
		Conditions: []metav1.Condition{{Type: kubefarmv1.ConditionNetworkVerified, Status: status, Reason: reason,
			Message: "boot " + bootID + ": chain ok"}},
	}
}

func TestDecideTaint(t *testing.T) {
	taint := nodeconfig.NetworkUnavailableTaint
	other := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	sameKeyOtherEffect := corev1.Taint{Key: taint.Key, Effect: corev1.TaintEffectNoExecute}
	otherBootMessage := verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified)
	otherBootMessage.Conditions[0].Message = "boot " + boot2 + ": chain ok"
	for _, tc := range []struct {
		name   string
		status kubefarmv1.MachineStatus
		node   *corev1.Node
		want   TaintVerdict
	}{
		{"verified for the node's boot", verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified),
			node(boot1, nil, other, taint), LiftTaint},
		{"no taint", verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified), node(boot1, nil, other), NoTaint},
		{"only the same key with another effect", verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified),
			node(boot1, nil, sameKeyOtherEffect), NoTaint},
		{"verified for an earlier boot", verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified),
			node(boot2, nil, taint), KeepTaint},
		{"condition names another boot than lastBoot", otherBootMessage, node(boot1, nil, taint), KeepTaint},
		{"chain invalid", verified(boot1, metav1.ConditionFalse, kubefarmv1.ReasonCNIChainInvalid), node(boot1, nil, taint), KeepTaint},
		{"not reported", verified(boot1, metav1.ConditionUnknown, kubefarmv1.ReasonNetworkNotReported), node(boot1, nil, taint), KeepTaint},
		{"no condition", kubefarmv1.MachineStatus{LastBoot: &kubefarmv1.BootRecord{BootID: boot1}}, node(boot1, nil, taint), KeepTaint},
		{"no boot reported", kubefarmv1.MachineStatus{}, node(boot1, nil, taint), KeepTaint},
		{"node without boot ID", verified(boot1, metav1.ConditionTrue, kubefarmv1.ReasonCNIChainVerified), node("", nil, taint), KeepTaint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := DecideTaint(tc.status, tc.node)
			if got != tc.want {
				t.Errorf("got %s (%s), want %s", got, why, tc.want)
			}
			if why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestNodeLabels(t *testing.T) {
	pool := &kubefarmv1.NodePool{Spec: kubefarmv1.NodePoolSpec{
		Labels: map[string]string{"farm": "a", "node-role.kubernetes.io/worker": ""},
		Tags: map[string]kubefarmv1.TagSpec{
			"all":  {Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
			"gpu":  {Labels: map[string]string{"node-role.kubernetes.io/gpu": "", "example.com/gpu": "true", "kubernetes.io/role": "gpu"}},
			"edge": {Labels: map[string]string{"node.kubernetes.io/edge": "yes", "farm": "b"}},
		},
	}}
	for _, tc := range []struct {
		name string
		tags []string
		want map[string]string
	}{
		{"pool and all", nil, map[string]string{"node-role.kubernetes.io/worker": ""}},
		{"gpu", []string{"gpu"}, map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": "", "kubernetes.io/role": "gpu"}},
		{"kubelet's own only", []string{"edge"}, map[string]string{"node-role.kubernetes.io/worker": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeLabels(pool, &kubefarmv1.Machine{Spec: kubefarmv1.MachineSpec{Tags: tc.tags}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := NodeLabels(pool, &kubefarmv1.Machine{Spec: kubefarmv1.MachineSpec{Tags: []string{"missing"}}}); err == nil {
		t.Error("an undefined tag resolved")
	}
	none, err := NodeLabels(&kubefarmv1.NodePool{}, &kubefarmv1.Machine{})
	if err != nil || none != nil {
		t.Errorf("a pool without labels: %v, %v", none, err)
	}
}

func TestOwnedLabelsAndLabelsCurrent(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1",
		Labels: map[string]string{"node-role.kubernetes.io/worker": "", "kubernetes.io/hostname": "m1", "old": "x"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:kubernetes.io/hostname":{}}}}`)},
			{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:node-role.kubernetes.io/worker":{},"f:old":{}}}}`)},
			{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:taints":{}}}`)},
		}}}
	owned, err := OwnedLabels(n, FieldOwner)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"node-role.kubernetes.io/worker", "old"}; !reflect.DeepEqual(owned, want) {
		t.Fatalf("owned %v, want %v", owned, want)
	}
	for _, tc := range []struct {
		name    string
		want    map[string]string
		current bool
	}{
		{"exactly what is owned", map[string]string{"node-role.kubernetes.io/worker": "", "old": "x"}, true},
		{"a label to give up", map[string]string{"node-role.kubernetes.io/worker": ""}, false},
		{"a value to change", map[string]string{"node-role.kubernetes.io/worker": "", "old": "y"}, false},
		{"a label to add", map[string]string{"node-role.kubernetes.io/worker": "", "old": "x", "new": ""}, false},
	} {
		if got := LabelsCurrent(n, owned, tc.want); got != tc.current {
			t.Errorf("%s: current %v, want %v", tc.name, got, tc.current)
		}
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m2"}}
	if owned, _ := OwnedLabels(bare, FieldOwner); !LabelsCurrent(bare, owned, nil) {
		t.Error("no labels wanted and none owned is not current")
	}
	bad := n.DeepCopy()
	bad.ManagedFields[1].FieldsV1 = metav1.NewFieldsV1(`{`)
	if _, err := OwnedLabels(bad, FieldOwner); err == nil {
		t.Error("broken managed fields read")
	}
}
