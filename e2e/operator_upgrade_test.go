//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// The operator's Helm release, as the cluster's bring-up installed it.
const (
	operatorRelease   = "kubefarm"
	operatorNamespace = "kubefarm-system"
)

// operatorUpgrade replaces the cluster's operator with the previous
// release's (its own images and chart, built from cluster.PreviousRelease)
// and returns the step that upgrades it back to this checkout's, the way
// an operator runs `helm upgrade` from one release to the next. A test
// that ends before that step still gets this checkout's operator back.
func operatorUpgrade(ctx context.Context, t *testing.T) (upgrade func() error) {
	t.Helper()
	kubeconfig := adminKubeconfigPath()
	current, err := cluster.HelmValues(kubeconfig, operatorRelease, operatorNamespace)
	if err != nil {
		t.Fatalf("helm get values %s: %v", operatorRelease, err)
	}
	started := time.Now()
	prev, from, err := cluster.PushPrevious(ctx, repoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("previous release built from %s and pushed in %.1fs", from, time.Since(started).Seconds())
	previous := withImage(withImage(current, []string{"image"}, prev.Manager), []string{"pxe", "image"}, prev.PXE)
	if _, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, operatorRelease, operatorNamespace,
		cluster.PreviousChartRef("kubefarm-operator"), previous); err != nil {
		t.Fatalf("helm upgrade %s to the previous release's chart: %v", operatorRelease, err)
	}
	done := false
	upgrade = func() error {
		done = true
		_, err := cluster.HelmUpgradeInstall(ctx, kubeconfig, operatorRelease, operatorNamespace,
			cluster.ChartRef("kubefarm-operator"), current)
		return err
	}
	t.Cleanup(func() {
		if !done {
			if err := upgrade(); err != nil {
				t.Errorf("putting this checkout's operator back: %v", err)
			}
		}
	})
	return upgrade
}

// withImage is values with the image at path (image, or pxe.image) set to
// ghcr.io/kubefarm/<name>:previous by digest.
func withImage(values map[string]any, path []string, digest string) map[string]any {
	out := maps.Clone(values)
	m := out
	for _, k := range path {
		next, _ := m[k].(map[string]any)
		next = maps.Clone(next)
		if next == nil {
			next = map[string]any{}
		}
		m[k] = next
		m = next
	}
	m["tag"], m["digest"] = "previous", digest
	return out
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// tenantState is what an operator upgrade must leave alone in a tenant's
// namespace: every pod (by UID, with its containers' restarts) and every
// StatefulSet's and Deployment's generation, and the kubefarm objects by UID.
func tenantState(ctx context.Context, cs kubernetes.Interface, c client.Client, ns string) (map[string]string, error) {
	state := map[string]string{}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		restarts := int32(0)
		for _, st := range p.Status.ContainerStatuses {
			restarts += st.RestartCount
		}
		state["pod "+p.Name] = fmt.Sprintf("uid %s restarts %d", p.UID, restarts)
	}
	sets, err := cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, s := range sets.Items {
		state["statefulset "+s.Name] = fmt.Sprintf("generation %d", s.Generation)
	}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		state["deployment "+d.Name] = fmt.Sprintf("generation %d", d.Generation)
	}
	var tcs kubefarmv1.TenantClusterList
	if err := c.List(ctx, &tcs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, tc := range tcs.Items {
		state["tenantcluster "+tc.Name] = fmt.Sprintf("uid %s generation %d", tc.UID, tc.Generation)
	}
	var pools kubefarmv1.NodePoolList
	if err := c.List(ctx, &pools, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, p := range pools.Items {
		state["nodepool "+p.Name] = fmt.Sprintf("uid %s generation %d", p.UID, p.Generation)
	}
	var machines kubefarmv1.MachineList
	if err := c.List(ctx, &machines, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, m := range machines.Items {
		state["machine "+m.Name] = fmt.Sprintf("uid %s generation %d", m.UID, m.Generation)
	}
	return state, nil
}

// stateDiff lists what differs between two tenantStates.
func stateDiff(before, after map[string]string) []string {
	var diff []string
	for k, v := range before {
		if a, ok := after[k]; !ok {
			diff = append(diff, k+": gone (was "+v+")")
		} else if a != v {
			diff = append(diff, k+": "+v+" became "+a)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, k+": new ("+v+")")
		}
	}
	sort.Strings(diff)
	return diff
}

// managerReconciled says whether the running managers with image (this
// checkout's) have between them ended at least want[controller] passes of
// each controller since they started: their controller-runtime counters,
// read through the API server's pod proxy. A new manager reconciles every
// object once its cache syncs, so this is the upgrade's first pass over
// the tenants (tenantcluster) and their pools (nodepool) having ended.
func managerReconciled(ctx context.Context, cs kubernetes.Interface, image string, want map[string]int) (bool, error) {
	pods, err := cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + operatorRelease + ",app.kubernetes.io/component=manager"})
	if err != nil {
		return false, err
	}
	total := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != image {
			continue
		}
		body, err := cs.CoreV1().Pods(operatorNamespace).ProxyGet("http", p.Name, "8080", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			continue // not serving yet
		}
		for controller := range want {
			total[controller] += reconcilePasses(string(body), controller)
		}
	}
	for controller, n := range want {
		if total[controller] < n {
			return false, nil
		}
	}
	return true, nil
}

