// Package drain empties one Kubernetes node of its pods the way
// `kubectl drain --ignore-daemonsets` does, but one pass at a time: the
// rollout controller calls Step once per reconcile, Step posts the
// evictions that are due and reports how far the drain has got, and returns
// without waiting for any pod to go.
//
// Non-blocking, because a drain lasts as long as the slowest grace period
// and the slowest PodDisruptionBudget, and nothing of it may live only in
// the manager's memory: the drain's state is the pods themselves (which are
// still bound to the node, which of them are terminating), so a manager
// that crashes or restarts mid-drain loses nothing, and the next Step, from
// whichever replica, continues where the last one stopped.
//
// PodDisruptionBudgets are never bypassed: Step evicts only through the
// Eviction API (the pods/eviction subresource, policy/v1) and never deletes
// a pod. The API server's eviction handler checks the budgets and refuses,
// with 429 TooManyRequests, an eviction that would break one; Step reports
// that refusal as Blocked, with the server's words (which name the budget),
// and asks again on the next pass. Nothing here reads a budget or second-
// guesses one.
//
// Step has no timeout and no clock: the caller owns that policy
// (spec.rollout.drainTimeout and drainTimeoutPolicy). It records when the
// drain began and decides when a drain that keeps reporting Blocked or
// Terminating pods has lasted too long.
//
// Where this differs from kubectl drain:
//   - Step does not cordon. The caller cordons the node first (the rollout's
//     Cordoning phase); draining a schedulable node lets evicted pods come
//     back to it.
//   - Pods with no controller and pods with emptyDir volumes are evicted
//     without being asked to (kubectl refuses them unless given --force and
//     --delete-emptydir-data). The nodes are netbooted and the drain comes
//     before a reboot: whatever a pod kept on the node is lost by the reboot
//     anyway, and an unmanaged pod would not survive it either. Eviction
//     still honours their budgets.
//   - A DaemonSet pod is recognised by its controller reference alone
//     (kubectl also reads the DaemonSet and, without --force, refuses to go
//     on if it is missing), so Classify needs no server.
//   - A pod already terminating is waited for, not evicted again.
//   - Step never waits for deletions; the next pass sees what is left.
package drain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Why a pod is left on the node (Ignored.Reason).
const (
	// IgnoredDaemonSet: the pod's controller is a DaemonSet (group apps).
	// The DaemonSet controller would recreate it on the node at once (its
	// pods tolerate unschedulable), so evicting it achieves nothing; it goes
	// with the reboot, as with kubectl drain --ignore-daemonsets.
	IgnoredDaemonSet = "DaemonSet"
	// IgnoredMirror: the pod is the API server's mirror of a static pod
	// (annotation kubernetes.io/config.mirror). Evicting or deleting it only
	// removes the mirror, which the kubelet recreates; the static pod itself
	// keeps running until the reboot ends it.
	IgnoredMirror = "mirror pod"
)

// Plan is what a drain does with each pod on the node. Each list is in
// namespace/name order.
type Plan struct {
	// Evict are the pods to evict.
	Evict []types.NamespacedName
	// Wait are the pods already terminating (deletionTimestamp set): the
	// drain waits for them to go and does not evict them again.
	Wait []types.NamespacedName
	// Ignored are the pods the drain leaves on the node; they do not keep
	// it from finishing.
	Ignored []Ignored
}

// Ignored is a pod the drain leaves alone, and why (IgnoredDaemonSet or
// IgnoredMirror).
type Ignored struct {
	Pod    types.NamespacedName
	Reason string
}

