package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// blockingSelector is the gate the gate tests set: kured's usual example.
var blockingSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubefarm.io/test-blocks-reboot": "true"}}

// runPod puts a Running pod on node (labelled to block a reboot when
// blocking) and returns it.
func (f *fixture) runPod(ctx context.Context, name, node string, blocking bool) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "job", Image: "job"}}},
	}
	if blocking {
		p.Labels = blockingSelector.MatchLabels
	}
	if err := env.Client.Create(ctx, p); err != nil {
		f.t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if err := env.Client.Status().Update(ctx, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// held is the machine's RolloutHeld condition (nil: none).
func (f *fixture) held(machine string) *metav1.Condition {
	return meta.FindStatusCondition(f.machine(machine).Status.Conditions, v1alpha1.ConditionRolloutHeld)
}

// heldFor tells that the machine's RolloutHeld is True for reason with a
// message containing text.
func (f *fixture) heldFor(machine, reason, text string) bool {
	c := f.held(machine)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, text)
}

// annotateNode sets (value non-nil) or removes the reboot-hold annotation
// of a Node, as a tenant admin would.
func (f *fixture) annotateNode(name string, value *string) {
	f.t.Helper()
	n := f.node(name)
	orig := n.DeepCopy()
	if value == nil {
		delete(n.Annotations, v1alpha1.AnnotationRebootHold)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[v1alpha1.AnnotationRebootHold] = *value
	}
	if err := env.Client.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
		f.t.Fatal(err)
	}
}

// TestRolloutBlockingPods: with spec.rollout.blockingPodSelector, a
// machine whose node runs a matching pod is held before its cordon (the
// machines behind it go on), including a pod that appears while another
// machine updates; the pool's Progressing names the held machines; a pod
// that is not matched, or that ended, holds nothing; the machine starts
// once its pods are gone. A tenant's reboot-hold annotation on a Node
// holds its machine the same way until it is removed.
func TestRolloutBlockingPods(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 3, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute}, BlockingPodSelector: blockingSelector})
	job := f.runPod(ctx, "batch-job", "m00", true)
	f.runPod(ctx, "web-unmatched", "m01", false)
	done := f.runPod(ctx, "finished-job", "m01", true)
	done.Status.Phase = corev1.PodSucceeded
	if err := env.Client.Status().Update(ctx, done); err != nil {
		t.Fatal(err)
	}
	// While m01 updates, a matching pod lands on m02: it must be held too
	// when its turn comes.
	f.setHook(func(ctx context.Context, m *v1alpha1.Machine) {
		if m.Name == "workers-m01" && m.Status.Rollout != nil && m.Status.Rollout.Phase == v1alpha1.RolloutCordoning {
			f.setHook(nil)
			// Not runPod: t.Fatal belongs to the test's goroutine, and this
			// is the controller's.
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "late-job", Labels: blockingSelector.MatchLabels},
				Spec: corev1.PodSpec{NodeName: "m02", Containers: []corev1.Container{{Name: "job", Image: "job"}}}}
			if err := env.Client.Create(ctx, p); err != nil {
				t.Errorf("creating the late blocking pod: %v", err)
			}
		}
	})
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })

	f.eventually("m01 is updated while m00 and m02 are held by their pods", func() (bool, error) {
		return doneOn(f.machine("workers-m01"), f.imgB) == 1 &&
			f.heldFor("workers-m00", v1alpha1.ReasonBlockingPods, f.ns+"/batch-job") &&
			f.heldFor("workers-m02", v1alpha1.ReasonBlockingPods, f.ns+"/late-job") &&
			f.poolProgressingReason() == v1alpha1.ReasonRolloutHeld, nil
	})
	for _, name := range []string{"workers-m00", "workers-m02"} {
		if m := f.machine(name); m.Status.Rollout != nil || doneOn(m, f.imgB) != 0 {
			t.Errorf("%s started although a blocking pod runs on its node: %+v", name, m.Status.Rollout)
		}
	}
	if c := meta.FindStatusCondition(f.getPool().Status.Conditions, v1alpha1.ConditionProgressing); !strings.Contains(c.Message, "workers-m00 (BlockingPods)") {
		t.Errorf("the pool's Progressing does not name the held machine: %q", c.Message)
	}
	f.waitEvent("workers-m00", "RolloutHeld")

	// The tenant holds m02 by its Node as well; its pod's end leaves the
	// annotation holding it.
	f.annotateNode("m02", ptr.To("payroll run until Friday"))
	if err := env.Client.Delete(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(f.ns), client.MatchingLabels{"kubefarm.io/test-blocks-reboot": "true"}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	f.eventually("m00 is updated and released; m02 is held by its Node's annotation", func() (bool, error) {
		c := f.held("workers-m00")
		return doneOn(f.machine("workers-m00"), f.imgB) == 1 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonNotHeld &&
			f.heldFor("workers-m02", v1alpha1.ReasonRebootHold, `"payroll run until Friday"`), nil
	})
	if m := f.machine("workers-m02"); m.Status.Rollout != nil {
		t.Errorf("m02 started while its Node carries %s: %+v", v1alpha1.AnnotationRebootHold, m.Status.Rollout)
	}

	f.annotateNode("m02", nil)
	f.eventually("the rollout completes once the annotation is gone", func() (bool, error) { return f.complete(f.imgB), nil })
	if c := f.held("workers-m02"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("m02's RolloutHeld after its release: %+v", c)
	}
	if c := f.held("workers-m01"); c != nil {
		t.Errorf("m01, never held, got a RolloutHeld condition: %+v", c)
	}
}

