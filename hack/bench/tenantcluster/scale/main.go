// Command tenant-scale-bench is the TenantCluster scale benchmark of
// `make bench`: the kubefarm-manager's memory and reconcile time with N
// (default 50) TenantClusters, against a real kube-apiserver and etcd
// (internal/testing/testenv) with the real cert-manager controllers issuing every
// tenant's PKI.
//
// The manager is the real binary (cmd/kubefarm-manager), run as its own
// process so that its memory is its own: it serves its webhooks with a
// certificate cert-manager issued, as in cmd/kubefarm-manager's TestBinary,
// so every TenantCluster is admitted through the version webhook as in a
// real cluster. Each tenant is examples/tenantcluster.yaml in its own
// namespace, exposed as ExternalIP with a distinct documentation address
// (envtest has no load-balancer controller to publish one).
//
// The benchmark creates the tenants, waits until every one has
// CertificatesReady=True (that wall time is reported), then until the
// controller is idle: every status.observedGeneration equals its
// generation, and for -idle-scrapes consecutive scrapes of the manager's
// /metrics the tenantcluster work queue is empty, no reconcile is running
// and controller_runtime_reconcile_total has not moved. Then it reports,
// from /metrics: resident memory (and the peak, VmHWM, from
// /proc/<pid>/status), heap in use, reconciles by result, and reconcile
// time (count, mean, p50 and p99 estimated from the histogram buckets),
// as one line
//
//	tenantcluster-scale tenants=50 rss=...MiB heap=...MiB reconciles=... mean=...ms p99=...ms certs-ready=...s
//
// and as JSON in -out. It reports, it does not judge.
//
// envtest runs no pods (there is no kubelet), so no TenantCluster becomes
// Ready and the tenant add-on phase, which needs a tenant API server that
// answers, never runs: the figures cover PKI, configuration and workload
// objects for N tenants, and the steady state after them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/examples"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const (
	// controllerName is the TenantCluster controller's name (Named in its
	// SetupWithManager), the label of its metrics.
	controllerName = "tenantcluster"
	// managerNamespace holds the webhook PKI and the leader election Lease.
	managerNamespace = "kubefarm-system"
	tenantName       = "tenant"
	pollInterval     = 250 * time.Millisecond
)

type histogramFigures struct {
	Count       uint64  `json:"count"`
	SumSeconds  float64 `json:"sumSeconds"`
	MeanSeconds float64 `json:"meanSeconds"`
	P50Seconds  float64 `json:"p50Seconds"`
	P99Seconds  float64 `json:"p99Seconds"`
}

