package machinestate

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

var (
	imgA = v1alpha1.ImageRef{Name: "a", Digest: "sha256:" + strings.Repeat("a", 64)}
	imgB = v1alpha1.ImageRef{Name: "b", Digest: "sha256:" + strings.Repeat("b", 64)}
)

// booted is a machine served img that last booted it as boot "b1".
func booted(img v1alpha1.ImageRef, edits ...func(*v1alpha1.Machine)) *v1alpha1.Machine {
	m := &v1alpha1.Machine{Status: v1alpha1.MachineStatus{
		ServedImage: img.DeepCopy(),
		LastBoot:    &v1alpha1.BootRecord{BootID: "b1", ImageDigest: img.Digest},
	}}
	for _, e := range edits {
		e(m)
	}
	return m
}

func cond(typ string, s metav1.ConditionStatus, msg string) func(*v1alpha1.Machine) {
	return func(m *v1alpha1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: "R", Message: msg})
	}
}

func phase(p v1alpha1.RolloutPhase) func(*v1alpha1.Machine) {
	return func(m *v1alpha1.Machine) {
		m.Status.Rollout = &v1alpha1.MachineRollout{Phase: p, TargetImage: imgB}
	}
}

func noBoot(m *v1alpha1.Machine)   { m.Status.LastBoot = nil }
func noServed(m *v1alpha1.Machine) { m.Status.ServedImage = nil }

