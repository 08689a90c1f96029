package rollout

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/rollout/plan"
)

// TestReadGatesHoldsOnlyWaitingMachines: every machine carries a
// reboot-hold, but only the one that waits to start is held; one in flight
// finishes and one up to date has nothing to hold (neither may show
// RolloutHeld True).
func TestReadGatesHoldsOnlyWaitingMachines(t *testing.T) {
	imgA := v1alpha1.ImageRef{Name: "a", Digest: "sha256:" + strings.Repeat("a", 64)}
	imgB := v1alpha1.ImageRef{Name: "b", Digest: "sha256:" + strings.Repeat("b", 64)}
	machine := func(name string, img v1alpha1.ImageRef, ro *v1alpha1.MachineRollout) plan.Machine {
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{v1alpha1.AnnotationRebootHold: "hands off"}}}
		m.Status.ServedImage = img.DeepCopy()
		m.Status.LastBoot = &v1alpha1.BootRecord{BootID: "boot-" + name, ImageDigest: img.Digest}
		m.Status.Rollout = ro
		return plan.Machine{M: m, Node: &plan.Node{Ready: true, BootID: "boot-" + name}}
	}
	s := &scope{pool: &v1alpha1.NodePool{}, target: imgB, machines: []plan.Machine{
		machine("waiting", imgA, nil),
		machine("in-flight", imgA, &v1alpha1.MachineRollout{Phase: v1alpha1.RolloutDraining, TargetImage: imgB}),
		machine("up-to-date", imgB, nil),
	}}
	if stop, err := (&Reconciler{}).readGates(context.Background(), s); stop || err != nil {
		t.Fatalf("readGates: stop %t, %v", stop, err)
	}
	for _, m := range s.machines {
		if held := m.Hold != nil; held != (m.M.Name == "waiting") {
			t.Errorf("%s: hold %+v", m.M.Name, m.Hold)
		}
	}
}
