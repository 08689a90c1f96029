package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podsSettleTimeout bounds how long the demo's last check waits for the
// tenant's pods to settle (a CoreDNS replica scheduled onto a node that
// just joined still has to pull its image and pass its readiness probe).
const podsSettleTimeout = 5 * time.Minute

// CheckPodsSettled waits up to timeout for every pod in every namespace of
// the tenant to be Running with its containers ready, or Succeeded, and
// otherwise fails naming each pod that is not (namespace/name, phase, why).
func CheckPodsSettled(ctx context.Context, cs kubernetes.Interface, timeout time.Duration, say func(string, ...any)) error {
	var bad []string
	var listErr error
	var total int
	err := poll(ctx, "every tenant pod Running or Completed", timeout, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			listErr = err
			return false, nil
		}
		listErr, total, bad = nil, len(list.Items), UnsettledPods(list)
		return len(bad) == 0, nil
	})
	if err != nil {
		if listErr != nil {
			return fmt.Errorf("%w (last list: %v)", err, listErr)
		}
		return fmt.Errorf("%w; %d of %d pods are not:\n  %s", err, len(bad), total, strings.Join(bad, "\n  "))
	}
	say("    %d pods, all Running and ready or Completed", total)
	return nil
}

// UnsettledPods are the pods of list that PodProblem finds fault with,
// one line each, "namespace/name: phase: why", sorted.
func UnsettledPods(list *corev1.PodList) []string {
	var out []string
	for i := range list.Items {
		p := &list.Items[i]
		if why := PodProblem(p); why != "" {
			out = append(out, fmt.Sprintf("%s/%s: %s: %s", p.Namespace, p.Name, p.Status.Phase, why))
		}
	}
	slices.Sort(out)
	return out
}

// PodProblem says why a pod is neither Completed (Succeeded) nor Running
// with every container running and ready, or "" when it is one of those.
// It reads the container states as kubectl's STATUS column does, because
// the phase alone hides the usual failures: a pod whose container crash-
// loops or whose image cannot be pulled after a restart is still in phase
// Running, and kubectl shows CrashLoopBackOff or ImagePullBackOff. A
// running container must also be ready: a CoreDNS that never passes its
// readiness probe answers no query.
func PodProblem(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return ""
	case corev1.PodRunning:
	default:
		// Pending (unscheduled, pulling, init containers), Failed or
		// Unknown: the most telling reason there is.
		if why := containerProblems(p.Status.InitContainerStatuses, false); why != "" {
			return why
		}
		if why := containerProblems(p.Status.ContainerStatuses, true); why != "" {
			return why
		}
		if p.Status.Reason != "" {
			return p.Status.Reason
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				return "not scheduled: " + c.Reason
			}
		}
		return "not running"
	}
	// Running: init containers finished (a restartable sidecar among them
	// may still crash-loop), and every container is up and ready.
	if why := containerProblems(p.Status.InitContainerStatuses, false); why != "" {
		return why
	}
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return "container statuses not reported yet"
	}
	return containerProblems(p.Status.ContainerStatuses, true)
}

// containerProblems names the first container of statuses that is waiting
// with a reason (ImagePullBackOff, CrashLoopBackOff, ...), and, for a pod's
// main containers (main), one that terminated or runs unready. An init
// container that terminated is done, whatever kubectl would show.
func containerProblems(statuses []corev1.ContainerStatus, main bool) string {
	for _, s := range statuses {
		switch {
		case s.State.Waiting != nil:
			why := "container " + s.Name + " waiting"
			if s.State.Waiting.Reason != "" {
				why += ": " + s.State.Waiting.Reason
			}
			if m := s.State.Waiting.Message; m != "" {
				why += " (" + firstLine(m) + ")"
			}
			return why
		case !main:
		case s.State.Terminated != nil:
			return fmt.Sprintf("container %s terminated: %s (exit code %d)", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		case s.State.Running == nil:
			return "container " + s.Name + " not started"
		case !s.Ready:
			return "container " + s.Name + " running but not ready"
		}
	}
	return ""
}

// firstLine is s up to its first newline, at most 200 bytes: a kubelet
// message can carry a whole pull error.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
