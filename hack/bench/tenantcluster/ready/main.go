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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
		return errors.New("-runs must be at least 1")
	}

	if _, err := os.Stat(*kubeconfig); err != nil {
		return fmt.Errorf("no e2e admin cluster: %s is missing; run `make e2e-up` first (or pass -kubeconfig)", *kubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", *kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if *volumesDir == "" {
		// kubeconfig is <state>/kubeconfig/admin.kubeconfig.
		*volumesDir = filepath.Join(filepath.Dir(filepath.Dir(*kubeconfig)), "volumes")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	{
		// A stale kubeconfig (the cluster was torn down) would otherwise
		// show up as a timeout in the first Create.
		pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := c.List(pingCtx, &kubefarmv1.TenantClusterList{}, client.Limit(1))
		cancel()
		if err != nil {
			return fmt.Errorf("the e2e admin cluster at %s does not answer (run `make e2e-up`): %w", cfg.Host, err)
		}
	}
	if !*allowOthers {
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
	example, err := examples.TenantCluster()
	if err != nil {
		return err
	}

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b := &bench{c: c, cs: cs, memorySettle: *memorySettle, version: *version, timeout: *timeout, teardownTimeout: *teardownTimeout,
		ownVolumes: *ownVolumes, volumesDir: *volumesDir, example: example}
	rep := report{Benchmark: "tenantcluster-ready", Version: *version, Kubeconfig: *kubeconfig, Runs: *runs, OwnVolumes: *ownVolumes}
	fmt.Printf("tenantcluster-ready: %d measured runs of a TenantCluster %s (1 etcd member, 1 API server, NodePort) against %s\n",
		*runs, *version, cfg.Host)
	if *warmup {
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
	for i := range *runs {
		r, err := b.once(ctx, false)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		rep.Measured = append(rep.Measured, r)
		secs = append(secs, r.ReadySeconds)
		fmt.Printf("tenantcluster-ready run %d/%d: %s\n", i+1, *runs, r.line())
	}
	slices.Sort(secs)
	rep.MedianSeconds, rep.MinSeconds, rep.MaxSeconds = stats.Median(secs), secs[0], secs[len(secs)-1]
	warm := "none"
	if *warmup {
		warm = "discarded"
	}
	fmt.Printf("tenantcluster-ready runs=%d median=%.1fs min=%.1fs max=%.1fs version=%s warmup=%s\n",
		len(secs), rep.MedianSeconds, rep.MinSeconds, rep.MaxSeconds, *version, warm)
	if *sideBySide > 0 {
		if *memorySettle == 0 {
			return errors.New("-side-by-side needs -memory")
		}
		r, err := b.sideBySide(ctx, *sideBySide)
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
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("tenantcluster-ready: JSON written to", *out)
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

type bench struct {
	c               client.WithWatch
	cs              kubernetes.Interface
	memorySettle    time.Duration
	version         string
	timeout         time.Duration
	teardownTimeout time.Duration
	ownVolumes      bool
	volumesDir      string
	example         *kubefarmv1.TenantCluster
}

// tenant is the e2e scenario's shape, reduced to one etcd member and one
// API server: the smallest control plane the controller makes Ready.
func (b *bench) tenant(namespace string) *kubefarmv1.TenantCluster {
	tc := b.example.DeepCopy()
	tc.Name, tc.Namespace = tenantName, namespace
	tc.Spec.Version = b.version
	one := int32(1)
	tc.Spec.APIServer.Replicas = &one
	tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort}
	tc.Spec.Etcd.Replicas = 1
	size := resource.MustParse("1Gi")
	tc.Spec.Etcd.StorageSize = &size
	tc.Spec.VolumeReclaimPolicy = kubefarmv1.VolumeReclaimDelete
	return tc
}

// once is one run: namespace, (volume), TenantCluster, wait for Ready,
// then delete everything and wait until it is gone. Teardown runs also
// after a failure, so a failed run leaves nothing for the next.
func (b *bench) once(ctx context.Context, warmup bool) (res runResult, retErr error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-ready-", Labels: map[string]string{"kubefarm.io/bench": "ready"}}}
	if err := b.c.Create(ctx, ns); err != nil {
		return res, fmt.Errorf("creating a namespace: %w", err)
	}
	res = runResult{Namespace: ns.Name, Warmup: warmup, Conditions: map[string]float64{}}
	tc := b.tenant(ns.Name)
	var pv *corev1.PersistentVolume
	defer func() {
		// A fresh context: teardown must run after Ctrl-C as well.
		tctx, cancel := context.WithTimeout(context.Background(), b.teardownTimeout)
		defer cancel()
		start := time.Now()
		times, err := b.teardown(tctx, tc, ns, pv)
		res.TeardownSeconds, res.Teardown = time.Since(start).Seconds(), times
		if err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("teardown of %s: %w", ns.Name, err))
		}
	}()
	if b.ownVolumes {
		var err error
		if pv, err = b.createVolume(ctx, ns.Name); err != nil {
			return res, err
		}
	}

	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	res.StartedAtUTC = time.Now().UTC()
	start := time.Now()
	if err := b.c.Create(rctx, tc); err != nil {
		return res, fmt.Errorf("creating the TenantCluster: %w", err)
	}
	last, err := b.waitReady(rctx, tc, func(cond string) {
		if _, seen := res.Conditions[cond]; !seen {
			res.Conditions[cond] = time.Since(start).Seconds()
		}
	})
	if err != nil {
		return res, fmt.Errorf("the TenantCluster never became Ready: %w%s%s", err, describe(last), b.describePods(ns.Name))
	}
	res.ReadySeconds = time.Since(start).Seconds()
	res.Endpoint = last.Status.Endpoint
	if b.memorySettle > 0 && !warmup {
		m, err := b.idleMemory(ctx, ns.Name)
		if err != nil {
			return res, err
		}
		res.Memory = m
	}
	return res, nil
}

// waitReady lists, then watches from the list's resourceVersion (no gap
// between the two), until the TenantCluster is Ready for its current
// generation. A watch the server closes is resumed the same way. seen is
// called with every timed condition found True, as soon as it is observed.
func (b *bench) waitReady(ctx context.Context, tc *kubefarmv1.TenantCluster, seen func(string)) (*kubefarmv1.TenantCluster, error) {
	last := tc.DeepCopy()
	check := func(got *kubefarmv1.TenantCluster) bool {
		if got.Name != tc.Name {
			return false
		}
		last = got
		for _, cond := range conditionsTimed {
			if c := meta.FindStatusCondition(got.Status.Conditions, cond); c != nil && c.Status == metav1.ConditionTrue &&
				c.ObservedGeneration == got.Generation {
				seen(cond)
			}
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, kubefarmv1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && ready != nil &&
			ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == got.Generation
	}
	for {
		list := &kubefarmv1.TenantClusterList{}
		if err := b.c.List(ctx, list, client.InNamespace(tc.Namespace)); err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			time.Sleep(pollInterval) // a transient API error: list again
			continue
		}
		for i := range list.Items {
			if check(&list.Items[i]) {
				return last, nil
			}
		}
		w, err := b.c.Watch(ctx, &kubefarmv1.TenantClusterList{}, client.InNamespace(tc.Namespace),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			time.Sleep(pollInterval)
			continue
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						return false, nil // closed or expired: list and watch again
					}
					got, isTC := ev.Object.(*kubefarmv1.TenantCluster)
					if !isTC {
						continue
					}
					if ev.Type == watch.Deleted && got.Name == tc.Name {
						return false, errors.New("the TenantCluster was deleted")
					}
					if check(got) {
						return true, nil
					}
				}
			}
		}()
		if err != nil || done {
			return last, err
		}
	}
}

