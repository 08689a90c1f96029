// Command e2e-cluster brings the end-to-end admin cluster up and down:
//
//	e2e-cluster up   --state DIR --bin DIR   # cluster, images, cert-manager, kubefarm-operator
//	e2e-cluster down --state DIR [--verify]  # remove everything; --verify fails on leftovers
//	e2e-cluster images --out DIR             # OCI layouts of kubefarm-manager and kubefarm-pxe
//	e2e-cluster demo --state DIR --node-image DIR  # make demo: a tenant cluster with two netbooted machines
//	e2e-cluster demo-update --state DIR --node-image DIR  # roll the demo's machines to a variant image
//
// `registry` is the local OCI registry and `dns` the cluster DNS that `up`
// starts in the background.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubefarm/kubefarm/e2e/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: e2e-cluster up|down|images|demo|registry|dns [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "images":
		err = images(os.Args[2:])
	case "demo":
		err = demo(os.Args[2:])
	case "demo-update":
		err = demoUpdate(os.Args[2:])
	case "registry":
		fs := flag.NewFlagSet("registry", flag.ExitOnError)
		var addrs stringList
		fs.Var(&addrs, "addr", "listen address; repeat for more (the loopback one, the boot network's)")
		dir := fs.String("dir", "", "blob directory")
		_ = fs.Parse(os.Args[2:])
		if len(addrs) == 0 {
			addrs = stringList{"127.0.0.1:5001"}
		}
		err = cluster.ServeRegistry(*dir, addrs...)
	case "dns":
		fs := flag.NewFlagSet("dns", flag.ExitOnError)
		addr := fs.String("addr", "", "listen address (the node's address, port 53)")
		kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig of the cluster")
		domain := fs.String("domain", "cluster.local", "cluster domain")
		_ = fs.Parse(os.Args[2:])
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = cluster.ServeDNS(ctx, *addr, *kubeconfig, *domain)
		stop()
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster:", err)
		os.Exit(1)
	}
}

