package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/nodepool/desired"
	"github.com/kubefarm/kubefarm/hack/bench/internal/affinity"
	"github.com/kubefarm/kubefarm/internal/testing/procstat"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

const (
	// pxeNamespace is where the chart runs kubefarm-pxe (its Role on
	// Secrets is there) and pxeServiceAccount the identity it runs as.
	pxeNamespace      = "kubefarm-system"
	pxeServiceAccount = "system:serviceaccount:" + pxeNamespace + ":kubefarm-pxe"
	poolName          = "workers"
	benchImage        = "bench-node"
)

// farm is the admin API kubefarm-pxe reads in an operator's cluster: a real
// kube-apiserver and etcd (internal/testing/testenv) holding the bench's machines
// as the NodePool controller writes them (desired.Machines, one pool of
// machinesPerPool machines per tenant namespace), and a client identity
// that has only kubefarm-pxe's generated RBAC (config/rbac-pxe).
type farm struct {
	env        *testenv.Env
	kubeconfig string
	// apiPIDs are kube-apiserver's and etcd's processes: their CPU is
	// reported apart from the DHCP server's.
	apiPIDs []int
}

// startFarm starts the API server, pins it to cpu (-1: not pinned), and
// creates the pools and machines. Machine i has machine(i)'s MAC and IP.
func startFarm(ctx context.Context, machines, perPool int, dir string, cpu int) (*farm, error) {
	env, err := testenv.Start(testenv.Options{})
	f := &farm{env: env}
	if err != nil {
		return f, err
	}
	for _, pid := range procstat.Children(os.Getpid()) {
		if c := procstat.Command(pid); c == "kube-apiserver" || c == "etcd" {
			f.apiPIDs = append(f.apiPIDs, pid)
			if cpu >= 0 {
				if err := affinity.Set(pid, cpu); err != nil {
					return f, fmt.Errorf("pinning %s: %w", procstat.Command(pid), err)
				}
			}
		}
	}
	if len(f.apiPIDs) != 2 {
		return f, fmt.Errorf("found %d of kube-apiserver and etcd among this process's children", len(f.apiPIDs))
	}
	cfg := *env.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.New(&cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return f, err
	}
	if err := applyPXERBAC(ctx, c); err != nil {
		return f, fmt.Errorf("kubefarm-pxe's RBAC: %w", err)
	}
	if f.kubeconfig, err = env.WriteKubeconfig(envtest.User{Name: pxeServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + pxeNamespace, "system:authenticated"}}, dir); err != nil {
		return f, err
	}
	t0 := time.Now()
	if err := createMachines(ctx, c, machines, perPool, f.apiCPU); err != nil {
		return f, err
	}
	fmt.Printf("  admin API: %d Machines in %d NodePools created in %.1f s\n", machines, (machines+perPool-1)/perPool, time.Since(t0).Seconds())
	return f, nil
}

func (f *farm) stop() {
	if f.env != nil {
		_ = f.env.Stop()
	}
}

// apiCPU is the CPU used so far by kube-apiserver and etcd.
func (f *farm) apiCPU() time.Duration {
	var d time.Duration
	for _, pid := range f.apiPIDs {
		d += procstat.TreeCPU(pid)
	}
	return d
}

// events counts the Events in the API (objects) and the occurrences they
// stand for (the sum of their counts).
func (f *farm) events(ctx context.Context) (objects, occurrences int, err error) {
	var l corev1.EventList
	if err := f.env.Client.List(ctx, &l); err != nil {
		return 0, 0, err
	}
	for _, e := range l.Items {
		occurrences += max(int(e.Count), 1)
	}
	return len(l.Items), occurrences, nil
}

