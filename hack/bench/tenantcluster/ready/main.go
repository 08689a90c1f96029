// Command tenant-ready-bench is the TenantCluster readiness benchmark of
// `make bench`: how many seconds a tenant control plane takes from the
// TenantCluster's creation to its Ready condition, on the local e2e admin
// cluster (`make e2e-up`), with real pods pulling their images from the
// cluster's local registry.
//
// Each run creates a fresh namespace and a TenantCluster in the shape the e2e
// scenario uses (examples/tenantcluster.yaml with one etcd member of 1Gi,
// one API server, exposed as NodePort, volumes deleted with the tenant) and
// measures wall time from the Create call to the first time a watch shows
// Ready=True for the current generation (status.observedGeneration and the
// condition's observedGeneration both equal metadata.generation). Ready, with
// the current controller, includes the tenant add-ons. The tenant is then
// deleted and the namespace waited for, so that runs never overlap; the
// teardown reports when the TenantCluster, its last pod and the namespace
// were gone. With -memory, each run also records its pods' working set and
// CPU from the kubelet's stats summary (through the API server's node
// proxy, as metrics-server reads it) after a settling time; -side-by-side N
// then creates N tenants at once and records the same for each.
//
// A first warm-up run is not counted: it pulls the control plane images from
// the local registry onto the node, which the later runs then find there.
// The benchmark prints every run, then one summary line
//
//	tenantcluster-ready runs=5 median=9.8s min=9.1s max=11.0s version=v1.34.4
//
// and writes the figures as JSON to -out. It reports, it does not judge:
// slow runs are not failures, only a run that never becomes Ready is.
//
// Storage: the e2e cluster has no provisioner, only StaticVolumes hostPath
// volumes that are never reused once released, fewer than a warm-up and five
// runs plus the e2e scenarios need. So each run brings its own: a fresh
// hostPath PersistentVolume under the cluster's state directory, pre-bound
// (spec.claimRef) to the etcd member's claim, deleted with its directory
// after the run. -own-volumes=false uses the cluster's static volumes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
	"github.com/kubefarm/kubefarm/hack/bench/internal/stats"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const (
	tenantName = "bench"
	// volumeOwner is the uid the control plane images run as ("nonroot");
	// hostPath volumes get no fsGroup ownership change, so the directory
	// must already be theirs (as e2e/cluster does for its static volumes).
	volumeOwner = 65532
	// pollInterval paces the waits that are not watches (deletion).
	pollInterval = 200 * time.Millisecond
)

// conditionsTimed are the conditions whose first True is recorded per run,
// as a breakdown of where the time to Ready goes.
var conditionsTimed = []string{
	kubefarmv1.ConditionCertificatesReady, kubefarmv1.ConditionEtcdReady,
	kubefarmv1.ConditionAPIServerReady, kubefarmv1.ConditionAddonsReady,
}

// runResult is one run, in seconds since the Create call.
type runResult struct {
	Namespace       string             `json:"namespace"`
	Warmup          bool               `json:"warmup"`
	ReadySeconds    float64            `json:"readySeconds"`
	Conditions      map[string]float64 `json:"conditionTrueSeconds"`
	TeardownSeconds float64            `json:"teardownSeconds"`
	// Teardown is where the teardown's time went, in seconds since the
	// TenantCluster's Delete call.
	Teardown     teardownTimes `json:"teardown"`
	StartedAtUTC time.Time     `json:"startedAt"`
	Endpoint     string        `json:"endpoint,omitempty"`
	// Memory is the tenant's pods' working set once idle (-memory).
	Memory *podMemory `json:"memory,omitempty"`
}

// teardownTimes: when the TenantCluster object was gone (its finalizer
// done), when its last pod was, which pod that was, and when the
// namespace was gone, in seconds since the Delete call.
type teardownTimes struct {
	TenantGone    float64 `json:"tenantGone"`
	PodsGone      float64 `json:"podsGone"`
	LastPod       string  `json:"lastPod,omitempty"`
	NamespaceGone float64 `json:"namespaceGone"`
}

