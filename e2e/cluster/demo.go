package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	d := demoSteps{out: o.Out}
	admin, err := c.adminClient()
	if err != nil {
		return res, err
	}
	vals, err := demoValues(o.Root)
	if err != nil {
		return res, err
	}
	if err := c.installDemo(ctx, d, admin, o, vals); err != nil {
		return res, err
	}
	tenantCfg, tenant, kubeconfig, err := c.demoTenant(ctx, d, admin)
	res.Kubeconfig = kubeconfig
	if err != nil {
		return res, err
	}

	machines, err := demoMachines(vals)
	if err != nil {
		return res, err
	}
	if err := d.step(fmt.Sprintf("powering on %d qemu machines (TCG) that netboot from kubefarm-pxe and join", len(machines)), func() error {
		return c.joinDemoMachines(ctx, d, tenant, machines, res.Ready)
	}); err != nil {
		return res, err
	}

	if err := d.step("a workload across both nodes: pod to pod over the pod network, and a ClusterIP Service", func() error {
		var nodes []string
		for _, m := range machines {
			nodes = append(nodes, m.Name)
		}
		return CheckSpread(ctx, tenantCfg, tenant, "default", nodes, d.say)
	}); err != nil {
		return res, err
	}

	// Last, what `kubectl get pods -A` shows an operator: the add-ons
	// (kube-proxy, CoreDNS, flannel, the Konnectivity agents) and the
	// workload all up, so that a pod stuck in ImagePullBackOff or
	// CrashLoopBackOff fails the demo instead of hiding in a list nobody
	// reads.
	if err := d.step("every pod in the tenant is Running and ready, or Completed (kubectl get pods -A)", func() error {
		return CheckPodsSettled(ctx, tenant, podsSettleTimeout, d.say)
	}); err != nil {
		return res, err
	}
	return res, nil
}

// demoSteps prints the demo's progress: each step's title and how long it
// took.
type demoSteps struct{ out io.Writer }

func (d demoSteps) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// step runs fn as the step what, whose name its error carries.
func (d demoSteps) step(what string, fn func() error) error {
	d.say("==> %s", what)
	start := time.Now()
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.say("    done in %.0f s", time.Since(start).Seconds())
	return nil
}

// installDemo pushes the node image with its BootImage and installs the
// demo release with vals, which gets the BootImage's name.
func (c *Cluster) installDemo(ctx context.Context, d demoSteps, admin client.Client, o DemoOptions, vals map[string]any) error {
	var img *kubefarmv1.BootImage
	if err := d.step("pushing the node image to the local registry and creating its BootImage", func() error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
		if err := admin.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		var err error
		img, err = pushBootImage(ctx, admin, o.NodeImage, "demo")
		if err != nil {
			return err
		}
		d.say("    BootImage %s/%s", DemoNamespace, img.Name)
		return nil
	}); err != nil {
		return err
	}
	vals["bootImage"] = img.Name

	return d.step("helm install demo charts/kubefarm -n demo -f examples/kubefarm/demo/values.yaml", func() error {
		_, err := HelmUpgradeInstall(ctx, c.AdminKubeconfig(), DemoRelease, DemoNamespace, ChartRef("kubefarm"), vals)
		return err
	})
}

// demoTenant waits for the demo's TenantCluster to be Ready, writes its
// admin kubeconfig (kubeconfig, set once known) and returns clients of it.
func (c *Cluster) demoTenant(ctx context.Context, d demoSteps, admin client.Client) (*rest.Config, kubernetes.Interface, string, error) {
	tc := &kubefarmv1.TenantCluster{}
	if err := d.step("waiting for the tenant control plane (etcd, kube-apiserver with Konnectivity, controller-manager, scheduler, add-ons)", func() error {
		return poll(ctx, "TenantCluster demo Ready", 15*time.Minute, func(ctx context.Context) (bool, error) {
			if err := admin.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: DemoRelease}, tc); err != nil {
				return false, nil
			}
			return meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionReady) &&
				meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionAddonsReady), nil
		})
	}); err != nil {
		return nil, nil, "", err
	}
	secret := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: tc.Status.AdminKubeconfigSecret}, secret); err != nil {
		return nil, nil, "", err
	}
	kubeconfig := c.path("demo.kubeconfig")
	if err := os.WriteFile(kubeconfig, secret.Data["kubeconfig"], 0o600); err != nil {
		return nil, nil, kubeconfig, err
	}
	tenantCfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		return nil, nil, kubeconfig, err
	}
	// The demo's busybox pods are baseline, not restricted: the tenant's
	// PodSecurity warnings would bury the demo's output.
	tenantCfg.WarningHandler = rest.NoWarnings{}
	tenant, err := kubernetes.NewForConfig(tenantCfg)
	if err != nil {
		return nil, nil, kubeconfig, err
	}
	return tenantCfg, tenant, kubeconfig, nil
}

// joinDemoMachines powers machines on and waits for each one's Node to be
// Ready, recording the time from power-on in ready.
func (c *Cluster) joinDemoMachines(ctx context.Context, d demoSteps, tenant kubernetes.Interface, machines []FarmMachine, ready map[string]time.Duration) error {
	start := time.Now()
	for _, m := range machines {
		if err := c.PowerOn(m); err != nil {
			return err
		}
		d.say("    %s (%s, %s), %s: console %s", m.Name, m.MAC, m.IP, m.Firmware(), c.Console(m))
	}
	for _, m := range machines {
		err := poll(ctx, "Node "+m.Name+" Ready", 20*time.Minute, func(ctx context.Context) (bool, error) {
			n, err := tenant.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
			return err == nil && NodeReady(n), nil
		})
		if err != nil {
			return fmt.Errorf("%w; the console: %s", err, c.Console(m))
		}
		ready[m.Name] = time.Since(start)
		d.say("    Node %s Ready %.0f s after power-on", m.Name, ready[m.Name].Seconds())
	}
	return nil
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
	if _, err := HelmUpgradeInstall(ctx, c.AdminKubeconfig(), DemoRelease, DemoNamespace, ChartRef("kubefarm"), vals); err != nil {
		return "", err
	}
	return img.Name, nil
}
