//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// TestTenantCluster walks one tenant control plane through its life in the
// admin cluster, with real pods for every component:
//   - created from examples/tenantcluster.yaml (on the previous Kubernetes
//     minor, exposed as NodePort because the e2e cluster has no load
//     balancer), it reaches Ready and answers with the admin kubeconfig
//     Secret the controller wrote, at the endpoint in its status;
//   - its add-ons are in the tenant, the probe-host policy and PodSecurity
//     reject bad Pods;
//   - made by the previous release's operator with a NodePool of three
//     Machines (examples/nodepool.yaml), it keeps every pod, restart count,
//     generation and kubefarm object through `helm upgrade` of the operator
//     to this checkout's, until the new manager has passed over every
//     TenantCluster and NodePool;
//   - a minor upgrade and a certificate renewal forced through cert-manager
//     roll the API servers while a loop of API calls sees no failure;
//   - a downgrade is refused at admission;
//   - deleting it leaves nothing behind in its namespace.
func TestTenantCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, cs, c := adminClients(t)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	// The tenant is made by the previous release's operator; this
	// checkout's replaces it once the tenant is Ready (the first step).
	upgradeOperator := operatorUpgrade(ctx, t)

	tc := exampleTenantCluster(t)
	tc.Namespace = ns.Name
	tc.Spec.Version = cluster.PreviousKubernetesVersion
	tc.Spec.APIServer.Expose = kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort}
	size := resource.MustParse("1Gi")
	tc.Spec.Etcd.StorageSize = &size
	tc.Spec.VolumeReclaimPolicy = kubefarmv1.VolumeReclaimDelete
	created := time.Now()
	// The previous release's operator was installed a moment ago, helm
	// waiting for its Deployment; once (stop 46's local CI) its validating
	// webhook still refused connections then. The creation is retried while
	// the webhook cannot be called, and the test says for how long.
	var createErr error
	refused := 0
	err = pollErr(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		createErr = c.Create(ctx, tc)
		if createErr != nil && strings.Contains(createErr.Error(), "failed calling webhook") {
			refused++
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		err = createErr
	}
	if err != nil {
		t.Fatalf("creating the TenantCluster: %v (last: %v)", err, createErr)
	}
	if refused > 0 {
		t.Logf("the webhook could not be called for %.1fs after the operator was replaced (%d attempts refused)", time.Since(created).Seconds(), refused)
	}
	key := client.ObjectKeyFromObject(tc)
	describe := func() string { return describeTenant(c, cs, key) }
	waitFor := tenantWaiter(ctx, describe)
	got := &kubefarmv1.TenantCluster{}
	readyAt := func(version string) func(context.Context) (bool, error) { return tenantReady(c, key, got, version) }
	waitFor(t, "the TenantCluster never became Ready", 8*time.Minute, readyAt(cluster.PreviousKubernetesVersion))
	t.Logf("TenantCluster Ready %.1fs after its creation; endpoint %s", time.Since(created).Seconds(), got.Status.Endpoint)
	// A NodePool with Machines, made by the previous release too: the
	// upgrade must keep them as it keeps the tenant.
	pool, removePool := upgradePool(ctx, t, c, tc)

	t.Run("upgrading the operator from the previous release keeps the tenant and restarts nothing", func(t *testing.T) {
		before, err := tenantState(ctx, cs, c, ns.Name)
		if err != nil {
			t.Fatal(err)
		}
		upgraded := time.Now()
		if err := upgradeOperator(); err != nil {
			t.Fatalf("helm upgrade %s to this checkout's chart: %v", operatorRelease, err)
		}
		image, err := managerImage(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		var all kubefarmv1.TenantClusterList
		if err := c.List(ctx, &all); err != nil {
			t.Fatal(err)
		}
		var pools kubefarmv1.NodePoolList
		if err := c.List(ctx, &pools); err != nil {
			t.Fatal(err)
		}
		passes := map[string]int{"tenantcluster": len(all.Items), "nodepool": len(pools.Items)}
		waitFor(t, "this checkout's manager never reconciled the TenantClusters and NodePools", 4*time.Minute,
			func(ctx context.Context) (bool, error) { return managerReconciled(ctx, cs, image, passes) })
		t.Logf("operator upgraded and its first pass over %d TenantClusters and %d NodePools done %.1fs after helm upgrade began",
			len(all.Items), len(pools.Items), time.Since(upgraded).Seconds())
		after, err := tenantState(ctx, cs, c, ns.Name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := stateDiff(before, after); len(diff) > 0 {
			t.Errorf("the operator's upgrade changed the tenant:\n  %s", strings.Join(diff, "\n  "))
		}
		if n := countPrefix(after, "machine "); n != len(pool.Spec.Machines) {
			t.Errorf("%d Machines after the upgrade, NodePool %s lists %d", n, pool.Name, len(pool.Spec.Machines))
		}
		// The pool has shown what it was for: the steps after this one
		// are the control plane's, and its deletion must leave nothing.
		removePool()
		if ok, err := readyAt(cluster.PreviousKubernetesVersion)(ctx); !ok || err != nil {
			t.Errorf("the tenant is not Ready after the operator's upgrade (%v): %s", err, describe())
		}
	})

	t.Run("control plane pods run", func(t *testing.T) {
		pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := map[string]int{}
		for _, p := range pods.Items {
			for _, st := range p.Status.ContainerStatuses {
				if st.State.Running != nil {
					running[st.Name]++
				}
			}
		}
		for want, n := range map[string]int{"etcd": 3, "kube-apiserver": 2, "konnectivity-server": 2, "kube-controller-manager": 1, "kube-scheduler": 1} {
			if running[want] < n {
				t.Errorf("%d running %s containers, want %d%s", running[want], want, n, describe())
			}
		}
	})

	tenantCfg := tenantConfig(t, ctx, cs, got)
	tenant, err := kubernetes.NewForConfig(tenantCfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("kubectl get ns with the admin kubeconfig", func(t *testing.T) {
		list, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
			if !slices.Contains(names, want) {
				t.Errorf("tenant namespaces %v lack %s", names, want)
			}
		}
	})

	t.Run("add-ons are in the tenant", func(t *testing.T) {
		tc, err := client.New(tenantCfg, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range tenantAddons {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(want.gvk)
			if err := tc.Get(ctx, client.ObjectKey{Namespace: want.namespace, Name: want.name}, u); err != nil {
				t.Errorf("%s %s/%s: %v", want.gvk.Kind, want.namespace, want.name, err)
			}
		}
	})

	t.Run("the probe-host policy and PodSecurity reject bad pods", func(t *testing.T) {
		// The tenant's controller manager creates the default service
		// account; until then every pod is refused for lacking it.
		waitFor(t, "the tenant's default service account never appeared", 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := tenant.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
		probeHost := testPod("probe-host")
		probeHost.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Path: "/latest/meta-data/", Port: intstr.FromInt32(80)},
		}}
		hookHost := testPod("hook-host")
		hookHost.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Port: intstr.FromInt32(10250)},
		}}
		hostNetwork := testPod("host-network")
		hostNetwork.Spec.HostNetwork = true
		for _, bad := range []struct {
			pod  *corev1.Pod
			want string
		}{
			{probeHost, "ValidatingAdmissionPolicy '" + desired.ProbeHostPolicyName + "'"},
			{hookHost, "ValidatingAdmissionPolicy '" + desired.ProbeHostPolicyName + "'"},
			{hostNetwork, `violates PodSecurity "baseline`},
		} {
			// Policies are enforced once the API server has loaded them;
			// the first create after an apply may still pass, so retry
			// until the rejection shows (and clean up a pod that got in).
			var lastErr error
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := tenant.CoreV1().Pods("default").Create(ctx, bad.pod, metav1.CreateOptions{})
				lastErr = err
				if err == nil {
					_ = tenant.CoreV1().Pods("default").Delete(ctx, bad.pod.Name, metav1.DeleteOptions{})
					return false, nil
				}
				return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
			})
			if err != nil {
				t.Errorf("pod %s was not rejected: %v (last: %v)", bad.pod.Name, err, lastErr)
				continue
			}
			if !strings.Contains(lastErr.Error(), bad.want) {
				t.Errorf("pod %s rejected without naming %q: %v", bad.pod.Name, bad.want, lastErr)
			}
			t.Logf("pod %s rejected: %v", bad.pod.Name, lastErr)
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, testPod("good"), metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod without probe hosts was rejected: %v", err)
		}
	})

	t.Run("a minor upgrade rolls without a failed request", func(t *testing.T) {
		load := startLoad(t, tenantCfg)
		if err := patchVersion(ctx, c, key, cluster.KubernetesVersion); err != nil {
			load.stop()
			t.Fatalf("upgrading to %s: %v", cluster.KubernetesVersion, err)
		}
		start := time.Now()
		waitFor(t, "the upgrade never completed", 8*time.Minute, readyAt(cluster.KubernetesVersion))
		ok, failed, errs := load.stop()
		t.Logf("upgrade %s -> %s took %.1fs; %d API calls succeeded, %d failed during it",
			cluster.PreviousKubernetesVersion, cluster.KubernetesVersion, time.Since(start).Seconds(), ok, failed)
		if failed > 0 || ok == 0 {
			t.Errorf("%d calls failed, %d succeeded: %s", failed, ok, strings.Join(errs, "\n"))
		}
		v, err := tenant.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != cluster.KubernetesVersion {
			t.Errorf("the tenant API server reports %s, want %s", v.GitVersion, cluster.KubernetesVersion)
		}
	})

	t.Run("a downgrade is refused at admission", func(t *testing.T) {
		err := patchVersion(ctx, c, key, cluster.PreviousKubernetesVersion)
		if err == nil || !strings.Contains(err.Error(), "spec.version") {
			t.Fatalf("downgrade to %s: got %v, want a rejection naming spec.version", cluster.PreviousKubernetesVersion, err)
		}
		t.Logf("downgrade refused: %v", err)
	})

	t.Run("a forced certificate renewal rolls without downtime", func(t *testing.T) {
		certName := tc.Name + "-apiserver"
		before := servingSerial(t, tenantCfg)
		checksumBefore := podTemplateChecksum(ctx, t, cs, ns.Name, tc.Name+"-apiserver")
		load := startLoad(t, tenantCfg)
		if err := triggerRenewal(ctx, c, client.ObjectKey{Namespace: ns.Name, Name: certName}); err != nil {
			load.stop()
			t.Fatal(err)
		}
		start := time.Now()
		// Renewed, rolled out, and every API server serves the new
		// certificate: the deployment's pods all carry it once Ready.
		waitFor(t, "the renewed certificate was never served", 5*time.Minute, func(ctx context.Context) (bool, error) {
			if ok, _ := readyAt(cluster.KubernetesVersion)(ctx); !ok {
				return false, nil
			}
			s, err := cs.CoreV1().Secrets(ns.Name).Get(ctx, certName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			checksum := podTemplateChecksum(ctx, t, cs, ns.Name, tc.Name+"-apiserver")
			return serialOf(s.Data["tls.crt"]) != before && checksum != checksumBefore &&
				rolledOutDeployment(ctx, cs, ns.Name, tc.Name+"-apiserver") &&
				// Old pods drain for a few seconds after the rollout
				// counts them out; wait until they are gone.
				onlyPodsWithChecksum(ctx, cs, ns.Name, tc.Name, checksum), nil
		})
		ok, failed, errs := load.stop()
		// Every API server serves the new certificate: a few fresh
		// connections land on both replicas.
		after := servingSerial(t, tenantCfg)
		for range 6 {
			if s := servingSerial(t, tenantCfg); s != after {
				t.Errorf("API servers serve different certificates after the roll: %s and %s", after, s)
			}
		}
		t.Logf("renewal rolled in %.1fs (serial %s -> %s); %d API calls succeeded, %d failed", time.Since(start).Seconds(), before, after, ok, failed)
		if after == before {
			t.Errorf("the API server still serves serial %s", before)
		}
		if failed > 0 || ok == 0 {
			t.Errorf("%d calls failed, %d succeeded: %s", failed, ok, strings.Join(errs, "\n"))
		}
	})

	t.Run("rotating the etcd and front-proxy CAs under load", func(t *testing.T) {
		checkCARotationUnderLoad(ctx, t, c, cs, key, tenantCfg, readyAt(cluster.KubernetesVersion), waitFor)
	})

	t.Run("deleting it leaves nothing behind", func(t *testing.T) {
		if err := c.Delete(ctx, tc); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitFor(t, "the TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, key, &kubefarmv1.TenantCluster{})), nil
		})
		var left []string
		waitFor(t, "objects were left behind", 3*time.Minute, func(ctx context.Context) (bool, error) {
			left = leftovers(ctx, c, ns.Name)
			return len(left) == 0, nil
		})
		t.Logf("everything gone %.1fs after the delete", time.Since(start).Seconds())
	})
}