// Classify decides, from the pods alone, what a drain does with each of the
// pods on a node:
//   - mirror pods are ignored (IgnoredMirror);
//   - pods whose controller is a DaemonSet of group apps are ignored
//     (IgnoredDaemonSet), even while terminating;
//   - pods already terminating are waited for;
//   - every other pod is evicted: pods of any controller or of none, pods
//     with emptyDir volumes (see the package comment), and pods in phase
//     Succeeded or Failed too (no budget counts them, the API server
//     deletes them on eviction without consulting one, and kubectl drain
//     deletes them as well).
//
// The input's order does not matter.
func Classify(pods []corev1.Pod) Plan {
	sorted := make([]*corev1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	slices.SortFunc(sorted, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var plan Plan
	for _, pod := range sorted {
		ref := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		switch {
		case isMirror(pod):
			plan.Ignored = append(plan.Ignored, Ignored{Pod: ref, Reason: IgnoredMirror})
		case isDaemonSetPod(pod):
			plan.Ignored = append(plan.Ignored, Ignored{Pod: ref, Reason: IgnoredDaemonSet})
		case pod.DeletionTimestamp != nil:
			plan.Wait = append(plan.Wait, ref)
		default:
			plan.Evict = append(plan.Evict, ref)
		}
	}
	return plan
}

func isMirror(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

func isDaemonSetPod(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "DaemonSet" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == "apps"
}

// Result is what one pass of the drain found and did. Pods are named
// namespace/name, in that order.
type Result struct {
	// Remaining counts the pods that still keep the drain from finishing:
	// those to evict (including the ones evicted, blocked or deferred in
	// this pass: they are still on the node) and those terminating. Pods
	// the eviction found already gone do not count. 0 means the node is
	// drained: only ignored pods (DaemonSet and mirror pods) are left.
	Remaining int
	// Evicted are the pods whose eviction the API server accepted in this
	// pass; they are terminating now.
	Evicted []string
	// Blocked are the pods whose eviction the API server refused in this
	// pass: most often 429 because of a PodDisruptionBudget. The next pass
	// asks again.
	Blocked []Blocked
	// Terminating are the pods that were already terminating when the pass
	// listed them: the drain waits for them.
	Terminating []string
	// Deferred counts the pods to evict that this pass left for the next
	// because of the per-pass bound on evictions (MaxEvictionsPerStep).
	Deferred int
}

// Blocked is an eviction the API server refused.
type Blocked struct {
	// Pod is namespace/name.
	Pod string
	// Code is the HTTP status of the refusal: 429 TooManyRequests when a
	// PodDisruptionBudget does not allow the disruption now (or its status
	// is not up to date yet), or when the API server sheds load; anything
	// else (403, 409, 500, ...) is some other refusal.
	Code int32
	// DisruptionBudget tells that a PodDisruptionBudget refused it (the
	// server gave a cause of type DisruptionBudget).
	DisruptionBudget bool
	// Reason is the API server's message, with the causes it gave; for a
	// budget, they name it, as in "Cannot evict pod as it would violate the
	// pod's disruption budget. The disruption budget web needs 2 healthy
	// pods and has 2 currently".
	Reason string
}

const (
	// MaxEvictionsPerStep bounds the evictions one pass posts (sequentially:
	// each is a few API round trips on the server, budget checks included),
	// so that a reconcile stays short however many pods the node runs. The
	// pods beyond it, in namespace/name order, are left for the next pass
	// (Result.Deferred). Pods whose eviction is refused count toward the
	// bound too, so on a node with more than this many pods blocked at once
	// the pods after them wait until some of those go.
	MaxEvictionsPerStep = 64
	// listPageSize bounds each page of the list of the node's pods; the
	// list follows the continue token to the end.
	listPageSize = 500
)

type limits struct {
	pageSize     int64
	maxEvictions int
}

// Step runs one pass of the drain of node: it lists the pods bound to the
// node, classifies them (Classify), posts one eviction for each pod to
// evict (at most MaxEvictionsPerStep), each with no DeleteOptions so that
// the pod's own termination grace period applies, and reports.
//
// An eviction refused by the API server is reported in Result.Blocked, not
// as an error; 404 means the pod is already gone, which is not an error
// either. A refusal that says to retry later (429 with Retry-After) is
// not waited out: it is Blocked, and the next pass asks again. An error
// that is not about one pod (the list failed, ctx ended, the server could
// not be reached) is returned, with the Result of what the pass had done
// before it.
//
// The caller's identity needs list on pods in every namespace and create
// on pods/eviction.
func Step(ctx context.Context, cs kubernetes.Interface, node string) (Result, error) {
	return step(ctx, cs, node, limits{pageSize: listPageSize, maxEvictions: MaxEvictionsPerStep})
}

func step(ctx context.Context, cs kubernetes.Interface, node string, lim limits) (Result, error) {
	var res Result
	if node == "" {
		// spec.nodeName= selects every pod not scheduled yet, cluster-wide.
		return res, errors.New("drain: no node name given")
	}
	pods, err := listPods(ctx, cs, node, lim.pageSize)
	if err != nil {
		return res, fmt.Errorf("listing the pods on node %s: %w", node, err)
	}
	plan := Classify(pods)
	res.Remaining = len(plan.Evict) + len(plan.Wait)
	for _, p := range plan.Wait {
		res.Terminating = append(res.Terminating, p.String())
	}
	toEvict := plan.Evict
	if len(toEvict) > lim.maxEvictions {
		res.Deferred = len(toEvict) - lim.maxEvictions
		toEvict = toEvict[:lim.maxEvictions]
	}
	evict := evictor(cs)
	for _, p := range toEvict {
		err := evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
			// nil: the pod's own grace period, no preconditions.
			DeleteOptions: nil,
		})
		var status apierrors.APIStatus
		switch {
		case err == nil:
			res.Evicted = append(res.Evicted, p.String())
		case ctx.Err() != nil:
			return res, fmt.Errorf("evicting pod %s: %w", p, err)
		case apierrors.IsNotFound(err):
			res.Remaining--
		case errors.As(err, &status):
			res.Blocked = append(res.Blocked, blocked(p.String(), err, status.Status()))
		default:
			// No answer from the server: not about this pod.
			return res, fmt.Errorf("evicting pod %s: %w", p, err)
		}
	}
	return res, nil
}

// listPods lists the pods bound to node, in pages.
func listPods(ctx context.Context, cs kubernetes.Interface, node string, pageSize int64) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		Limit:         pageSize,
	}
	var pods []corev1.Pod
	for {
		list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		pods = append(pods, list.Items...)
		if list.Continue == "" {
			return pods, nil
		}
		opts.Continue = list.Continue
	}
}