// createVolume makes a fresh hostPath PersistentVolume for the run's one
// etcd member, pre-bound to its claim: the StatefulSet names the claim
// <template>-<set>-<ordinal>, with the template "data" and the set
// "<tenant>-etcd" (controllers/tenantcluster/desired). Pre-binding makes the
// binder take this volume and no other, and leaves the cluster's static
// volumes to the e2e scenarios.
func (b *bench) createVolume(ctx context.Context, namespace string) (*corev1.PersistentVolume, error) {
	dir := filepath.Join(b.volumesDir, namespace)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the volume directory (the e2e cluster runs on this machine, as root): %w", err)
	}
	if err := os.Chown(dir, volumeOwner, volumeOwner); err != nil {
		return nil, fmt.Errorf("handing %s to uid %d: %w", dir, volumeOwner, err)
	}
	class := cluster.StorageClassName
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{"kubefarm.io/bench": "ready"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              class,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace,
				Name: fmt.Sprintf("data-%s-etcd-0", tenantName),
			},
		},
	}
	if err := b.c.Create(ctx, pv); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the run's PersistentVolume: %w", err)
	}
	return pv, nil
}

// teardown deletes the TenantCluster (its finalizer runs in the
// controller), waits for it and for its pods to be gone, then deletes the
// namespace, then the run's volume, waiting for each to be gone so that the
// next run starts on a quiet cluster. It reports when each was gone.
func (b *bench) teardown(ctx context.Context, tc *kubefarmv1.TenantCluster, ns *corev1.Namespace, pv *corev1.PersistentVolume) (teardownTimes, error) {
	var times teardownTimes
	start := time.Now()
	gone := func(obj client.Object) error {
		key := client.ObjectKeyFromObject(obj)
		for {
			err := b.c.Get(ctx, key, obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%T %s still there: %w", obj, key, ctx.Err())
			case <-time.After(pollInterval):
			}
		}
	}
	var errs []error
	if err := b.c.Delete(ctx, tc); client.IgnoreNotFound(err) != nil {
		errs = append(errs, err)
	} else if err := gone(&kubefarmv1.TenantCluster{ObjectMeta: tc.ObjectMeta}); err != nil {
		errs = append(errs, err)
	}
	times.TenantGone = time.Since(start).Seconds()
	// The pods go with their owners (garbage collection): the last one to
	// go is what a deletion waits for.
	if err := b.waitPodsGone(ctx, ns.Name, &times.LastPod); err != nil {
		errs = append(errs, err)
	}
	times.PodsGone = time.Since(start).Seconds()
	if err := b.c.Delete(ctx, ns); client.IgnoreNotFound(err) != nil {
		errs = append(errs, err)
	} else if err := gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}); err != nil {
		errs = append(errs, err)
	}
	times.NamespaceGone = time.Since(start).Seconds()
	if pv != nil {
		// Retain: the claim's deletion only releases it. Its directory
		// goes once the object is gone (the kubelet has unmounted it by
		// then: the namespace, hence the pod, is gone).
		if err := b.c.Delete(ctx, pv); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		} else if err := gone(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Name}}); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return times, errors.Join(errs...)
}

// waitPodsGone polls until the namespace has no pod, noting the name of
// the last one seen.
func (b *bench) waitPodsGone(ctx context.Context, namespace string, last *string) error {
	for {
		pods := &corev1.PodList{}
		if err := b.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		*last = pods.Items[0].Name
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods of %s still there: %w", namespace, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// describe says where a tenant stood, for a run that timed out.
func describe(tc *kubefarmv1.TenantCluster) string {
	if tc == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n  generation %d, observed %d, endpoint %q", tc.Generation, tc.Status.ObservedGeneration, tc.Status.Endpoint)
	for _, c := range tc.Status.Conditions {
		fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// describePods lists the run's pods that are not running and ready, with
// why (unschedulable, waiting), for a run that timed out.
func (b *bench) describePods(namespace string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods := &corev1.PodList{}
	if err := b.c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return "\n  listing pods: " + err.Error()
	}
	var sb strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				fmt.Fprintf(&sb, "\n  pod %s %s: %s %s", p.Name, p.Status.Phase, c.Type, c.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Waiting != nil {
				fmt.Fprintf(&sb, "\n  pod %s container %s waiting: %s %s", p.Name, st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
			}
		}
	}
	return sb.String()
}
