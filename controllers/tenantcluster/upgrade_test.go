package tenantcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// The two minors the project pins and its tests run (hack/tools).
const (
	prevVersion = "v1.33.4"
	nextVersion = "v1.34.4"
)

// TestUpgradeSteps upgrades a tenant from the previous pinned minor to the
// current one through the in-process manager, the test playing the
// workload controllers, with the envtest API server as the tenant (its
// Nodes are the tenant's):
//   - a Node whose kubelet would be four minors behind holds the step:
//     VersionRolledOut False KubeletSkew naming it, a Warning event, and
//     the API servers stay at the old version;
//   - once its kubelet is within three minors the step starts: the API
//     servers first (UpgradingStep, an UpgradeStepStarted event), while
//     controller-manager and scheduler wait at the old version until every
//     API server runs the new one; then status.observedVersion moves and
//     VersionRolledOut is True.
//
// It runs last in the package (file order): its add-ons land in the
// stand-in tenant every test shares.
func TestUpgradeSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := newNamespace(t)
	tc := exampleTenantCluster(t, ns)
	tc.Name = "up"
	tc.Spec.Version = prevVersion
	tc.Spec.APIServer.Expose = v1alpha1.APIServerExpose{Type: v1alpha1.ExposeExternalIP, ExternalIP: "203.0.113.12", Port: 6443}
	tc.Spec.Etcd.Replicas = 1
	tc.Spec.VolumeReclaimPolicy = v1alpha1.VolumeReclaimDelete
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tc)
	deleteOnCleanup(t, key)
	rollOut := upgradeRollOut(ns, "up")
	poll(ctx, t, "Ready at "+prevVersion, 4*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return hasCondition(got, v1alpha1.ConditionReady, metav1.ConditionTrue, "") && got.Status.ObservedVersion == prevVersion &&
			hasCondition(got, v1alpha1.ConditionVersionRolledOut, metav1.ConditionTrue, v1alpha1.ReasonRolledOut), conditionsString(got), nil
	})

	// A Node of the tenant whose kubelet is four minors behind v1.34.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-test-old-kubelet"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	setKubelet(ctx, t, node.Name, "v1.30.5")
	setSpecVersion(ctx, t, key, nextVersion)
	checkStepHeld(ctx, t, key, rollOut, "node upgrade-test-old-kubelet (v1.30.5)")

	// Its NodePool boots a newer kubelet: the next pass (the add-ons'
	// resync at the latest) starts the step, API servers first.
	setKubelet(ctx, t, node.Name, "v1.31.0")
	checkStepTaken(ctx, t, key, rollOut)
}

// checkStepHeld waits for the step to nextVersion to be held by the
// kubelet of the Node named, and checks that the control plane stays.
func checkStepHeld(ctx context.Context, t *testing.T, key types.NamespacedName, rollOut func(context.Context, bool) error, named string) {
	t.Helper()
	poll(ctx, t, "the step held by the old kubelet", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionVersionRolledOut)
		return hasCondition(got, v1alpha1.ConditionVersionRolledOut, metav1.ConditionFalse, v1alpha1.ReasonKubeletSkew) &&
			strings.Contains(c.Message, named), conditionsString(got), nil
	})
	waitTenantEvent(ctx, t, key.Namespace, mustTC(ctx, t, key).UID, v1alpha1.ConditionVersionRolledOut+v1alpha1.ReasonKubeletSkew, corev1.EventTypeWarning)
	if got := componentImage(ctx, key, desired.ComponentAPIServer); got != imageOf(desired.ComponentAPIServer, prevVersion) {
		t.Fatalf("held, the API servers run %s, want %s", got, prevVersion)
	}
	if got := mustTC(ctx, t, key); got.Status.ObservedVersion != prevVersion {
		t.Fatalf("held, status.observedVersion is %s", got.Status.ObservedVersion)
	}
}