// tenantWaiter polls a condition every 0.5 s until timeout, failing the test
// with what and, after it, describe's account of the tenant.
func tenantWaiter(ctx context.Context, describe func() string) func(t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	return func(t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, cond); err != nil {
			t.Fatalf("%s: %v%s", what, err, describe())
		}
	}
}

// tenantReady reads the TenantCluster key into got and says whether the
// controller saw its current spec and finds it Ready with its add-ons, at
// version when version is not empty.
func tenantReady(c client.Client, key client.ObjectKey, got *kubefarmv1.TenantCluster, version string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, nil
		}
		return got.Status.ObservedGeneration == got.Generation && (version == "" || got.Status.ObservedVersion == version) &&
			meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionReady) &&
			meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionAddonsReady), nil
	}
}

// tenantAddons are the add-ons the tenant must have (examples/tenantcluster.yaml
// keeps every add-on on).
var tenantAddons = []struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}{
	{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "kube-public", "cluster-info"},
	{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "kube-system", "kubelet-config"},
	{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, "kube-system", "konnectivity-agent"},
	{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, "kube-system", "kube-proxy"},
	{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "kube-system", "coredns"},
	{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, "kube-system", "kube-dns"},
	{schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}, "", "kubefarm-deny-probe-host"},
	{schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}, "", "kubefarm-deny-probe-host"},
}