// TestRolloutMachineRebootHold: the operator's annotation on a Machine
// holds it even without a pod selector; the others roll.
func TestRolloutMachineRebootHold(t *testing.T) {
	f := newFixture(t, 2, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute}})
	setHold := func(value *string) {
		m := f.machine("workers-m00")
		orig := m.DeepCopy()
		if value == nil {
			delete(m.Annotations, v1alpha1.AnnotationRebootHold)
		} else {
			m.Annotations = map[string]string{v1alpha1.AnnotationRebootHold: *value}
		}
		if err := env.Client.Patch(context.Background(), m, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	setHold(ptr.To("disk replacement"))
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("m01 is updated, m00 held by its annotation", func() (bool, error) {
		return doneOn(f.machine("workers-m01"), f.imgB) == 1 &&
			f.heldFor("workers-m00", v1alpha1.ReasonRebootHold, "on the Machine") &&
			f.poolProgressingReason() == v1alpha1.ReasonRolloutHeld, nil
	})
	setHold(nil)
	f.eventually("the rollout completes", func() (bool, error) { return f.complete(f.imgB), nil })
}

// TestRolloutBlockingPodsFailClosed: when the tenant's pods cannot be
// listed, the gate holds every waiting machine instead of letting them
// reboot, and says why.
func TestRolloutBlockingPodsFailClosed(t *testing.T) {
	f := newFixture(t, 2, v1alpha1.RolloutStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MinReadySeconds: ptr.To[int32](1),
		BootTimeout: &metav1.Duration{Duration: time.Minute}, BlockingPodSelector: blockingSelector}, withUnreachablePods())
	f.patchPool(func(p *v1alpha1.NodePool) { p.Spec.BootImage = f.imgB.Name })
	f.eventually("both machines are held, the pool says so", func() (bool, error) {
		return f.heldFor("workers-m00", v1alpha1.ReasonBlockingPodsUnknown, "could not be listed") &&
			f.heldFor("workers-m01", v1alpha1.ReasonBlockingPodsUnknown, "could not be listed") &&
			f.poolProgressingReason() == v1alpha1.ReasonRolloutHeld, nil
	})
	for _, m := range f.machines() {
		if m.Status.Rollout != nil {
			t.Errorf("%s started although its blocking pods are unknown: %+v", m.Name, m.Status.Rollout)
		}
	}
}

// withUnreachablePods gives the rollout a tenant client whose every request
// fails (a closed loopback port): the Nodes still come from the informer.
func withUnreachablePods() fixtureOption {
	return func(f *fixture) { f.tenantUnreachable = true }
}