// checkStepTaken follows the step to nextVersion: the API servers first,
// reported as the last step with an event, controller-manager and
// scheduler behind them until they are rolled out, then
// status.observedVersion and VersionRolledOut True.
func checkStepTaken(ctx context.Context, t *testing.T, key types.NamespacedName, rollOut func(context.Context, bool) error) {
	t.Helper()
	poll(ctx, t, "the API servers rolled first", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, false); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := condition(got, v1alpha1.ConditionVersionRolledOut)
		return componentImage(ctx, key, desired.ComponentAPIServer) == imageOf(desired.ComponentAPIServer, nextVersion) &&
			hasCondition(got, v1alpha1.ConditionVersionRolledOut, metav1.ConditionFalse, v1alpha1.ReasonUpgradingStep) &&
			c.Message == prevVersion+" -> "+nextVersion+" (the last step)", conditionsString(got), nil
	})
	waitTenantEvent(ctx, t, key.Namespace, mustTC(ctx, t, key).UID, "UpgradeStepStarted", corev1.EventTypeNormal)
	for _, f := range []string{"kube-controller-manager", "kube-scheduler"} {
		if got := componentImage(ctx, key, f); got != imageOf(f, prevVersion) {
			t.Errorf("%s runs %s while the API servers roll, want %s", f, got, prevVersion)
		}
	}
	if got := mustTC(ctx, t, key); got.Status.ObservedVersion != prevVersion {
		t.Errorf("status.observedVersion is %s before the step finished", got.Status.ObservedVersion)
	}
	poll(ctx, t, "the step finished", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := rollOut(ctx, true); err != nil {
			return false, "", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		return got.Status.ObservedVersion == nextVersion &&
			componentImage(ctx, key, "kube-scheduler") == imageOf("kube-scheduler", nextVersion) &&
			hasCondition(got, v1alpha1.ConditionVersionRolledOut, metav1.ConditionTrue, v1alpha1.ReasonRolledOut), conditionsString(got), nil
	})
}

func imageOf(component, version string) string { return "registry.k8s.io/" + component + ":" + version }

// componentImage is the image of a control plane component's container
// in its Deployment (named after the component without "kube-"), or what
// went wrong reading it.
func componentImage(ctx context.Context, key types.NamespacedName, component string) string {
	d := &appsv1.Deployment{}
	name := key.Name + "-" + strings.TrimPrefix(component, "kube-")
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, d); err != nil {
		return err.Error()
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == component {
			return c.Image
		}
	}
	return "no " + component + " container"
}

// upgradeRollOut plays the StatefulSet and Deployment controllers of
// tenant name: every replica of the current generation ready; apiServer
// false holds the API servers' rollout back.
func upgradeRollOut(ns, name string) func(ctx context.Context, apiServer bool) error {
	return func(ctx context.Context, apiServer bool) error {
		s := &appsv1.StatefulSet{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-etcd"}, s); err != nil {
			return client.IgnoreNotFound(err)
		}
		if n := *s.Spec.Replicas; s.Status.ObservedGeneration != s.Generation || s.Status.ReadyReplicas != n {
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n,
				CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
			if err := env.Client.Status().Update(ctx, s); err != nil {
				return ignoreConflict(err)
			}
		}
		return markControlPlaneAvailable(ctx, ns, name, !apiServer)
	}
}

// setKubelet writes the kubelet version a Node of the stand-in tenant
// reports, as its kubelet would.
func setKubelet(ctx context.Context, t *testing.T, name, version string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		n.Status.NodeInfo.KubeletVersion = version
		return env.Client.Status().Update(ctx, n)
	})
	if err != nil {
		t.Fatalf("Node %s: setting its kubelet version: %v", name, err)
	}
}

// setSpecVersion changes spec.version, as kubectl edit does.
func setSpecVersion(ctx context.Context, t *testing.T, key types.NamespacedName, version string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tc, err := getTC(ctx, key)
		if err != nil {
			return err
		}
		tc.Spec.Version = version
		return env.Client.Update(ctx, tc)
	})
	if err != nil {
		t.Fatalf("TenantCluster %s: spec.version to %s: %v", key, version, err)
	}
}