func exampleTenantCluster(t *testing.T) *kubefarmv1.TenantCluster {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "examples", "tenantcluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tc := &kubefarmv1.TenantCluster{}
	if err := yaml.UnmarshalStrict(b, tc); err != nil {
		t.Fatalf("examples/tenantcluster.yaml: %v", err)
	}
	return tc
}

// tenantConfig is the admin kubeconfig from the Secret the status names,
// once the endpoint answers (the node port is programmed by kube-proxy
// independently of the API server's readiness).
func tenantConfig(t *testing.T, ctx context.Context, cs kubernetes.Interface, tc *kubefarmv1.TenantCluster) *rest.Config {
	t.Helper()
	if tc.Status.AdminKubeconfigSecret == "" {
		t.Fatal("status.adminKubeconfigSecret is empty")
	}
	secret, err := cs.CoreV1().Secrets(tc.Namespace).Get(ctx, tc.Status.AdminKubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		t.Fatalf("the admin kubeconfig does not parse: %v", err)
	}
	if cfg.Host != tc.Status.Endpoint {
		t.Errorf("the admin kubeconfig points at %s, status.endpoint is %s", cfg.Host, tc.Status.Endpoint)
	}
	cfg.Timeout = 10 * time.Second
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = tenant.Discovery().ServerVersion()
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("the tenant API server at %s never answered: %v (last error: %v)", cfg.Host, err, lastErr)
	}
	return cfg
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: cluster.BusyboxImage, Command: []string{"sleep", "3600"},
		}}},
	}
}

// patchVersion changes spec.version with a merge patch, as kubectl patch would.
func patchVersion(ctx context.Context, c client.Client, key client.ObjectKey, version string) error {
	tc := &kubefarmv1.TenantCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := []byte(fmt.Sprintf(`{"spec":{"version":%q}}`, version))
	return c.Patch(ctx, tc, client.RawPatch("application/merge-patch+json", patch))
}

// triggerRenewal does what `cmctl renew` does: it sets the Certificate's
// Issuing condition, which makes cert-manager issue it again now.
func triggerRenewal(ctx context.Context, c client.Client, key client.ObjectKey) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"})
	if err := c.Get(ctx, key, u); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds = append(conds, map[string]any{
		"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
		"message": "renewal forced by the e2e test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		return err
	}
	return c.Status().Update(ctx, u)
}

// servingSerial is the serial of the certificate the endpoint serves now.
func servingSerial(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	host := strings.TrimPrefix(cfg.Host, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the serial only
	if err != nil {
		t.Fatalf("dialing %s: %v", host, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func serialOf(certPEM []byte) string {
	cert := firstPEMCert(certPEM)
	if cert == nil {
		return ""
	}
	return cert.SerialNumber.String()
}

// podTemplateChecksum is the checksum annotation kubefarm puts on a pod
// template; it changes when a mounted certificate does.
func podTemplateChecksum(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[kubefarmv1.AnnotationChecksum]
}

// onlyPodsWithChecksum says whether every API server pod, terminating ones
// included, runs the pod template with the given checksum.
func onlyPodsWithChecksum(ctx context.Context, cs kubernetes.Interface, ns, cluster, checksum string) bool {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: desired.LabelName + "=" + desired.ComponentAPIServer + "," + desired.LabelInstance + "=" + cluster,
	})
	if err != nil || len(pods.Items) == 0 {
		return false
	}
	for _, p := range pods.Items {
		if p.Annotations[kubefarmv1.AnnotationChecksum] != checksum {
			return false
		}
	}
	return true
}

func rolledOutDeployment(ctx context.Context, cs kubernetes.Interface, ns, name string) bool {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil {
		return false
	}
	want := *d.Spec.Replicas
	return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.AvailableReplicas == want
}

// leftovers lists what is still in the namespace of a deleted tenant, other
// than what Kubernetes itself puts in every namespace.
func leftovers(ctx context.Context, c client.Client, ns string) []string {
	var left []string
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "PodList"},
		{Version: "v1", Kind: "PersistentVolumeClaimList"},
		{Version: "v1", Kind: "SecretList"},
		{Version: "v1", Kind: "ConfigMapList"},
		{Version: "v1", Kind: "ServiceList"},
		{Group: "apps", Version: "v1", Kind: "DeploymentList"},
		{Group: "apps", Version: "v1", Kind: "StatefulSetList"},
		{Group: "policy", Version: "v1", Kind: "PodDisruptionBudgetList"},
		{Group: "cert-manager.io", Version: "v1", Kind: "CertificateList"},
		{Group: "cert-manager.io", Version: "v1", Kind: "IssuerList"},
		{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequestList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			left = append(left, fmt.Sprintf("%s: %v", gvk.Kind, err))
			continue
		}
		for _, o := range list.Items {
			if gvk.Kind == "ConfigMapList" && o.GetName() == "kube-root-ca.crt" {
				continue
			}
			left = append(left, strings.TrimSuffix(gvk.Kind, "List")+"/"+o.GetName())
		}
	}
	return left
}

