package inventory

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// TestInventoryAgainstAPIServer drives the Inventory, its reflector and the
// pools' informer through a real etcd + kube-apiserver: the steps share one
// control plane and run in order, the last one stopping it.
func TestInventoryAgainstAPIServer(t *testing.T) {
	// client-go's watch code logs through controller-runtime's root logger.
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start(testenv.Options{})
	stopped := false
	t.Cleanup(func() {
		if env != nil && !stopped {
			if err := env.Stop(); err != nil {
				t.Logf("stopping the control plane: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatalf("integration environment: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := env.Client
	const ns = "inventory-sync"
	must(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	table := start(t, ctx, env, cache.Options{Scheme: env.Scheme}, "")
	if !toolscache.WaitForCacheSync(ctx.Done(), table.HasSynced) {
		t.Fatal("the inventory did not sync")
	}

	pool := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack1"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{Subnet: "10.28.0.0/24", Gateway: "10.28.0.1", DNS: []string{"10.28.0.1"}, Domain: "farm.example"},
			Tags:    map[string]kubefarmv1.TagSpec{"ntp": {DHCPOptions: []kubefarmv1.DHCPOption{{Code: 42, Value: "0x0a1c0001"}}}},
		},
	}
	machine := func(name, ip string, macs ...string) *kubefarmv1.Machine {
		return &kubefarmv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack1-" + name},
			Spec: kubefarmv1.MachineSpec{Pool: "rack1", Cluster: "c1", Hostname: name, IP: ip, MACs: macs,
				Tags: []string{"ntp"}, DesiredImage: "img"},
		}
	}
	m1 := machine("m1", "10.28.0.11", "52:54:00:00:01:01", "52:54:00:00:01:02")
	m2 := machine("m2", "10.28.0.12", "52:54:00:00:02:01")
	// Machines first: their events find no pool, and the pool's add event
	// must derive their leases.
	must(t, cl.Create(ctx, m1))
	must(t, cl.Create(ctx, m2))
	must(t, cl.Create(ctx, pool))

	t.Run("leases appear", func(t *testing.T) {
		waitFor(ctx, t, "leases of m1 and m2", func() bool {
			a, ok1 := table.Lookup(hw("52:54:00:00:01:01"))
			b, ok2 := table.Lookup(hw("52:54:00:00:01:02"))
			c, ok3 := table.Lookup(hw("52:54:00:00:02:01"))
			return ok1 && ok2 && ok3 && a.IP.Equal(net.IPv4(10, 28, 0, 11)) && b.Hostname == "m1" && c.Hostname == "m2"
		})
		l, _ := table.Lookup(hw("52:54:00:00:02:01"))
		if l.Machine != ns+"/rack1-m2" || l.Pool != "rack1" || l.Mask.String() != "ffffff00" || !l.Router.Equal(net.IPv4(10, 28, 0, 1)) ||
			l.Domain != "farm.example" || l.LeaseTime != time.Hour || len(l.ExtraOptions) != 1 || l.ExtraOptions[0].Code != 42 {
			t.Fatalf("unexpected lease %+v", l)
		}
	})

	t.Run("mac change replaces the old key", func(t *testing.T) {
		must(t, cl.Get(ctx, client.ObjectKeyFromObject(m1), m1))
		m1.Spec.MACs = []string{"52:54:00:00:01:01", "52:54:00:00:01:03"}
		must(t, cl.Update(ctx, m1))
		waitFor(ctx, t, "52:54:00:00:01:02 gone and :03 present", func() bool {
			_, old := table.Lookup(hw("52:54:00:00:01:02"))
			_, nw := table.Lookup(hw("52:54:00:00:01:03"))
			return !old && nw
		})
	})

	t.Run("pool change re-derives its machines", func(t *testing.T) {
		must(t, cl.Get(ctx, client.ObjectKeyFromObject(pool), pool))
		pool.Spec.Network.DNS = []string{"10.28.0.53"}
		pool.Spec.Network.LeaseTime = &metav1.Duration{Duration: 10 * time.Minute}
		must(t, cl.Update(ctx, pool))
		waitFor(ctx, t, "new DNS on every MAC of the pool", func() bool {
			for _, m := range []string{"52:54:00:00:01:01", "52:54:00:00:01:03", "52:54:00:00:02:01"} {
				l, ok := table.Lookup(hw(m))
				if !ok || len(l.DNS) != 1 || !l.DNS[0].Equal(net.IPv4(10, 28, 0, 53)) || l.LeaseTime != 10*time.Minute {
					return false
				}
			}
			return true
		})
	})

	t.Run("delete removes the leases", func(t *testing.T) {
		must(t, cl.Delete(ctx, m2))
		waitFor(ctx, t, "m2's lease gone", func() bool {
			_, ok := table.Lookup(hw("52:54:00:00:02:01"))
			return !ok
		})
		if table.Len() != 2 || table.Machines() != 1 {
			t.Fatalf("Len = %d, want 2 (m1's two MACs); Machines = %d, want 1", table.Len(), table.Machines())
		}
	})

	t.Run("deleting a pool withdraws its machines' leases", func(t *testing.T) {
		pool2 := pool.DeepCopy()
		pool2.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "rack2"}
		pool2.Spec.Network.Subnet, pool2.Spec.Network.Gateway, pool2.Spec.Network.DNS = "10.29.0.0/24", "", nil
		m3 := machine("m3", "10.29.0.13", "52:54:00:00:03:01")
		m3.Name, m3.Spec.Pool = "rack2-m3", "rack2"
		must(t, cl.Create(ctx, pool2))
		must(t, cl.Create(ctx, m3))
		waitFor(ctx, t, "m3's lease in rack2", func() bool {
			l, ok := table.Lookup(hw("52:54:00:00:03:01"))
			return ok && l.Pool == "rack2" && l.Mask.String() == "ffffff00"
		})
		must(t, cl.Delete(ctx, pool2))
		waitFor(ctx, t, "m3's lease withdrawn", func() bool {
			_, ok := table.Lookup(hw("52:54:00:00:03:01"))
			return !ok
		})
		if _, ok := table.Lookup(hw("52:54:00:00:01:01")); !ok {
			t.Fatal("rack1's leases went with rack2")
		}
		// The parsed networks are kept per pool: rack2's goes with it,
		// rack1's stays (one entry per pool, however many machines).
		waitFor(ctx, t, "rack2's parsed network forgotten", func() bool {
			table.mu.RLock()
			defer table.mu.RUnlock()
			_, rack2 := table.pools[types.NamespacedName{Namespace: ns, Name: "rack2"}]
			_, rack1 := table.pools[types.NamespacedName{Namespace: ns, Name: "rack1"}]
			return !rack2 && rack1 && len(table.pools) == 1
		})
	})

	t.Run("api server gone, lookups still answer", func(t *testing.T) {
		// Crash the API server (SIGKILL, no graceful shutdown: with the
		// cache's watches open a graceful stop waits out envtest's 30 s
		// timeout and ends in SIGKILL anyway), then let env.Stop stop etcd.
		pid, err := childProcess("kube-apiserver")
		must(t, err)
		must(t, syscall.Kill(pid, syscall.SIGKILL))
		stopped = true
		must(t, env.Stop())
		// The reflector and the informer are now failing to reach the API;
		// the inventory must not notice. Prove the API is really gone first.
		if err := cl.Get(ctx, client.ObjectKeyFromObject(m1), &kubefarmv1.Machine{}); err == nil {
			t.Fatal("API server still answers after Stop")
		}
		for _, m := range []string{"52:54:00:00:01:01", "52:54:00:00:01:03"} {
			l, ok := table.Lookup(hw(m))
			if !ok || !l.IP.Equal(net.IPv4(10, 28, 0, 11)) {
				t.Fatalf("%s: lease lost after API server stop: %v %+v", m, ok, l)
			}
		}
	})
	if n := table.Errors(); n != 0 {
		t.Errorf("the inventory reported %d errors", n)
	}
}

// childProcess finds the PID of this test's own child process running the
// named binary from the repository's bin folder: the API server testenv
// started. Only a direct child qualifies, so nothing else is ever signalled.
func childProcess(name string) (int, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return 0, err
	}
	want := filepath.Join(root, "bin", name)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		fields := strings.Fields(string(rest))
		if len(fields) < 2 || fields[1] != strconv.Itoa(self) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == want {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no child process runs %s", want)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond: informer delivery is asynchronous, and a poll with a
// deadline states what is awaited without guessing a sleep.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestHasSyncedMeansInventoryFull: machines that exist before the inventory
// starts all have their lease once HasSynced says so, with no further wait.
// That is what kubefarm-pxe's readiness waits for.
func TestHasSyncedMeansInventoryFull(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := env.Client
	const ns = "inventory-initial"
	must(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, cl.Create(ctx, &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rack1"},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{Subnet: "10.29.0.0/24", Gateway: "10.29.0.1"},
		},
	}))
	const n = 40
	for i := range n {
		must(t, cl.Create(ctx, &kubefarmv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("rack1-m%d", i)},
			Spec: kubefarmv1.MachineSpec{Pool: "rack1", Cluster: "c1", Hostname: fmt.Sprintf("m%d", i),
				IP: fmt.Sprintf("10.29.0.%d", 10+i), MACs: []string{fmt.Sprintf("02:00:00:00:01:%02x", i)}, DesiredImage: "img"},
		}))
	}

	table := start(t, ctx, env, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}}, ns)
	if !toolscache.WaitForCacheSync(ctx.Done(), table.HasSynced) {
		t.Fatal("the inventory never synced")
	}
	if got := table.Len(); got != n {
		t.Fatalf("the inventory holds %d leases once synced, want %d", got, n)
	}
}

// start runs an Inventory over env as kubefarm-pxe does: the pools from a
// controller-runtime cache with opts, the Machines of namespace (all when
// empty) through its reflector, both until the test ends.
func start(t *testing.T, ctx context.Context, env *testenv.Env, opts cache.Options, namespace string) *Inventory {
	t.Helper()
	c, err := cache.New(env.Config, opts)
	must(t, err)
	inv, err := New(ctx, c, testr.New(t))
	must(t, err)
	if inv.HasSynced() {
		t.Fatal("HasSynced before anything started")
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = c.Start(runCtx); done <- struct{}{} }()
	go func() { inv.Run(runCtx, ListWatch(wc, namespace)); done <- struct{}{} }()
	t.Cleanup(func() { stop(); <-done; <-done })
	return inv
}