// applyPXERBAC creates config/rbac-pxe (what `make generate` derives from
// kubefarm-pxe's RBAC markers, and the chart ships) and binds it to the
// bench's kubefarm-pxe identity.
func applyPXERBAC(ctx context.Context, c client.Client) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pxeNamespace}}); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac-pxe", "role.yaml"))
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: pxeServiceAccount}}
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "Role" && u.GetNamespace() == "" {
			u.SetNamespace(pxeNamespace)
		}
		if err := c.Create(ctx, &u); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: u.GetKind(), Name: u.GetName()}
		var binding client.Object
		switch u.GetKind() {
		case "ClusterRole":
			binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}, RoleRef: ref, Subjects: subject}
		case "Role":
			binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}, RoleRef: ref, Subjects: subject}
		default:
			return fmt.Errorf("unexpected %s in config/rbac-pxe", u.GetKind())
		}
		if err := c.Create(ctx, binding); err != nil {
			return err
		}
	}
}

// createMachines creates one namespace and NodePool per perPool machines,
// and their Machines as the NodePool controller builds them, from 16
// goroutines.
//
// It prints the API server's CPU per NodePool created (its namespace
// included): the pool's validation rules are the part that grows with its
// size. The NodePool admission webhook does not run here (it runs in
// kubefarm-manager); its check is not in the figure.
func createMachines(ctx context.Context, c client.Client, machines, perPool int, apiCPU func() time.Duration) error {
	var all []*kubefarmv1.Machine
	cpu0, pools := apiCPU(), 0
	for first := 0; first < machines; first += perPool {
		pools++
		ns := fmt.Sprintf("tenant-%03d", first/perPool)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		pool := &kubefarmv1.NodePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolName},
			Spec: kubefarmv1.NodePoolSpec{Cluster: ns, BootImage: benchImage,
				Network: kubefarmv1.BootNetwork{Subnet: fmt.Sprintf("%s/%d", srvIP, subnetBits), Gateway: srvIP, DNS: []string{srvIP}}},
		}
		for i := first; i < min(first+perPool, machines); i++ {
			mac, ip := machine(i)
			pool.Spec.Machines = append(pool.Spec.Machines, kubefarmv1.MachineEntry{Name: fmt.Sprintf("m%05d", i), MACs: []string{mac}, IP: ip.String()})
		}
		if err := c.Create(ctx, pool); err != nil {
			return fmt.Errorf("NodePool %s/%s: %w", ns, poolName, err)
		}
		ms, err := desired.Machines(pool)
		if err != nil {
			return err
		}
		all = append(all, ms...)
	}
	fmt.Printf("  admin API: kube-apiserver and etcd used %.0f ms of CPU per NodePool of %d machines created (with its namespace)\n",
		float64((apiCPU()-cpu0).Milliseconds())/float64(pools), perPool)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(all) || ctx.Err() != nil {
					return
				}
				if err := c.Create(ctx, all[i]); err != nil {
					errs <- fmt.Errorf("creating machine %s/%s: %w", all[i].Namespace, all[i].Name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// pxeArgs are kubefarm-pxe's flags in the bench: the chart's defaults,
// except where this host differs from a boot network node (addresses, the
// interface, a cache folder, the metrics listener's port). The pools name a BootImage that does not
// exist: a DHCP exchange never reads it (the iPXE script does), and with
// none there is nothing for --verify-images to fetch.
func pxeArgs(binary, kubeconfig, cacheDir string, httpPort, tftpPort, metricsPort int) []string {
	return []string{binary, "--kubeconfig", kubeconfig, "--server-ip", srvIP, "--interface", srvIf,
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort), "--http-port", strconv.Itoa(httpPort),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--tftp-addr", fmt.Sprintf("127.0.0.1:%d", tftpPort), "--cache-dir", cacheDir,
		"--pod-namespace", pxeNamespace, "--node-name", "bench-node"}
}

// buildPXE builds cmd/kubefarm-pxe into dir.
func buildPXE(ctx context.Context, dir string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kubefarm-pxe")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/kubefarm-pxe")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building kubefarm-pxe: %v: %s", err, b)
	}
	return out, nil
}