// upgradePool gives the upgrade scenario's tenant a NodePool with Machines
// under the previous release's operator: examples/nodepool.yaml (three
// machines, none of which exists: nothing boots) in the tenant's
// namespace, for the tenant, with a BootImage of its own in the local
// registry (digests of nothing: kubefarm-pxe's check of it fails, as it
// may on any farm, and fetches from no other host). It returns once the
// pool's controller has made every Machine and observed the pool, with
// remove, which deletes them all and waits for the Machines to be gone
// (also run at cleanup).
func upgradePool(ctx context.Context, t *testing.T, c client.Client, tc *kubefarmv1.TenantCluster) (pool *kubefarmv1.NodePool, remove func()) {
	t.Helper()
	img := &kubefarmv1.BootImage{}
	readExample(t, "bootimage.yaml", img)
	img.Namespace = tc.Namespace
	img.Spec.Repository = cluster.RegistryAddr + "/kubefarm/upgrade-none"
	img.Spec.KubeletVersion = tc.Spec.Version
	pool = &kubefarmv1.NodePool{}
	readExample(t, "nodepool.yaml", pool)
	pool.Namespace, pool.Spec.Cluster, pool.Spec.BootImage = tc.Namespace, tc.Name, img.Name
	for _, obj := range []client.Object{img, pool} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	remove = func() { deletePool(t, c, pool, img) }
	t.Cleanup(remove)
	err := pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		var machines kubefarmv1.MachineList
		if err := c.List(ctx, &machines, client.InNamespace(pool.Namespace)); err != nil {
			return false, nil
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, nil
		}
		return len(machines.Items) == len(pool.Spec.Machines) && pool.Status.ObservedGeneration == pool.Generation, nil
	})
	if err != nil {
		t.Fatalf("the previous release's manager did not make the Machines of NodePool %s: %v", pool.Name, err)
	}
	return pool, remove
}

// deletePool deletes the pool and its image and waits for its Machines to
// be gone (never joined, each leaves at once), so that the tenant's own
// deletion later finds its namespace as it made it.
func deletePool(t *testing.T, c client.Client, pool *kubefarmv1.NodePool, img *kubefarmv1.BootImage) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_ = c.Delete(ctx, pool)
	err := pollErr(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		var machines kubefarmv1.MachineList
		err := c.List(ctx, &machines, client.InNamespace(pool.Namespace))
		return err == nil && len(machines.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the Machines of NodePool %s/%s were not gone: %v", pool.Namespace, pool.Name, err)
	}
	_ = c.Delete(ctx, img)
}

// readExample reads examples/<name> strictly into obj.
func readExample(t *testing.T, name string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("examples/%s: %v", name, err)
	}
}

// reconcilePasses is controller_runtime_reconcile_total for the
// controller's passes that ended without an error (result success,
// requeue or requeue_after: a TenantCluster pass that asks to be called
// again later has still done its work), from a /metrics page.
func reconcilePasses(metrics, controller string) int {
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	prefix := "controller_runtime_reconcile_total{"
	total := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, `controller="`+controller+`"`) || strings.Contains(line, `result="error"`) {
			continue
		}
		fields := strings.Fields(line)
		if n, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			total += int(n)
		}
	}
	return total
}

// managerImage is the image the operator's Deployment runs now.
func managerImage(ctx context.Context, cs kubernetes.Interface) (string, error) {
	deps, err := cs.AppsV1().Deployments(operatorNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + operatorRelease + ",app.kubernetes.io/component=manager"})
	if err != nil {
		return "", err
	}
	if len(deps.Items) != 1 || len(deps.Items[0].Spec.Template.Spec.Containers) == 0 {
		return "", fmt.Errorf("%d manager Deployments in %s", len(deps.Items), operatorNamespace)
	}
	return deps.Items[0].Spec.Template.Spec.Containers[0].Image, nil
}

// countPrefix counts a tenantState's keys with prefix.
func countPrefix(state map[string]string, prefix string) int {
	n := 0
	for k := range state {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
