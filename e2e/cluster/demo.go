package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	nodeimage "github.com/kubefarm/kubefarm/images/node"
)

// The demo's release, namespace and machines (examples/kubefarm/demo).
const (
	DemoRelease   = "demo"
	DemoNamespace = "demo"
)

// DemoOptions are where the demo's inputs are.
type DemoOptions struct {
	// Root is the repository (charts/, examples/).
	Root string
	// NodeImage is the node image's folder (make node-image).
	NodeImage string
	Out       io.Writer
}

// DemoResult is what a finished demo reports.
type DemoResult struct {
	Kubeconfig string
	// Ready is each machine's power-on to Ready Node time.
	Ready map[string]time.Duration
}

// Demo installs the demo tenant cluster with charts/kubefarm and
// examples/kubefarm/demo/values.yaml, netboots its machines, waits for
// their Nodes to be Ready, checks a workload across them, and leaves it
// all running. The admin cluster must be up (Up and the operator chart).
func (c *Cluster) Demo(ctx context.Context, o DemoOptions) (DemoResult, error) {
	res := DemoResult{Ready: map[string]time.Duration{}}
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, format+"\n", args...) }
	step := func(what string, fn func() error) error {
		say("==> %s", what)
		start := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		say("    done in %.0f s", time.Since(start).Seconds())
		return nil
	}
	admin, err := c.adminClient()
	if err != nil {
		return res, err
	}
	vals, err := demoValues(o.Root)
	if err != nil {
		return res, err
	}
	var img *kubefarmv1.BootImage
	if err := step("pushing the node image to the local registry and creating its BootImage", func() error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
		if err := admin.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		img, err = pushBootImage(ctx, admin, o.NodeImage, "demo")
		if err != nil {
			return err
		}
		say("    BootImage %s/%s", DemoNamespace, img.Name)
		return nil
	}); err != nil {
		return res, err
	}
	vals["bootImage"] = img.Name

	if err := step("helm install demo charts/kubefarm -n demo -f examples/kubefarm/demo/values.yaml", func() error {
		_, err := HelmUpgradeInstall(ctx, c.AdminKubeconfig(), DemoRelease, DemoNamespace, filepath.Join(o.Root, "charts", "kubefarm"), vals)
		return err
	}); err != nil {
		return res, err
	}

	tc := &kubefarmv1.TenantCluster{}
	if err := step("waiting for the tenant control plane (etcd, kube-apiserver with Konnectivity, controller-manager, scheduler, add-ons)", func() error {
		return poll(ctx, "TenantCluster demo Ready", 15*time.Minute, func(ctx context.Context) (bool, error) {
			if err := admin.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoRelease}, tc); err != nil {
				return false, nil
			}
			return meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionReady) &&
				meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionAddonsReady), nil
		})
	}); err != nil {
		return res, err
	}
	secret := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: tc.Status.AdminKubeconfigSecret}, secret); err != nil {
		return res, err
	}
	res.Kubeconfig = c.path("demo.kubeconfig")
	if err := os.WriteFile(res.Kubeconfig, secret.Data["kubeconfig"], 0o600); err != nil {
		return res, err
	}
	tenantCfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		return res, err
	}
	// The demo's busybox pods are baseline, not restricted: the tenant's
	// PodSecurity warnings would bury the demo's output.
	tenantCfg.WarningHandler = rest.NoWarnings{}
	tenant, err := kubernetes.NewForConfig(tenantCfg)
	if err != nil {
		return res, err
	}

	machines, err := demoMachines(vals)
	if err != nil {
		return res, err
	}
	if err := step(fmt.Sprintf("powering on %d qemu machines (TCG) that netboot from kubefarm-pxe and join", len(machines)), func() error {
		start := time.Now()
		for _, m := range machines {
			if err := c.PowerOn(m); err != nil {
				return err
			}
			say("    %s (%s, %s), %s: console %s", m.Name, m.MAC, m.IP, m.Firmware(), c.Console(m))
		}
		for _, m := range machines {
			err := poll(ctx, "Node "+m.Name+" Ready", 20*time.Minute, func(ctx context.Context) (bool, error) {
				n, err := tenant.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
				return err == nil && NodeReady(n), nil
			})
			if err != nil {
				return fmt.Errorf("%w; the console: %s", err, c.Console(m))
			}
			res.Ready[m.Name] = time.Since(start)
			say("    Node %s Ready %.0f s after power-on", m.Name, res.Ready[m.Name].Seconds())
		}
		return nil
	}); err != nil {
		return res, err
	}

	if err := step("a workload across both nodes: pod to pod over the pod network, and a ClusterIP Service", func() error {
		var nodes []string
		for _, m := range machines {
			nodes = append(nodes, m.Name)
		}
		return CheckSpread(ctx, tenantCfg, tenant, "default", nodes, say)
	}); err != nil {
		return res, err
	}

	// Last, what `kubectl get pods -A` shows an operator: the add-ons
	// (kube-proxy, CoreDNS, flannel, the Konnectivity agents) and the
	// workload all up, so that a pod stuck in ImagePullBackOff or
	// CrashLoopBackOff fails the demo instead of hiding in a list nobody
	// reads.
	if err := step("every pod in the tenant is Running and ready, or Completed (kubectl get pods -A)", func() error {
		return CheckPodsSettled(ctx, tenant, podsSettleTimeout, say)
	}); err != nil {
		return res, err
	}
	return res, nil
}

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

// poll waits for cond, naming what it waited for when it gives up.
func poll(ctx context.Context, what string, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// adminClient is a client of the admin cluster that knows kubefarm's kinds.
func (c *Cluster) adminClient() (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	sch, err := kubefarmScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: sch})
}

// demoValues is examples/kubefarm/demo/values.yaml of the repository root.
func demoValues(root string) (map[string]any, error) {
	return chartutil.ReadValuesFile(filepath.Join(root, "examples", "kubefarm", "demo", "values.yaml"))
}

// pushBootImage pushes the node image in dir to the local registry as one
// OCI artifact tagged tag, and creates its BootImage (named by its rootfs
// digest, so a second push of the same image finds it) in the demo's
// namespace.
func pushBootImage(ctx context.Context, admin client.Client, dir, tag string) (*kubefarmv1.BootImage, error) {
	art, err := nodeimage.NewOCIArtifact(dir)
	if err != nil {
		return nil, err
	}
	repo := RegistryAddr + "/kubefarm/node"
	if _, err := art.Push(ctx, repo, tag, []name.Option{name.Insecure}); err != nil {
		return nil, err
	}
	img := art.BootImage("node-"+art.Manifest.Artifacts[nodeimage.Rootfs].SHA256[:12], repo)
	img.Namespace = DemoNamespace
	if err := admin.Create(ctx, img); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return img, nil
}

func kubefarmScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, kubefarmv1.AddToScheme(s)
}

// demoMachines are the nodes of the demo values' first pool; every second
// one boots UEFI when OVMF is installed, the others BIOS.
func demoMachines(vals map[string]any) ([]FarmMachine, error) {
	pools, _ := vals["nodePools"].([]any)
	if len(pools) == 0 {
		return nil, errors.New("examples/kubefarm/demo/values.yaml has no nodePools")
	}
	pool, _ := pools[0].(map[string]any)
	nodes, _ := pool["nodes"].([]any)
	var out []FarmMachine
	for i, n := range nodes {
		m, _ := n.(map[string]any)
		out = append(out, FarmMachine{Name: fmt.Sprint(m["name"]), MAC: fmt.Sprint(m["mac"]), IP: fmt.Sprint(m["ip"]), Index: 100 + i,
			// Every second machine boots UEFI where OVMF is installed:
			// kubefarm-pxe answers each firmware with its own iPXE binary.
			UEFI: i%2 == 1 && UEFIAvailable()})
	}
	return out, nil
}

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
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
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
			return err
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
		return err
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
		return err
	}
	web := webPods(nodes)
	ips := map[string]string{}
	for _, podName := range append(web, "client") {
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
			return fmt.Errorf("pod %s/%s never ran: %w; status %+v", namespace, podName, err, status)
		}
	}
	get := func(from, addr, port string) (string, error) {
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
	say("    Service web (ClusterIP %s), asked from pod client on %s, answered from every node: %v", s.Spec.ClusterIP, nodes[0], sortedKeys(seen))
	return nil
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

// DemoUpdate starts a rolling reboot-to-update of the demo's machines: a
// variant of the node image (VariantImage) is pushed, gets a BootImage,
// and the demo release is upgraded to it, as an operator would with
// `helm upgrade --set bootImage=...`. It returns the new BootImage's name
// without waiting for the rollout.
func (c *Cluster) DemoUpdate(ctx context.Context, o DemoOptions) (string, error) {
	admin, err := c.adminClient()
	if err != nil {
		return "", err
	}
	variant := c.path("demo-variant")
	fmt.Fprintf(o.Out, "==> a variant of the node image (one file appended to its rootfs) in %s\n", variant)
	if err := VariantImage(o.NodeImage, variant); err != nil {
		return "", err
	}
	img, err := pushBootImage(ctx, admin, variant, "demo-variant")
	if err != nil {
		return "", err
	}
	vals, err := demoValues(o.Root)
	if err != nil {
		return "", err
	}
	vals["bootImage"] = img.Name
	fmt.Fprintf(o.Out, "==> helm upgrade demo charts/kubefarm -n demo -f examples/kubefarm/demo/values.yaml --set bootImage=%s\n", img.Name)
	if _, err := HelmUpgradeInstall(ctx, c.AdminKubeconfig(), DemoRelease, DemoNamespace, filepath.Join(o.Root, "charts", "kubefarm"), vals); err != nil {
		return "", err
	}
	return img.Name, nil
}
