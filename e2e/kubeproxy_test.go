//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// kubeProxySelector picks the tenant's kube-proxy pods (the add-on
// DaemonSet's own label).
const kubeProxySelector = "k8s-app=kube-proxy"

// konnectivityAgentSelector picks the tenant's Konnectivity agent pods.
const konnectivityAgentSelector = "k8s-app=konnectivity-agent"

// switchKubeProxyMode sets the tenant's kube-proxy mode the way an operator
// does (kubernetes.kubeProxy.mode in the values, helm upgrade) and waits
// until kube-proxy has rolled and runs that proxier on every node. vals is
// changed in place, so that later upgrades (the rollout's) keep the mode.
func switchKubeProxyMode(t *testing.T, ctx context.Context, kubeconfig, release, namespace string, vals map[string]any, cfg *rest.Config, tenant kubernetes.Interface, nodes []string, mode string) {
	t.Helper()
	k, _ := vals["kubernetes"].(map[string]any)
	k = maps.Clone(k)
	k["kubeProxy"] = map[string]any{"mode": mode}
	vals["kubernetes"] = k
	start := time.Now()
	if _, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, release, namespace, chartPath("kubefarm"), vals); err != nil {
		t.Fatalf("helm upgrade %s with kubernetes.kubeProxy.mode=%s: %v", release, mode, err)
	}
	waitKubeProxyMode(t, ctx, cfg, tenant, nodes, mode)
	t.Logf("kube-proxy runs the %s proxier on %v, %.0f s after helm upgrade", mode, nodes, time.Since(start).Seconds())
}

// waitKubeProxyMode waits until the kube-proxy DaemonSet has rolled out and
// a Ready kube-proxy pod on each node logged that it runs the mode's
// proxier ("Using ipvs Proxier").
func waitKubeProxyMode(t *testing.T, ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, nodes []string, mode string) {
	t.Helper()
	want := "Using " + mode + " Proxier"
	var state string
	err := pollErr(ctx, 4*time.Minute, func(ctx context.Context) (bool, error) {
		ds, err := tenant.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		st := ds.Status
		state = fmt.Sprintf("DaemonSet kube-system/kube-proxy generation %d, observed %d, desired %d, updated %d, available %d, unavailable %d",
			ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable, st.NumberUnavailable)
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled ||
			st.NumberAvailable != st.DesiredNumberScheduled || st.NumberUnavailable != 0 {
			return false, nil
		}
		for _, node := range nodes {
			pod, err := kubeProxyPod(ctx, tenant, node)
			if err != nil {
				state += "; " + err.Error()
				return false, nil
			}
			logs, err := tenant.CoreV1().Pods("kube-system").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil || !strings.Contains(string(logs), want) {
				state += fmt.Sprintf("; pod %s on %s has not logged %q", pod, node, want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kube-proxy never ran the %s proxier on %v: %v; last: %s\n%s", mode, nodes, err, state, kubeProxyState(ctx, cfg, tenant, nodes))
	}
}

// kubeProxyPod names the Ready, not terminating kube-proxy pod on a node.
func kubeProxyPod(ctx context.Context, tenant kubernetes.Interface, node string) (string, error) {
	return addonPod(ctx, tenant, kubeProxySelector, node)
}

// addonPod names the Ready, not terminating kube-system pod of an add-on
// DaemonSet (its label selector) on a node.
func addonPod(ctx context.Context, tenant kubernetes.Interface, selector, node string) (string, error) {
	pods, err := tenant.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: selector, FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no Ready %s pod on node %s (%d pods)", selector, node, len(pods.Items))
}

// checkProxyMode checks that a new Service's ClusterIP, asked from a pod on
// the first node, answers from every node (CheckSpread in its own
// namespace), once kube-proxy runs mode (switchKubeProxyMode or
// waitKubeProxyMode). On failure it appends what kube-proxy left on each
// node: its warnings and errors, its ipsets, iptables and nftables rules:
// what found the missing /etc/protocols.
//
// The checks share one namespace: the web and client pods started for the
// first are kept (a proxier switch does not touch them, and starting them
// again on the small test machines costs a minute), while the Service is
// deleted and made again, so that each mode programs a ClusterIP of its own.
func checkProxyMode(t *testing.T, ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, nodes []string, mode string) {
	t.Helper()
	const namespace = "proxy-check"
	err := tenant.CoreV1().Services(namespace).Delete(ctx, "web", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting the Service %s/web of the previous check: %v", namespace, err)
	}
	err = pollErr(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Services(namespace).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the Service %s/web of the previous check never went: %v", namespace, err)
	}
	if err := cluster.CheckSpread(ctx, cfg, tenant, namespace, nodes, t.Logf); err != nil {
		t.Fatalf("in %s mode: %v\n%s", mode, err, kubeProxyState(ctx, cfg, tenant, nodes))
	}
}

// klogHeader starts each line klog writes ("E1125 10:00:00.000000 ...");
// a line without one continues the line before (a command's output quoted
// in an error).
var klogHeader = regexp.MustCompile(`^[IWEF]\d{4} `)

// kubeProxyState is the failure report of checkProxyMode, best effort: a
// part that cannot be read says why instead.
func kubeProxyState(ctx context.Context, cfg *rest.Config, tenant kubernetes.Interface, nodes []string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var b strings.Builder
	for _, node := range nodes {
		fmt.Fprintf(&b, "=== node %s\n", node)
		pods, err := tenant.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
			LabelSelector: kubeProxySelector, FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			fmt.Fprintf(&b, "listing kube-proxy pods: %v\n", err)
			continue
		}
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "--- pod %s: phase %s, deleting %v\n", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
			for _, c := range p.Status.Conditions {
				fmt.Fprintf(&b, "    condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
			for _, c := range p.Status.ContainerStatuses {
				fmt.Fprintf(&b, "    container %s: ready %v, restarts %d, state %+v, last %+v\n", c.Name, c.Ready, c.RestartCount, c.State, c.LastTerminationState)
			}
			for _, previous := range []bool{false, true} {
				logs, err := tenant.CoreV1().Pods("kube-system").GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
				if err != nil {
					if !previous {
						fmt.Fprintf(&b, "logs of %s: %v\n", p.Name, err)
					}
					continue
				}
				fmt.Fprintf(&b, "--- warnings and errors of %s (previous %v; the last 40 lines)\n%s", p.Name, previous, tail(klogProblems(string(logs)), 40))
			}
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			// The kube-proxy image has no shell: each program is run by name.
			for _, cmd := range [][]string{
				{"ipset", "list", "-t"},
				{"ipset", "list", "KUBE-CLUSTER-IP"},
				{"iptables-save"},
				{"nft", "list", "ruleset"},
				{"ip", "addr", "show", "kube-ipvs0"},
			} {
				out, err := cluster.ExecIn(ctx, cfg, tenant, "kube-system", p.Name, cmd)
				fmt.Fprintf(&b, "--- %s in %s (err %v)\n%s\n", strings.Join(cmd, " "), p.Name, err, tail(out, 80))
			}
		}
	}
	return b.String()
}

// klogProblems keeps kube-proxy's warning and error lines and the lines
// that continue them.
func klogProblems(logs string) string {
	var b strings.Builder
	keep := false
	for _, line := range strings.Split(logs, "\n") {
		if klogHeader.MatchString(line) {
			keep = line[0] == 'W' || line[0] == 'E' || line[0] == 'F'
		}
		if keep && line != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