func TestUpToDate(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *v1alpha1.Machine
		want bool
	}{
		{"served and booted the target", booted(imgB), true},
		{"served the target, booted the old image", booted(imgB, func(m *v1alpha1.Machine) { m.Status.LastBoot.ImageDigest = imgA.Digest }), false},
		{"booted the target, served another image", booted(imgB, func(m *v1alpha1.Machine) { m.Status.ServedImage = imgA.DeepCopy() }), false},
		{"served the target's name with another digest", booted(imgB, func(m *v1alpha1.Machine) { m.Status.ServedImage.Digest = imgA.Digest }), false},
		{"no served image yet", booted(imgB, noServed), false},
		{"never booted", booted(imgB, noBoot), false},
		{"RebootRequired True for this boot", booted(imgB, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b1: login")), false},
		{"RebootRequired True for an earlier boot", booted(imgB, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b0: login")), true},
		{"RebootRequired False", booted(imgB, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionFalse, "boot b1")), true},
		{"update in flight (Verifying)", booted(imgB, phase(v1alpha1.RolloutVerifying)), false},
		{"update in flight (Uncordoning)", booted(imgB, phase(v1alpha1.RolloutUncordoning)), false},
		{"update done", booted(imgB, phase(v1alpha1.RolloutDone)), true},
		{"old update failed, then booted the target", booted(imgB, phase(v1alpha1.RolloutFailed)), true},
	} {
		if got := UpToDate(tc.m, imgB); got != tc.want {
			t.Errorf("%s: UpToDate %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInFlight(t *testing.T) {
	for _, tc := range []struct {
		phase v1alpha1.RolloutPhase
		want  bool
	}{
		{v1alpha1.RolloutCordoning, true}, {v1alpha1.RolloutDraining, true}, {v1alpha1.RolloutRebooting, true},
		{v1alpha1.RolloutVerifying, true}, {v1alpha1.RolloutUncordoning, true},
		{v1alpha1.RolloutFailed, false}, {v1alpha1.RolloutDone, false}, {v1alpha1.RolloutSkipped, false},
	} {
		if got := InFlight(booted(imgA, phase(tc.phase))); got != tc.want {
			t.Errorf("phase %s: InFlight %v, want %v", tc.phase, got, tc.want)
		}
	}
	if InFlight(booted(imgA)) {
		t.Error("no rollout record: in flight")
	}
}

func TestRebootRequested(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *v1alpha1.Machine
		want bool
	}{
		{"no condition", booted(imgA), false},
		{"True for this boot", booted(imgA, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b1: login 4h ago")), true},
		{"True for this boot, no detail", booted(imgA, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b1")), true},
		{"True for another boot", booted(imgA, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b10: login")), false},
		{"False for this boot", booted(imgA, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionFalse, "boot b1")), false},
		{"True, never booted", booted(imgA, noBoot, cond(v1alpha1.ConditionRebootRequired, metav1.ConditionTrue, "boot b1")), false},
	} {
		if got := RebootRequested(tc.m); got != tc.want {
			t.Errorf("%s: RebootRequested %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestVerified(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *v1alpha1.Machine
		want bool
	}{
		{"no condition", booted(imgA), false},
		{"True for this boot", booted(imgA, cond(v1alpha1.ConditionNetworkVerified, metav1.ConditionTrue, "boot b1")), true},
		{"True for an earlier boot", booted(imgA, cond(v1alpha1.ConditionNetworkVerified, metav1.ConditionTrue, "boot b0")), false},
		{"False for this boot", booted(imgA, cond(v1alpha1.ConditionNetworkVerified, metav1.ConditionFalse, "boot b1: missing plugin")), false},
		{"Unknown for this boot", booted(imgA, cond(v1alpha1.ConditionNetworkVerified, metav1.ConditionUnknown, "boot b1")), false},
		{"True, no boot reported", booted(imgA, noBoot, cond(v1alpha1.ConditionNetworkVerified, metav1.ConditionTrue, "boot b1")), false},
	} {
		if got := Verified(tc.m); got != tc.want {
			t.Errorf("%s: Verified %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestServedAndBooted(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		m                            *v1alpha1.Machine
		firstServe, servedB, bootedB bool
		unbooted                     bool
	}{
		{"new machine", booted(imgB, noServed, noBoot), true, false, false, true},
		{"pinned, first boot pending", booted(imgB, noBoot), false, true, false, true},
		{"pinned and booted", booted(imgB), false, true, true, false},
		{"flipped to b, still on a", booted(imgA, func(m *v1alpha1.Machine) { m.Status.ServedImage = imgB.DeepCopy() }), false, true, false, false},
		{"never booted, update in flight", booted(imgB, noBoot, phase(v1alpha1.RolloutRebooting)), false, true, false, false},
	} {
		if got := NeedsFirstServe(tc.m); got != tc.firstServe {
			t.Errorf("%s: NeedsFirstServe %v, want %v", tc.name, got, tc.firstServe)
		}
		if got := ServedIs(tc.m, imgB); got != tc.servedB {
			t.Errorf("%s: ServedIs(b) %v, want %v", tc.name, got, tc.servedB)
		}
		if got := Booted(tc.m, imgB.Digest); got != tc.bootedB {
			t.Errorf("%s: Booted(b) %v, want %v", tc.name, got, tc.bootedB)
		}
		if got := Unbooted(tc.m); got != tc.unbooted {
			t.Errorf("%s: Unbooted %v, want %v", tc.name, got, tc.unbooted)
		}
		if got, want := Served(tc.m), tc.m.Status.ServedImage; got != want {
			t.Errorf("%s: Served %v, want %v", tc.name, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	img := &v1alpha1.BootImage{
		ObjectMeta: metav1.ObjectMeta{Name: "node-2026-01"},
		Spec: v1alpha1.BootImageSpec{
			Kernel: v1alpha1.Artifact{Digest: "sha256:" + strings.Repeat("1", 64)},
			Initrd: v1alpha1.Artifact{Digest: "sha256:" + strings.Repeat("2", 64)},
			Rootfs: v1alpha1.Artifact{Digest: "sha256:" + strings.Repeat("3", 64)},
		},
	}
	// The rootfs digest pins the target, not the kernel or the initrd.
	got := Target(img)
	want := &v1alpha1.ImageRef{Name: "node-2026-01", Digest: "sha256:" + strings.Repeat("3", 64)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Target = %+v, want %+v", got, want)
	}
	if Target(nil) != nil {
		t.Fatal("Target(nil) is not nil")
	}
}
