package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// NodeReady tells whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CheckSpread runs, in namespace (made if missing), one web pod on each of
// nodes and a Service over them, then fetches each pod's page from the next
// pod (the pod network, across nodes) and the Service's from a client pod
// on the first node until every web pod has answered (kube-proxy spreads
// it, local and remote endpoints alike), all through exec, which the
// tenant's API server reaches over Konnectivity. The demo runs it, and the
// join scenario runs it in CI, so the demo's check cannot rot unseen.
func CheckSpread(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, namespace string, nodes []string, say func(string, ...any)) error {
	if len(nodes) < 2 {
		return fmt.Errorf("a spread needs two nodes or more, got %v", nodes)
	}
	start := time.Now()
	s, err := createSpread(ctx, cs, namespace, nodes)
	if err != nil {
		return err
	}
	web := webPods(nodes)
	ips, err := waitPodIPs(ctx, cs.CoreV1().Pods(namespace), namespace, append(web, "client"))
	if err != nil {
		return err
	}
	// Where a slow check spends its time: starting the pods (image pulls
	// on a freshly booted node) or the requests through Konnectivity.
	say("    pods %v and client Ready %.0f s after the check began", web, time.Since(start).Seconds())
	get := func(from, addr, port string) (string, error) {
		return httpGetIn(ctx, cfg, cs, namespace, from, addr, port)
	}
	for i, from := range web {
		to := web[(i+1)%len(web)]
		page, err := get(from, ips[to], "8080")
		if err != nil {
			return err
		}
		if want := "served-by-" + nodes[(i+1)%len(nodes)]; page != want {
			return fmt.Errorf("GET %s (pod %s) from pod %s answered %q, want %q", ips[to], to, from, page, want)
		}
		say("    %s (%s) -> %s (%s): %q", from, ips[from], to, ips[to], page)
	}
	seen := map[string]bool{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		page, err := get("client", s.Spec.ClusterIP, "80")
		if err != nil {
			return false, err
		}
		seen[page] = true
		return len(seen) == len(nodes), nil
	})
	if err != nil {
		return fmt.Errorf("the Service %s/web (%s) did not spread over the nodes: answers %v: %w", namespace, s.Spec.ClusterIP, seen, err)
	}
	say("    Service web (ClusterIP %s), asked from pod client on %s, answered from every node: %v (%.0f s after the check began)", s.Spec.ClusterIP, nodes[0], sortedKeys(seen), time.Since(start).Seconds())
	return nil
}

// createSpread makes, in namespace (made if missing), a web pod on each of
// nodes, the client pod on the first and the Service web over the web
// pods, and returns the Service. Objects that exist already are kept.
func createSpread(ctx context.Context, cs kubernetes.Interface, namespace string, nodes []string) (*corev1.Service, error) {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	pods := cs.CoreV1().Pods(namespace)
	for _, node := range nodes {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + node, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &quickStop, Containers: []corev1.Container{{
				Name: "httpd", Image: BusyboxImage,
				// The image is /bin/busybox alone: applets by full invocation.
				Command: []string{"/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /srv && echo served-by-" + node +
					" > /srv/index.html && exec /bin/busybox httpd -f -p 8080 -h /srv"},
			}}},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	// The Service is asked from a pod of its own on the first node, so
	// both a local and a remote endpoint can answer.
	clientPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: nodes[0], TerminationGracePeriodSeconds: &quickStop, Containers: []corev1.Container{{
			Name: "client", Image: BusyboxImage, Command: []string{"/bin/busybox", "sleep", "86400"},
		}}},
	}
	if _, err := pods.Create(ctx, clientPod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	s, err := cs.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		s, err = cs.CoreV1().Services(namespace).Get(ctx, "web", metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// waitPodIPs waits for each of the pods names to be ready and returns
// their IPs by name.
func waitPodIPs(ctx context.Context, pods typedcorev1.PodInterface, namespace string, names []string) (map[string]string, error) {
	ips := map[string]string{}
	for _, podName := range names {
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, podName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					ips[podName] = p.Status.PodIP
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			var status any
			if last != nil {
				status = last.Status
			}
			return nil, fmt.Errorf("pod %s/%s never ran: %w; status %+v", namespace, podName, err, status)
		}
	}
	return ips, nil
}

// httpGetIn fetches /index.html from addr:port with nc in pod from, until
// a web pod's page answers, and returns the response's last line.
func httpGetIn(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, namespace, from, addr, port string) (string, error) {
	cmd := "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 " + addr + " " + port
	var out string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, last = ExecIn(ctx, cfg, cs, namespace, from, []string{"/bin/busybox", "sh", "-c", cmd})
		return last == nil && strings.Contains(out, "served-by-"), nil
	})
	if err != nil {
		return "", fmt.Errorf("GET %s:%s from pod %s: %v (last: %v, output %q)", addr, port, from, err, last, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1], nil
}

// quickStop is the spread pods' grace period: busybox as PID 1 ignores
// SIGTERM, and a rollout's drain would otherwise wait 30 s for each.
var quickStop int64 = 2

func webPods(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, "web-"+n)
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ExecIn runs cmd in a pod's first container, as kubectl exec does, and
// returns its stdout.
func ExecIn(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, cmd []string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%w (stderr %q)", err, stderr.String())
	}
	return stdout.String(), nil
}
