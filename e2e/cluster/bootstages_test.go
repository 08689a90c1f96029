package cluster

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBootStages(t *testing.T) {
	on := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return on.Add(time.Duration(s * float64(time.Second))) }
	events := []BootEvent{
		{at(-15), "ServedImageSet", "first boot will serve BootImage x"},
		{at(1.6), "Offered", "offered"},
		{at(2.6), "Acked", "acked"},
		{at(2.7), "Acked", "acked again (iPXE)"},
		{at(2.8), "ScriptServed", "served the iPXE script"},
		{at(3.5), "ImageServed", "served the kernel sha256:k"},
		{at(3.6), "ImageServed", "served the initrd sha256:i"},
		{at(30.5), "ImageServed", "served the root filesystem sha256:r"},
		{at(52.5), "ConfigServed", "served the boot configuration"},
		{at(63.5), "KubefarmJoinTokenVerified", "approved"},
		{at(80.5), "BootReported", "booted"},
		{at(81.5), "NetworkTaintLifted", "lifted"},
		{at(215), "ScriptServed", "a later boot's script"},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(at(66))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(at(70))},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(90.5))},
		}}}
	got := BootStages(events, node, on)
	want := []struct {
		prefix       string
		seconds, was float64
	}{
		{"DHCP", 2.6, 2.6}, {"iPXE script", 2.8, 0.2}, {"kernel and initrd", 3.6, 0.8}, {"root filesystem", 30.5, 26.9},
		{"configuration fetched", 52.5, 22}, {"kubelet client certificate", 63.5, 11}, {"Node registered", 66, 2.5},
		{"boot reported", 80.5, 14.5}, {"network taint lifted", 81.5, 1}, {"Node Ready", 90.5, 9},
	}
	if len(got) != len(want) {
		t.Fatalf("%d stages, want %d:\n%s", len(got), len(want), StageTable(got))
	}
	for i, w := range want {
		g := got[i]
		if !strings.HasPrefix(g.Stage, w.prefix) || !near(g.Seconds, w.seconds) || !near(g.Since, w.was) {
			t.Errorf("stage %d = %+v, want %s at %.1f after %.1f", i, g, w.prefix, w.seconds, w.was)
		}
	}
	if tbl := StageTable(got); !strings.Contains(tbl, "Node Ready") || strings.Count(tbl, "\n") != len(want)+1 {
		t.Errorf("table:\n%s", tbl)
	}
	// A boot without a Node yet, nor the late Events: only what happened.
	if early := BootStages(events[:5], nil, on); len(early) != 2 {
		t.Errorf("early stages %+v, want DHCP and the script", early)
	}
}

func near(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }
