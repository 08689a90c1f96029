//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/e2e/cluster"
)

// TestTenantCluster: a TenantCluster created in the admin cluster gets a
// real control plane (etcd, kube-apiserver with its konnectivity-server
// sidecar, kube-controller-manager, kube-scheduler, all running as pods),
// reaches Ready, and answers `kubectl get ns` through the admin kubeconfig
// Secret the controller writes, at the endpoint in its status. Deleting it
// removes its pods and, with volumeReclaimPolicy Delete, etcd's claims.
//
// The API server is exposed as NodePort: the e2e cluster has no load
// balancer, and the node's address with the node port is reachable from
// this process (kube-proxy programs node ports for local traffic too).
func TestTenantCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cfg := adminConfig(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: runtimeScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	one := int32(1)
	size := resource.MustParse("1Gi")
	tc := &kubefarmv1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant1", Namespace: ns.Name},
		Spec: kubefarmv1.TenantClusterSpec{
			Version: cluster.KubernetesVersion,
			APIServer: kubefarmv1.APIServerSpec{
				Replicas: &one,
				Expose:   kubefarmv1.APIServerExpose{Type: kubefarmv1.ExposeNodePort},
			},
			Etcd:                kubefarmv1.EtcdSpec{Replicas: 1, StorageSize: &size},
			VolumeReclaimPolicy: kubefarmv1.VolumeReclaimDelete,
		},
	}
	created := time.Now()
	if err := c.Create(ctx, tc); err != nil {
		t.Fatalf("creating the TenantCluster: %v", err)
	}

	// describe says where the control plane is, for a failure message.
	describe := func() string {
		var b strings.Builder
		got := &kubefarmv1.TenantCluster{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc), got); err == nil {
			fmt.Fprintf(&b, "\nendpoint %q, kubeconfig Secret %q", got.Status.Endpoint, got.Status.AdminKubeconfigSecret)
			for _, cond := range got.Status.Conditions {
				fmt.Fprintf(&b, "\n  %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		pods, _ := cs.CoreV1().Pods(ns.Name).List(context.Background(), metav1.ListOptions{})
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
				fmt.Fprintf(&b, "\n    %s ready=%v restarts=%d %s", st.Name, st.Ready, st.RestartCount, state)
			}
		}
		pvcs, _ := cs.CoreV1().PersistentVolumeClaims(ns.Name).List(context.Background(), metav1.ListOptions{})
		for _, p := range pvcs.Items {
			fmt.Fprintf(&b, "\n  pvc %s %s", p.Name, p.Status.Phase)
		}
		return b.String()
	}
	waitFor := func(what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, cond); err != nil {
			t.Fatalf("%s: %v%s", what, err, describe())
		}
	}

	got := &kubefarmv1.TenantCluster{}
	waitFor("the TenantCluster never became Ready", 8*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(tc), got); err != nil {
			return false, nil
		}
		return got.Status.ObservedGeneration == got.Generation &&
			meta.IsStatusConditionTrue(got.Status.Conditions, kubefarmv1.ConditionReady), nil
	})
	t.Logf("TenantCluster Ready %.1fs after its creation; endpoint %s", time.Since(created).Seconds(), got.Status.Endpoint)

	t.Run("control plane pods run", func(t *testing.T) {
		pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := map[string]bool{}
		for _, p := range pods.Items {
			for _, st := range p.Status.ContainerStatuses {
				if st.State.Running != nil {
					running[st.Name] = true
				}
			}
		}
		for _, want := range []string{"etcd", "kube-apiserver", "konnectivity-server", "kube-controller-manager", "kube-scheduler"} {
			if !running[want] {
				t.Errorf("no running %s container%s", want, describe())
			}
		}
	})

	t.Run("kubectl get ns with the admin kubeconfig", func(t *testing.T) {
		if got.Status.AdminKubeconfigSecret == "" {
			t.Fatal("status.adminKubeconfigSecret is empty")
		}
		secret, err := cs.CoreV1().Secrets(ns.Name).Get(ctx, got.Status.AdminKubeconfigSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tenantCfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
		if err != nil {
			t.Fatalf("the admin kubeconfig does not parse: %v", err)
		}
		if tenantCfg.Host != got.Status.Endpoint {
			t.Errorf("the admin kubeconfig points at %s, status.endpoint is %s", tenantCfg.Host, got.Status.Endpoint)
		}
		tenantCfg.Timeout = 10 * time.Second
		tenant, err := kubernetes.NewForConfig(tenantCfg)
		if err != nil {
			t.Fatal(err)
		}
		// Ready means the API server answers /readyz; the node port is
		// programmed by kube-proxy independently, so allow it a moment.
		var names []string
		var lastErr error
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				if ctx.Err() == nil {
					lastErr = err
				}
				return false, nil
			}
			names = names[:0]
			for _, n := range list.Items {
				names = append(names, n.Name)
			}
			return true, nil
		}); err != nil {
			t.Fatalf("listing the tenant's namespaces at %s: %v (last error: %v)", tenantCfg.Host, err, lastErr)
		}
		for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
			if !slices.Contains(names, want) {
				t.Errorf("tenant namespaces %v lack %s", names, want)
			}
		}
	})

	t.Run("deleting it removes its pods and volumes", func(t *testing.T) {
		if err := c.Delete(ctx, tc); err != nil {
			t.Fatal(err)
		}
		waitFor("the TenantCluster was never deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(tc), &kubefarmv1.TenantCluster{})
			return apierrors.IsNotFound(err), nil
		})
		waitFor("the control plane pods and etcd's claims never went away", 3*time.Minute, func(ctx context.Context) (bool, error) {
			pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			return len(pods.Items) == 0 && len(pvcs.Items) == 0, nil
		})
	})
}