type report struct {
	Benchmark       string            `json:"benchmark"`
	Version         string            `json:"version"`
	Kubeconfig      string            `json:"kubeconfig"`
	Runs            int               `json:"runs"`
	WarmupRun       *runResult        `json:"warmupRun,omitempty"`
	WarmupDiscarded bool              `json:"warmupDiscarded"`
	Measured        []runResult       `json:"measuredRuns"`
	MedianSeconds   float64           `json:"medianSeconds"`
	MinSeconds      float64           `json:"minSeconds"`
	SideBySide      *sideBySideResult `json:"sideBySide,omitempty"`
	MaxSeconds      float64           `json:"maxSeconds"`
	OwnVolumes      bool              `json:"ownVolumes"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenant-ready-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	f, err := parseFlags(root)
	if err != nil {
		return err
	}
	c, cfg, err := adminClient(f.kubeconfig)
	if err != nil {
		return err
	}
	if f.volumesDir == "" {
		// kubeconfig is <state>/kubeconfig/admin.kubeconfig.
		f.volumesDir = filepath.Join(filepath.Dir(filepath.Dir(f.kubeconfig)), "volumes")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := checkAdmin(ctx, c, cfg.Host, f.allowOthers); err != nil {
		return err
	}
	example, err := examples.TenantCluster()
	if err != nil {
		return err
	}

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b := &bench{c: c, cs: cs, memorySettle: f.memorySettle, version: f.version, timeout: f.timeout, teardownTimeout: f.teardownTimeout,
		ownVolumes: f.ownVolumes, volumesDir: f.volumesDir, example: example}
	rep := report{Benchmark: "tenantcluster-ready", Version: f.version, Kubeconfig: f.kubeconfig, Runs: f.runs, OwnVolumes: f.ownVolumes}
	fmt.Printf("tenantcluster-ready: %d measured runs of a TenantCluster %s (1 etcd member, 1 API server, NodePort) against %s\n",
		f.runs, f.version, cfg.Host)
	if err := b.measure(ctx, f, &rep); err != nil {
		return err
	}
	if f.sideBySide > 0 {
		if f.memorySettle == 0 {
			return errors.New("-side-by-side needs -memory")
		}
		r, err := b.sideBySide(ctx, f.sideBySide)
		if err != nil {
			return fmt.Errorf("side by side: %w", err)
		}
		rep.SideBySide = &r
		for i, m := range r.Memory {
			fmt.Printf("tenantcluster-side-by-side tenant %d/%d: ready=%.1fs memory=%.0fMiB %s\n", i+1, r.Tenants, r.ReadySeconds[i], m.TotalMiB, m.byContainer())
		}
		fmt.Printf("tenantcluster-side-by-side tenants=%d total=%.0fMiB per-tenant=%.0fMiB\n", r.Tenants, r.TotalMiB, r.TotalMiB/float64(r.Tenants))
	}

	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(f.out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("tenantcluster-ready: JSON written to", f.out)
	return nil
}

// flags are the command line's settings.
type flags struct {
	kubeconfig               string
	runs                     int
	warmup                   bool
	version                  string
	timeout, teardownTimeout time.Duration
	ownVolumes               bool
	volumesDir               string
	memorySettle             time.Duration
	sideBySide               int
	allowOthers              bool
	out                      string
}

// parseFlags reads the command line; root is the repository, where the
// defaults point.
func parseFlags(root string) (flags, error) {
	// A flag set of its own: controller-runtime registers --kubeconfig on
	// the global one at import, which would clash and clutter -help.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", filepath.Join(root, "_build", "e2e", "kubeconfig", "admin.kubeconfig"),
		"admin kubeconfig of the e2e cluster, written by make e2e-up")
	runs := fs.Int("runs", 5, "measured runs (the median is over these)")
	warmup := fs.Bool("warmup", true, "do one uncounted run first, so the images are on the node")
	version := fs.String("version", cluster.KubernetesVersion, "spec.version of the tenants")
	timeout := fs.Duration("timeout", 8*time.Minute, "per run: how long a tenant may take to become Ready")
	teardownTimeout := fs.Duration("teardown-timeout", 5*time.Minute, "per run: how long deleting the tenant and its namespace may take")
	ownVolumes := fs.Bool("own-volumes", true, "give each run a fresh pre-bound hostPath PersistentVolume (see the package doc)")
	volumesDir := fs.String("volumes-dir", "", "where the per-run volume directories go; empty: the e2e state directory's volumes/")
	memorySettle := fs.Duration("memory", 0, "after Ready, wait this long for the control plane to settle, then record its pods' memory (working set, from the kubelet's stats summary); 0: no memory figures")
	sideBySide := fs.Int("side-by-side", 0, "after the measured runs, create this many tenants at once and record each one's idle memory (needs -memory); 0: skip")
	allowOthers := fs.Bool("allow-others", false, "run even when other TenantClusters exist (their pods compete for the node)")
	out := fs.String("out", filepath.Join(root, "_build", "bench-tenant-ready.json"), "JSON report")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits
	if *runs < 1 {
		return flags{}, errors.New("-runs must be at least 1")
	}
	return flags{kubeconfig: *kubeconfig, runs: *runs, warmup: *warmup, version: *version, timeout: *timeout,
		teardownTimeout: *teardownTimeout, ownVolumes: *ownVolumes, volumesDir: *volumesDir, memorySettle: *memorySettle,
		sideBySide: *sideBySide, allowOthers: *allowOthers, out: *out}, nil
}

// adminClient is a client of the e2e admin cluster of kubeconfig that
// knows kubefarm's kinds, and its configuration.
func adminClient(kubeconfig string) (client.WithWatch, *rest.Config, error) {
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, nil, fmt.Errorf("no e2e admin cluster: %s is missing; run `make e2e-up` first (or pass -kubeconfig)", kubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	return c, cfg, nil
}

// checkAdmin checks that the admin cluster at host answers and, unless
// allowOthers, runs no TenantCluster.
func checkAdmin(ctx context.Context, c client.Client, host string, allowOthers bool) error {
	{
		// A stale kubeconfig (the cluster was torn down) would otherwise
		// show up as a timeout in the first Create.
		pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := c.List(pingCtx, &kubefarmv1.TenantClusterList{}, client.Limit(1))
		cancel()
		if err != nil {
			return fmt.Errorf("the e2e admin cluster at %s does not answer (run `make e2e-up`): %w", host, err)
		}
	}
	if !allowOthers {
		// The node has two CPUs and a tenant requests most of them: another
		// tenant (an e2e scenario, a crashed run) leaves this one Pending
		// or, at best, skews the figures.
		list := &kubefarmv1.TenantClusterList{}
		if err := c.List(ctx, list); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			var names []string
			for _, tc := range list.Items {
				names = append(names, tc.Namespace+"/"+tc.Name)
			}
			return fmt.Errorf("the cluster already runs TenantClusters (%s): wait until they are gone "+
				"(an e2e scenario?) or pass -allow-others", strings.Join(names, ", "))
		}
	}
	return nil
}

// measure does the warm-up run (f.warmup) and the measured runs into rep.
func (b *bench) measure(ctx context.Context, f flags, rep *report) error {
	if f.warmup {
		r, err := b.once(ctx, true)
		if err != nil {
			return fmt.Errorf("warm-up run: %w", err)
		}
		rep.WarmupRun, rep.WarmupDiscarded = &r, true
		fmt.Printf("tenantcluster-ready warm-up: %s (discarded: it pulls the images onto the node)\n", r.line())
	} else {
		fmt.Println("tenantcluster-ready: no warm-up run; the first run may include image pulls")
	}
	var secs []float64
	for i := range f.runs {
		r, err := b.once(ctx, false)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		rep.Measured = append(rep.Measured, r)
		secs = append(secs, r.ReadySeconds)
		fmt.Printf("tenantcluster-ready run %d/%d: %s\n", i+1, f.runs, r.line())
	}
	slices.Sort(secs)
	rep.MedianSeconds, rep.MinSeconds, rep.MaxSeconds = stats.Median(secs), secs[0], secs[len(secs)-1]
	warm := "none"
	if f.warmup {
		warm = "discarded"
	}
	fmt.Printf("tenantcluster-ready runs=%d median=%.1fs min=%.1fs max=%.1fs version=%s warmup=%s\n",
		len(secs), rep.MedianSeconds, rep.MinSeconds, rep.MaxSeconds, f.version, warm)
	return nil
}

func (r runResult) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ready=%.1fs", r.ReadySeconds)
	for _, cond := range conditionsTimed {
		if s, ok := r.Conditions[cond]; ok {
			fmt.Fprintf(&b, " %s=%.1fs", strings.TrimSuffix(cond, "Ready"), s)
		}
	}
	fmt.Fprintf(&b, " teardown=%.1fs (tenant gone %.1fs, pods gone %.1fs, last %s, namespace gone %.1fs) ns=%s",
		r.TeardownSeconds, r.Teardown.TenantGone, r.Teardown.PodsGone, r.Teardown.LastPod, r.Teardown.NamespaceGone, r.Namespace)
	if r.Memory != nil {
		fmt.Fprintf(&b, " memory=%.0fMiB %s", r.Memory.TotalMiB, r.Memory.byContainer())
	}
	return b.String()
}