// describeTenant says where the control plane is, for a failure message.
func describeTenant(c client.Client, cs kubernetes.Interface, key client.ObjectKey) string {
	ctx := context.Background()
	var b strings.Builder
	got := &kubefarmv1.TenantCluster{}
	if err := c.Get(ctx, key, got); err == nil {
		fmt.Fprintf(&b, "\nversion %s observed %q, endpoint %q, kubeconfig Secret %q", got.Spec.Version, got.Status.ObservedVersion,
			got.Status.Endpoint, got.Status.AdminKubeconfigSecret)
		for _, cond := range got.Status.Conditions {
			fmt.Fprintf(&b, "\n  %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	pods, _ := cs.CoreV1().Pods(key.Namespace).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  pod %s %s", p.Name, p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			state := "running"
			switch {
			case st.State.Waiting != nil:
				state = "waiting " + st.State.Waiting.Reason + ": " + st.State.Waiting.Message
			case st.State.Terminated != nil:
				state = fmt.Sprintf("terminated %s (exit %d): %s", st.State.Terminated.Reason, st.State.Terminated.ExitCode, st.State.Terminated.Message)
			}
			fmt.Fprintf(&b, "\n    %s %s ready=%v restarts=%d %s", st.Name, st.Image, st.Ready, st.RestartCount, state)
		}
	}
	for _, l := range leftovers(ctx, c, key.Namespace) {
		if strings.HasPrefix(l, "PersistentVolumeClaim/") {
			fmt.Fprintf(&b, "\n  %s", l)
		}
	}
	return b.String()
}