type report struct {
	Benchmark             string             `json:"benchmark"`
	Tenants               int                `json:"tenants"`
	Certificates          int                `json:"certificates"`
	CreateSeconds         float64            `json:"createSeconds"`
	CertsReadySeconds     float64            `json:"certsReadySeconds"`
	IdleSeconds           float64            `json:"idleSeconds"`
	RSSBytes              float64            `json:"residentMemoryBytes"`
	RSSBeforeBytes        float64            `json:"residentMemoryBeforeTenantsBytes"`
	PeakRSSBytes          int64              `json:"peakResidentMemoryBytes"`
	HeapInuseBytes        float64            `json:"heapInuseBytes"`
	HeapInuseBeforeBytes  float64            `json:"heapInuseBeforeTenantsBytes"`
	Goroutines            float64            `json:"goroutines"`
	ReconcilesByResult    map[string]float64 `json:"reconcilesByResult"`
	Reconciles            float64            `json:"reconciles"`
	ReconcileErrors       float64            `json:"reconcileErrors"`
	ReconcileTime         histogramFigures   `json:"reconcileTime"`
	TenantsReady          int                `json:"tenantsReady"`
	Note                  string             `json:"note"`
	ManagerLog            string             `json:"managerLog"`
	IdleConsecutiveScrape int                `json:"idleConsecutiveScrapes"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenant-scale-bench:", err)
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
	for _, dir := range []string{filepath.Dir(f.out), filepath.Dir(f.managerLog)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	example, err := examples.TenantCluster()
	if err != nil {
		return err
	}
	// Built before the control plane starts, so that the compiler does not
	// compete with it for the two cores.
	if f.managerBin == "" {
		dir, err := os.MkdirTemp("", "tenant-scale-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if f.managerBin, err = buildManager(ctx, root, dir); err != nil {
			return err
		}
	}

	fmt.Println("tenantcluster-scale: starting kube-apiserver, etcd and cert-manager (internal/testing/testenv)")
	env, err := testenv.Start(testenv.Options{CertManager: true})
	if env != nil {
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "tenant-scale-bench: stopping the environment:", err)
			}
		}()
	}
	if err != nil {
		return err
	}
	mgr, err := startManager(ctx, env, f.managerBin, f.managerLog)
	if err != nil {
		return err
	}
	defer mgr.stop()

	b := &bench{env: env, mgr: mgr}
	before, err := mgr.scrape(ctx)
	if err != nil {
		return err
	}
	rep := report{
		Benchmark: "tenantcluster-scale", Tenants: f.tenants, ManagerLog: f.managerLog, IdleConsecutiveScrape: f.idleScrapes,
		RSSBeforeBytes:       sumOf(before, "process_resident_memory_bytes", nil),
		HeapInuseBeforeBytes: sumOf(before, "go_memstats_heap_inuse_bytes", nil),
		Note: "envtest runs no pods (no kubelet): no TenantCluster becomes Ready and the tenant add-on phase never runs " +
			"(its API servers never answer); the figures cover PKI, configuration and workload objects",
	}
	if err := b.measure(ctx, f, example, &rep); err != nil {
		return err
	}
	printReport(rep, f.tenants)

	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("tenantcluster-scale: JSON written to", f.out, "; manager log in", f.managerLog)
	return nil
}

// flags are the command line's settings.
type flags struct {
	tenants     int
	managerBin  string
	timeout     time.Duration
	scrapeEvery time.Duration
	idleScrapes int
	out         string
	managerLog  string
}

// parseFlags reads the command line; root is the repository, where the
// defaults point.
func parseFlags(root string) (flags, error) {
	// A flag set of its own: controller-runtime registers --kubeconfig on
	// the global one at import, which would clash and clutter -help.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	tenants := fs.Int("tenants", 50, "TenantClusters, one per namespace")
	managerBin := fs.String("manager", "", "kubefarm-manager binary; empty: build ./cmd/kubefarm-manager into a temporary folder")
	timeout := fs.Duration("timeout", 20*time.Minute, "how long the certificates and then the idle state may take, together")
	scrapeEvery := fs.Duration("scrape-interval", time.Second, "how often /metrics is read while waiting for the controller to go idle")
	idleScrapes := fs.Int("idle-scrapes", 3, "consecutive idle scrapes that make the controller idle")
	out := fs.String("out", filepath.Join(root, "_build", "bench-tenant-scale.json"), "JSON report")
	managerLog := fs.String("manager-log", filepath.Join(root, "_build", "bench-tenant-scale-manager.log"), "the manager's log")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits
	if *tenants < 1 || *tenants > len(docNets)*254 {
		return flags{}, fmt.Errorf("-tenants must be between 1 and %d (one documentation address each)", len(docNets)*254)
	}
	return flags{tenants: *tenants, managerBin: *managerBin, timeout: *timeout, scrapeEvery: *scrapeEvery,
		idleScrapes: *idleScrapes, out: *out, managerLog: *managerLog}, nil
}

// buildManager builds ./cmd/kubefarm-manager of the repository root into
// dir and returns the binary's path.
func buildManager(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "kubefarm-manager")
	fmt.Println("tenantcluster-scale: building kubefarm-manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubefarm-manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kubefarm-manager: %w\n%s", err, out)
	}
	return bin, nil
}

// measure creates f.tenants TenantClusters from example, one namespace
// each, waits for their certificates and for the controller to go idle,
// and records the figures in rep.
func (b *bench) measure(ctx context.Context, f flags, example *kubefarmv1.TenantCluster, rep *report) error {
	env := b.env
	for i := range f.tenants {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-scale-%03d", i)}}
		if err := env.Client.Create(ctx, ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	fmt.Printf("tenantcluster-scale: creating %d TenantClusters\n", f.tenants)
	wctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	start := time.Now()
	for i := range f.tenants {
		tc := example.DeepCopy()
		tc.Name, tc.Namespace = tenantName, fmt.Sprintf("bench-scale-%03d", i)
		tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeExternalIP, ExternalIP: docAddress(i)}
		if err := env.Client.Create(wctx, tc); err != nil {
			return fmt.Errorf("creating TenantCluster %s/%s: %w", tc.Namespace, tc.Name, err)
		}
	}
	rep.CreateSeconds = time.Since(start).Seconds()

	if err := b.waitCertificates(wctx, f.tenants); err != nil {
		return err
	}
	rep.CertsReadySeconds = time.Since(start).Seconds()
	fmt.Printf("tenantcluster-scale: every tenant has CertificatesReady=True %.1fs after the first create; waiting for the controller to go idle\n",
		rep.CertsReadySeconds)

	final, err := b.waitIdle(wctx, f.scrapeEvery, f.idleScrapes)
	if err != nil {
		return err
	}
	rep.IdleSeconds = time.Since(start).Seconds()
	return b.figures(ctx, final, rep)
}

// figures records in rep the manager's figures from its last scrape
// (final) and what the API holds once the controller is idle.
func (b *bench) figures(ctx context.Context, final map[string]*dto.MetricFamily, rep *report) error {
	var err error
	rep.RSSBytes = sumOf(final, "process_resident_memory_bytes", nil)
	rep.HeapInuseBytes = sumOf(final, "go_memstats_heap_inuse_bytes", nil)
	rep.Goroutines = sumOf(final, "go_goroutines", nil)
	if rep.PeakRSSBytes, err = peakRSS(b.mgr.cmd.Process.Pid); err != nil {
		return err
	}
	rep.ReconcilesByResult = map[string]float64{}
	if mf := final["controller_runtime_reconcile_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			if label(m, "controller") == controllerName {
				rep.ReconcilesByResult[label(m, "result")] += value(m)
				rep.Reconciles += value(m)
			}
		}
	}
	rep.ReconcileErrors = sumOf(final, "controller_runtime_reconcile_errors_total", map[string]string{"controller": controllerName})
	if rep.ReconcileTime, err = reconcileTime(final); err != nil {
		return err
	}
	certs := &certmanagerv1.CertificateList{}
	if err := b.env.Client.List(ctx, certs); err != nil {
		return err
	}
	rep.Certificates = len(certs.Items)
	list := &kubefarmv1.TenantClusterList{}
	if err := b.env.Client.List(ctx, list); err != nil {
		return err
	}
	for _, tc := range list.Items {
		if meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionReady) {
			rep.TenantsReady++
		}
	}
	return nil
}

// printReport prints rep's figures for tenants TenantClusters.
func printReport(rep report, tenants int) {
	const mib = 1 << 20
	var results []string
	for _, r := range sortedKeys(rep.ReconcilesByResult) {
		results = append(results, fmt.Sprintf("%s=%.0f", r, rep.ReconcilesByResult[r]))
	}
	fmt.Printf("tenantcluster-scale: %d Certificates issued by cert-manager; %d of %d TenantClusters Ready (expected 0: no pods run in envtest, so no add-ons either)\n",
		rep.Certificates, rep.TenantsReady, tenants)
	fmt.Printf("tenantcluster-scale: manager before tenants rss=%.1fMiB heap=%.1fMiB; after: peak rss (VmHWM)=%.1fMiB goroutines=%.0f reconcile results: %s errors=%.0f\n",
		rep.RSSBeforeBytes/mib, rep.HeapInuseBeforeBytes/mib, float64(rep.PeakRSSBytes)/mib, rep.Goroutines, strings.Join(results, " "), rep.ReconcileErrors)
	fmt.Printf("tenantcluster-scale tenants=%d rss=%.1fMiB hwm=%.1fMiB heap=%.1fMiB reconciles=%.0f mean=%.1fms p50=%.1fms p99=%.1fms certs-ready=%.1fs idle=%.1fs\n",
		tenants, rep.RSSBytes/mib, float64(rep.PeakRSSBytes)/mib, rep.HeapInuseBytes/mib, rep.Reconciles,
		rep.ReconcileTime.MeanSeconds*1000, rep.ReconcileTime.P50Seconds*1000, rep.ReconcileTime.P99Seconds*1000,
		rep.CertsReadySeconds, rep.IdleSeconds)
}

// docNets are the three IPv4 documentation networks (RFC 5737): addresses
// that route nowhere, one per tenant.
var docNets = []string{"192.0.2", "198.51.100", "203.0.113"}

func docAddress(i int) string { return fmt.Sprintf("%s.%d", docNets[i/254], i%254+1) }

type bench struct {
	env *testenv.Env
	mgr *manager
}

// waitCertificates polls until every TenantCluster reports
// CertificatesReady=True: cert-manager has issued each tenant's PKI and the
// controller has seen every Secret.
func (b *bench) waitCertificates(ctx context.Context, n int) error {
	last := ""
	for {
		if err := b.mgr.running(); err != nil {
			return err
		}
		if err := b.env.CertManagerRunning(); err != nil {
			return err
		}
		list := &kubefarmv1.TenantClusterList{}
		if err := b.env.Client.List(ctx, list); err == nil {
			ready := 0
			for _, tc := range list.Items {
				if meta.IsStatusConditionTrue(tc.Status.Conditions, kubefarmv1.ConditionCertificatesReady) {
					ready++
				}
			}
			if ready == n && len(list.Items) == n {
				return nil
			}
			last = fmt.Sprintf("%d of %d have CertificatesReady=True", ready, n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for certificates: %w (%s; cert-manager log %s, manager log %s)",
				ctx.Err(), last, b.env.CertManagerLog(), b.mgr.log)
		case <-time.After(pollInterval):
		}
	}
}

// waitIdle scrapes /metrics until the controller has been idle for `need`
// consecutive scrapes, and returns the last scrape. Idle: every
// TenantCluster's status is for its current generation, the work queue is
// empty, no worker is reconciling, and the reconcile count has not changed
// since the previous scrape (an empty queue alone could be the instant
// between a reconcile's end and the event it caused).
func (b *bench) waitIdle(ctx context.Context, every time.Duration, need int) (map[string]*dto.MetricFamily, error) {
	sel := map[string]string{"controller": controllerName}
	prevTotal, streak := -1.0, 0
	last := ""
	for {
		mfs, err := b.mgr.scrape(ctx)
		if err != nil {
			return nil, err
		}
		// A series not exported yet is not evidence of idleness.
		depth, hasDepth := sumFound(mfs, "workqueue_depth", map[string]string{"name": controllerName})
		active, hasActive := sumFound(mfs, "controller_runtime_active_workers", sel)
		total, hasTotal := sumFound(mfs, "controller_runtime_reconcile_total", sel)
		current, n, err := b.observedCurrent(ctx)
		if err != nil {
			return nil, err
		}
		if hasDepth && hasActive && hasTotal && depth == 0 && active == 0 && total == prevTotal && current == n {
			streak++
		} else {
			streak = 0
		}
		if streak >= need {
			return mfs, nil
		}
		prevTotal = total
		last = fmt.Sprintf("queue depth %.0f, active workers %.0f, %.0f reconciles, %d of %d statuses current", depth, active, total, current, n)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the controller to go idle: %w (%s)", ctx.Err(), last)
		case <-time.After(every):
		}
	}
}

// observedCurrent counts the TenantClusters whose status.observedGeneration
// equals metadata.generation.
func (b *bench) observedCurrent(ctx context.Context) (current, total int, err error) {
	list := &kubefarmv1.TenantClusterList{}
	if err := b.env.Client.List(ctx, list); err != nil {
		return 0, 0, err
	}
	for _, tc := range list.Items {
		if tc.Status.ObservedGeneration == tc.Generation {
			current++
		}
	}
	return current, len(list.Items), nil
}