func newCluster(state, bin string) (*cluster.Cluster, error) {
	absBin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	return cluster.New(state, absBin)
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	state := fs.String("state", "_build/e2e", "state directory: everything the cluster creates lives here")
	bin := fs.String("bin", "bin", "directory of the pinned upstream binaries (make tools)")
	previous := fs.Bool("previous-minor", true, "push the previous minor's control plane images (bin/k8s-prev), which only the upgrade scenario runs")
	_ = fs.Parse(args)
	c, err := newCluster(*state, *bin)
	if err != nil {
		return err
	}
	c.WithoutPreviousMinor = !*previous
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	cold := true
	if _, err := os.Stat(c.CacheDir()); err == nil {
		cold = false
	}
	if err := c.Up(ctx); err != nil {
		return err
	}
	phase := func(name string, fn func() error) error {
		start := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("%-15s ok (%.1fs)\n", name, time.Since(start).Seconds())
		return nil
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := phase("binaries", func() error { return c.BuildProjectBinaries(root) }); err != nil {
		return err
	}
	var digests map[string]string
	if err := phase("images", func() (err error) {
		images, err := c.Images()
		if err != nil {
			return err
		}
		digests, err = c.PushImages(ctx, images)
		return err
	}); err != nil {
		return err
	}
	if err := phase("cert-manager", func() error {
		crds, err := certManagerCRDs(root)
		if err != nil {
			return err
		}
		return c.InstallCertManager(ctx, crds)
	}); err != nil {
		return err
	}
	if err := phase("kubefarm", func() error {
		// Both charts go to the local registry as a release's would, and
		// the operator is installed from there, not from the checkout.
		if err := cluster.PushCharts(root); err != nil {
			return err
		}
		if err := c.HelmInstall(ctx, "kubefarm", "kubefarm-system", cluster.ChartRef("kubefarm-operator"),
			c.ChartValues(digests)); err != nil {
			return err
		}
		// The webhook fails closed: it only works once cert-manager's CA
		// injector has put the CA into its configuration.
		return c.WaitWebhookCA(ctx, "kubefarm")
	}); err != nil {
		return err
	}
	kind := "warm"
	if cold {
		kind = "cold"
	}
	fmt.Printf("e2e cluster up (%s bring-up): %.1fs; kubeconfig: %s\n", kind, time.Since(begin).Seconds(), c.AdminKubeconfig())
	return nil
}

// images writes OCI layouts of the project's images (make images), built
// like the e2e cluster's, with the same cache.
func images(args []string) error {
	fs := flag.NewFlagSet("images", flag.ExitOnError)
	state := fs.String("state", "_build/e2e", "state directory of the e2e cluster (its cache, <state>-cache, is reused)")
	out := fs.String("out", "_build/images", "directory of the OCI layouts, one per image")
	_ = fs.Parse(args)
	c, err := newCluster(*state, "bin")
	if err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := c.BuildProjectBinaries(root); err != nil {
		return err
	}
	images, err := c.ProjectImages()
	if err != nil {
		return err
	}
	return c.WriteLayouts(*out, images)
}

// demoCommand parses the flags demo and demo-update share, and makes their
// cluster and the demo's options.
func demoCommand(name string, args []string) (*cluster.Cluster, cluster.DemoOptions, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	state := fs.String("state", "_build/e2e", "state directory of the cluster")
	bin := fs.String("bin", "bin", "directory of the pinned upstream binaries")
	nodeImage := fs.String("node-image", "", "the node image's folder (make node-image)")
	_ = fs.Parse(args)
	if *nodeImage == "" {
		return nil, cluster.DemoOptions{}, fmt.Errorf("--node-image is required (make %s passes the one make node-image built)", name)
	}
	c, err := newCluster(*state, *bin)
	if err != nil {
		return nil, cluster.DemoOptions{}, err
	}
	root, err := repoRoot()
	if err != nil {
		return nil, cluster.DemoOptions{}, err
	}
	return c, cluster.DemoOptions{Root: root, NodeImage: *nodeImage, Out: os.Stdout}, nil
}

// demo runs the demo on a cluster `up` brought up (make demo) and says
// what to try next.
func demo(args []string) error {
	c, opts, err := demoCommand("demo", args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	res, err := c.Demo(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf(`
The demo farm runs (%.0f s for the tenant and its machines).
  admin cluster:   export KUBECONFIG=%s
  tenant cluster:  kubectl --kubeconfig %s get nodes -o wide
Try next:
  bin/kubectl-kubefarm status -n demo            (make kubectl-plugin builds it)
  kubectl --kubeconfig %s logs web-demo-1        (logs and exec reach the nodes through Konnectivity)
  a rolling update: make demo-update (a variant image and a helm upgrade of the release to it),
    then watch: kubectl -n demo get machines -w   (README: "Try it")
  make demo-down removes everything and checks nothing is left.
`, time.Since(begin).Seconds(), c.AdminKubeconfig(), res.Kubeconfig, res.Kubeconfig)
	return nil
}

// demoUpdate rolls the demo's machines to a variant of their image.
func demoUpdate(args []string) error {
	c, opts, err := demoCommand("demo-update", args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	img, err := c.DemoUpdate(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf(`The pool rolls to BootImage %s, one machine at a time. Watch it:
  kubectl --kubeconfig %s -n demo get machines -w
  bin/kubectl-kubefarm --kubeconfig %s rollout status demo-workers -n demo
`, img, c.AdminKubeconfig(), c.AdminKubeconfig())
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	state := fs.String("state", "_build/e2e", "state directory of the cluster")
	bin := fs.String("bin", "bin", "directory of the pinned upstream binaries")
	verify := fs.Bool("verify", false, "fail if anything is left behind")
	_ = fs.Parse(args)
	c, err := newCluster(*state, *bin)
	if err != nil {
		return err
	}
	if err := c.Down(); err != nil {
		return err
	}
	if left := c.Leftovers(); len(left) > 0 {
		msg := "left behind after down:\n  " + strings.Join(left, "\n  ")
		if *verify {
			return errors.New(msg)
		}
		fmt.Println(msg)
	} else {
		fmt.Println("e2e cluster down: nothing left behind")
	}
	return nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func certManagerCRDs(root string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
