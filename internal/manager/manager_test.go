package manager_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// benchChildEnv, when set, makes the test binary the memory benchmark's
// child instead of running tests (memoryChild): a manager per process, so
// that each variant's heap and RSS are its own.
const benchChildEnv = "KUBEFARM_MANAGER_MEMORY_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(benchChildEnv); mode != "" {
		if err := memoryChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "memory child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSecretCache: the manager's cache holds the Secrets kubefarm labels
// and no other; the others are still read from the API server.
func TestSecretCache(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{CertManager: true})
	ctx := context.Background()
	mgr, stop, err := env.StartManager(ctx, manager.Options{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "secrets"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Theirs first: a cache holding every Secret would have it before ours.
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "theirs",
		Labels: map[string]string{desired.LabelManagedBy: "Helm"}}, Data: map[string][]byte{"password": []byte("p")}}
	ours := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "c1-admin-kubeconfig",
		Labels: map[string]string{desired.LabelManagedBy: "kubefarm", v1alpha1.LabelTenantCluster: "c1"}}, Data: map[string][]byte{"kubeconfig": []byte("k")}}
	for _, s := range []*corev1.Secret{theirs, ours} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(ours), &corev1.Secret{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubefarm's Secret never reached the cache: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(theirs), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("another's Secret through the cache: %v, want NotFound", err)
	}
	list := &corev1.SecretList{}
	if err := mgr.GetClient().List(ctx, list, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != ours.Name {
		t.Errorf("cached Secrets of %s: %d, want only %s", ns.Name, len(list.Items), ours.Name)
	}
	got := &corev1.Secret{}
	if err := mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil || string(got.Data["password"]) != "p" {
		t.Errorf("another's Secret from the API server: %v", err)
	}
}

const (
	benchSecrets    = 5000
	benchSecretSize = 4 << 10
)

// memoryFigures are what the child reports.
type memoryFigures struct {
	HeapMiB float64 `json:"heapMiB"`
	RSSMiB  float64 `json:"rssMiB"`
}

// BenchmarkSecretCacheMemory measures kubefarm-manager's memory (the
// manager as internal/manager builds it, in a child process, against a
// real API server) with 5,000 Secrets of 4 KiB that are not kubefarm's in
// the cluster: caching every Secret, as it did, against caching only
// kubefarm's (OwnedSecrets). Figures after its controllers started (their
// caches synced) and a GC: live heap and resident memory.
func BenchmarkSecretCacheMemory(b *testing.B) {
	env := testenv.StartT(b, testenv.Options{CertManager: true})
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	// 5,000 Secrets, 8 writers at once.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < benchSecrets; i += 8 {
				data := make([]byte, benchSecretSize)
				_, _ = rand.Read(data)
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "s-" + strconv.Itoa(i)},
					Data: map[string][]byte{"blob": data}}
				if err := env.Client.Create(ctx, s); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	certDir, _, err := env.IssueServingCertificate(ctx, "kubefarm-system")
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig, err := env.WriteKubeconfig(envtest.User{Name: "kubefarm-manager", Groups: []string{"system:masters"}}, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for _, mode := range []string{"all", "owned"} {
			f, err := runMemoryChild(mode, kubeconfig, certDir)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(f.HeapMiB, mode+"-heap-MiB")
			b.ReportMetric(f.RSSMiB, mode+"-rss-MiB")
			b.Logf("%s Secrets cached: heap %.1f MiB, RSS %.1f MiB", mode, f.HeapMiB, f.RSSMiB)
		}
	}
}

// runMemoryChild runs this test binary as memoryChild(mode).
func runMemoryChild(mode, kubeconfig, certDir string) (memoryFigures, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchChildEnv+"="+mode, "KUBECONFIG="+kubeconfig, "CERT_DIR="+certDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return memoryFigures{}, fmt.Errorf("%s: %w\n%s", mode, err, stderr.String())
	}
	var f memoryFigures
	if err := json.Unmarshal(bytes.TrimSpace(out), &f); err != nil {
		return memoryFigures{}, fmt.Errorf("%s: %q: %w", mode, out, err)
	}
	return f, nil
}

// memoryChild starts the manager ("all": caching every Secret), waits for
// the TenantCluster controller's workers (its sources have synced by then),
// and prints its memory as JSON.
func memoryChild(mode string) error {
	logs := &netnstest.LockedBuffer{}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.JSONEncoder()))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	opts := manager.Options{MetricsAddr: "0", ProbeAddr: "0", WebhookHost: "127.0.0.1", WebhookPort: port,
		WebhookCertDir: os.Getenv("CERT_DIR"), GracefulShutdown: time.Second}
	if mode == "all" {
		manager.CacheAllSecrets(&opts)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		return err
	}
	stop := testenv.RunManager(mgr)
	defer stop()
	deadline := time.Now().Add(3 * time.Minute)
	for !logHas(logs, `"controller":"tenantcluster"`, "Starting workers") {
		if time.Now().After(deadline) {
			return fmt.Errorf("the TenantCluster controller never started:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f := memoryFigures{HeapMiB: float64(ms.HeapAlloc) / (1 << 20), RSSMiB: rssMiB()}
	return json.NewEncoder(os.Stdout).Encode(f)
}

// rssMiB is this process's resident memory, from /proc/self/status.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// logHas reports whether one line of log holds every one of subs.
func logHas(log fmt.Stringer, subs ...string) bool {
	for _, line := range strings.Split(log.String(), "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			return true
		}
	}
	return false
}