// evictor is how Step posts an eviction: the request of client-go's
// Evictions(ns).Evict, sent with client-go's retries off. While a budget's
// status is behind its spec (observedGeneration < generation, "still being
// processed by the server"), the API server refuses the eviction with 429
// and Retry-After: 10, and client-go's request would silently sleep and
// retry that up to ten times, holding Step for well over a minute; without
// the retry the refusal is reported in Blocked at once and the next pass
// asks again. A clientset with no REST client (client-go's fake) is called
// through Evict, which sends the same request.
func evictor(cs kubernetes.Interface) func(context.Context, *policyv1.Eviction) error {
	rc := cs.PolicyV1().RESTClient()
	if c, ok := rc.(*rest.RESTClient); rc == nil || (ok && c == nil) {
		return func(ctx context.Context, ev *policyv1.Eviction) error {
			return cs.PolicyV1().Evictions(ev.Namespace).Evict(ctx, ev)
		}
	}
	return func(ctx context.Context, ev *policyv1.Eviction) error {
		return rc.Post().
			AbsPath("/api/v1").
			Namespace(ev.Namespace).
			Resource("pods").
			Name(ev.Name).
			SubResource("eviction").
			MaxRetries(0).
			Body(ev).
			Do(ctx).
			Error()
	}
}

// blocked describes a refused eviction: the API server's message followed
// by the causes it gave (a budget's refusal names the budget only there).
func blocked(pod string, err error, status metav1.Status) Blocked {
	b := Blocked{Pod: pod, Code: status.Code}
	msg := status.Message
	if msg == "" {
		msg = err.Error()
	}
	parts := []string{msg}
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				b.DisruptionBudget = true
			}
			if c.Message != "" && !strings.Contains(msg, c.Message) {
				parts = append(parts, c.Message)
			}
		}
	}
	b.Reason = strings.Join(parts, " ")
	return b
}
