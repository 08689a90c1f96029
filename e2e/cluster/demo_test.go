package cluster

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodProblem: only a Completed pod, or a Running one whose containers
// all run and are ready, passes make demo's last check; each way a pod
// shows otherwise in `kubectl get pods` is named.
func TestPodProblem(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := func(reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
	terminated := func(reason string, code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}
	}
	status := func(name string, st corev1.ContainerState, ready bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: st, Ready: ready}
	}
	pod := func(phase corev1.PodPhase, containers ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: containers}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.Name})
		}
		return p
	}
	withInit := func(p *corev1.Pod, init ...corev1.ContainerStatus) *corev1.Pod {
		p.Status.InitContainerStatuses = init
		return p
	}
	now := metav1.Now()
	terminating := pod(corev1.PodRunning, status("c", running, true))
	terminating.DeletionTimestamp = &now
	unscheduled := pod(corev1.PodPending)
	unscheduled.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	evicted := pod(corev1.PodFailed)
	evicted.Status.Reason = "Evicted"
	noStatusYet := pod(corev1.PodRunning)
	noStatusYet.Spec.Containers = []corev1.Container{{Name: "c"}}

	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // "" passes; otherwise a substring of the problem
	}{
		{"running and ready", pod(corev1.PodRunning, status("a", running, true), status("b", running, true)), ""},
		{"completed", pod(corev1.PodSucceeded, status("job", terminated("Completed", 0), false)), ""},
		{"running with finished init containers", withInit(pod(corev1.PodRunning, status("c", running, true)),
			status("init", terminated("Completed", 0), false)), ""},
		{"a running sidecar (restartable init container) is fine", withInit(pod(corev1.PodRunning, status("c", running, true)),
			status("sidecar", running, true)), ""},
		{"image pull back-off, still Pending", pod(corev1.PodPending, status("coredns", waiting("ImagePullBackOff", `Back-off pulling image "registry.k8s.io/coredns/coredns:v1.12.1"`+"\nmore"), false)),
			`container coredns waiting: ImagePullBackOff (Back-off pulling image "registry.k8s.io/coredns/coredns:v1.12.1")`},
		{"crash loop in phase Running", pod(corev1.PodRunning, status("a", running, true), status("b", waiting("CrashLoopBackOff", ""), false)),
			"container b waiting: CrashLoopBackOff"},
		{"running but never ready", pod(corev1.PodRunning, status("coredns", running, false)), "container coredns running but not ready"},
		{"a main container exited in a Running pod", pod(corev1.PodRunning, status("a", running, true), status("b", terminated("Error", 1), false)),
			"container b terminated: Error (exit code 1)"},
		{"failed", pod(corev1.PodFailed, status("c", terminated("Error", 2), false)), "container c terminated: Error (exit code 2)"},
		{"evicted", evicted, "Evicted"},
		{"unschedulable", unscheduled, "not scheduled: Unschedulable"},
		{"pending with no reason", pod(corev1.PodPending), "not running"},
		{"unknown phase", pod(corev1.PodUnknown), "not running"},
		{"init container crash-looping", withInit(pod(corev1.PodPending, status("c", waiting("PodInitializing", ""), false)),
			status("init", waiting("CrashLoopBackOff", ""), false)), "container init waiting: CrashLoopBackOff"},
		{"terminating", terminating, "terminating"},
		{"running without container statuses yet", noStatusYet, "container statuses not reported yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PodProblem(tc.pod)
			if tc.want == "" && got != "" {
				t.Fatalf("PodProblem = %q, want none", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("PodProblem = %q, want it to say %q", got, tc.want)
			}
		})
	}
}

// TestUnsettledPods: the demo prints each offending pod as
// namespace/name, phase and why, sorted, and nothing for settled ones.
func TestUnsettledPods(t *testing.T) {
	mk := func(ns, name string, phase corev1.PodPhase, st corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: st.Name}}},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{st}}}
	}
	ok := corev1.ContainerStatus{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	pull := corev1.ContainerStatus{Name: "coredns", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}
	crash := corev1.ContainerStatus{Name: "flannel", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	list := &corev1.PodList{Items: []corev1.Pod{
		mk("kube-system", "kube-proxy-a", corev1.PodRunning, ok),
		mk("kube-system", "coredns-2", corev1.PodPending, pull),
		mk("default", "web", corev1.PodRunning, ok),
		mk("kube-flannel", "flannel-x", corev1.PodRunning, crash),
		mk("kube-system", "coredns-1", corev1.PodPending, pull),
	}}
	want := []string{
		"kube-flannel/flannel-x: Running: container flannel waiting: CrashLoopBackOff",
		"kube-system/coredns-1: Pending: container coredns waiting: ImagePullBackOff",
		"kube-system/coredns-2: Pending: container coredns waiting: ImagePullBackOff",
	}
	if got := UnsettledPods(list); !slices.Equal(got, want) {
		t.Errorf("UnsettledPods =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if got := UnsettledPods(&corev1.PodList{Items: list.Items[:1]}); len(got) != 0 {
		t.Errorf("UnsettledPods of a settled list = %q, want none", got)
	}
}
