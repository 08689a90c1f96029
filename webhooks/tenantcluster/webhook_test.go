package tenantcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// tenantCluster is a cluster the webhook admits but the TenantCluster
// controller, which runs in the same manager, rejects as an invalid spec
// (its DNS Service IP lies outside the service CIDR, which only the builders
// check). So the controller deploys nothing and, above all, never writes
// status.observedVersion: the tests set it themselves to stage rollouts.
func tenantCluster(ns, name, version string) *kubefarmv1.TenantCluster {
	return &kubefarmv1.TenantCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubefarmv1.TenantClusterSpec{
			Version: version,
			Network: kubefarmv1.ClusterNetwork{DNSServiceIP: "192.0.2.10"},
		},
	}
}

func newNamespace(t *testing.T) string { return env.NewNamespace(t, "versions-") }

// create stores a cluster at version whose rollout of observed has finished
// ("" leaves status.observedVersion unset). It first waits for the
// controller's first pass (finalizer, InvalidSpec); see setObserved.
func create(t *testing.T, name, version, observed string) *kubefarmv1.TenantCluster {
	t.Helper()
	ctx := context.Background()
	tc := tenantCluster(newNamespace(t), name, version)
	if err := env.Client.Create(ctx, tc); err != nil {
		t.Fatalf("creating %s at %s: %v", name, version, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(tc.Status.Conditions, kubefarmv1.ConditionReady)
		return len(tc.Finalizers) > 0 && ready != nil && ready.Reason == "InvalidSpec", nil
	})
	if err != nil {
		t.Fatalf("the controller never marked %s as an invalid spec: %v", name, err)
	}
	if observed != "" {
		setObserved(t, tc, observed)
	}
	return tc
}

// setObserved plays the controller: every component now runs version. It
// first waits until the controller has handled the latest spec: a pass that
// started before a spec change applies status from its snapshot and would
// put the old observed version back.
func setObserved(t *testing.T, tc *kubefarmv1.TenantCluster, version string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
			return false, err
		}
		return tc.Status.ObservedGeneration == tc.Generation, nil
	})
	if err != nil {
		t.Fatalf("the controller never observed generation %d of %s: %v", tc.Generation, tc.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(tc), tc); err != nil {
			return err
		}
		tc.Status.ObservedVersion = version
		return env.Client.Status().Update(context.Background(), tc)
	})
	if err != nil {
		t.Fatalf("setting status.observedVersion of %s: %v", tc.Name, err)
	}
}

// setVersion changes spec.version of the stored cluster, as kubectl edit does.
func setVersion(tc *kubefarmv1.TenantCluster, version string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(tc), tc); err != nil {
			return err
		}
		tc.Spec.Version = version
		return env.Client.Update(context.Background(), tc)
	})
}

func mustMention(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want a rejection mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("rejection does not mention %q:\n%v", w, err)
		}
	}
}

func TestDowngradeRejected(t *testing.T) {
	tc := create(t, "down", "v1.34.4", "v1.34.4")
	mustMention(t, setVersion(tc, "v1.33.7"),
		`admission webhook "tenantcluster-version.kubefarm.io" denied the request`,
		`TenantCluster.kubefarm.io "down" is invalid`,
		"spec.version: Forbidden: downgrade from v1.34.4 to v1.33.7 is not supported")
}

// TestSkippedMinorAccepted: a cluster left at v1.32 by the previous
// kubefarm release (staged here as the rollback of an upgrade that release
// started, the only way a version below the window gets into spec.version)
// may go straight to v1.34: the controller steps through v1.33
// (controllers/tenantcluster's TestUpgradeSteps shows the stepping). A
// cluster at v1.31 may not: v1.32, a step of the way, is not a minor this
// kubefarm runs.
func TestSkippedMinorAccepted(t *testing.T) {
	tc := create(t, "skip", "v1.33.7", "v1.32.5")
	if err := setVersion(tc, "v1.32.5"); err != nil {
		t.Fatalf("going back to the observed v1.32.5 was rejected: %v", err)
	}
	if err := setVersion(tc, "v1.34.4"); err != nil {
		t.Fatalf("v1.32.5 -> v1.34.4, through v1.33, was rejected: %v", err)
	}

	old := create(t, "skip-below", "v1.33.7", "v1.31.2")
	if err := setVersion(old, "v1.31.2"); err != nil {
		t.Fatalf("going back to the observed v1.31.2 was rejected: %v", err)
	}
	mustMention(t, setVersion(old, "v1.33.4"),
		"spec.version: Forbidden: the upgrade from v1.31.2 to v1.33.4 steps through v1.32, which this kubefarm does not run")
}

func TestCreateOutsideWindowRejected(t *testing.T) {
	err := env.Client.Create(context.Background(), tenantCluster(newNamespace(t), "old", "v1.32.9"), client.DryRunAll)
	mustMention(t, err, `spec.version: Invalid value: "v1.32.9": this kubefarm supports Kubernetes v1.33 to v1.34`)
}

// TestUpgradeOneRolloutAtATime: a +1 minor upgrade starts from a finished
// rollout; while it runs no other version is accepted but the observed one.
func TestUpgradeOneRolloutAtATime(t *testing.T) {
	tc := create(t, "up", "v1.33.7", "v1.33.7")
	if err := setVersion(tc, "v1.34.4"); err != nil {
		t.Fatalf("a +1 minor upgrade from a finished rollout was rejected: %v", err)
	}
	// status.observedVersion still says v1.33.7: the rollout is running.
	mustMention(t, setVersion(tc, "v1.34.5"),
		"spec.version: Forbidden: the previous rollout from v1.33.7 to v1.34.4 is still in progress (status.observedVersion is v1.33.7)")
	if err := setVersion(tc, "v1.33.7"); err != nil {
		t.Fatalf("going back to the observed version during a rollout was rejected: %v", err)
	}
	if err := setVersion(tc, "v1.34.4"); err != nil {
		t.Fatalf("restarting the upgrade after a rollback was rejected: %v", err)
	}
	setObserved(t, tc, "v1.34.4")
	if err := setVersion(tc, "v1.34.5"); err != nil {
		t.Fatalf("a patch upgrade after the rollout finished was rejected: %v", err)
	}
}

// TestFailsClosed stops the webhook server: no version change gets in
// unchecked, while an update that leaves spec.version alone (here a label;
// for the controller, its finalizer) never calls the webhook. It runs last
// (Go runs tests in file order, and this is the last test of the last file).
func TestFailsClosed(t *testing.T) {
	tc := create(t, "closed", "v1.33.7", "v1.33.7")
	stopManager()
	stopManager = nil
	testenv.WaitWebhookDown(t, "TenantCluster", func(ctx context.Context) error {
		return env.Client.Create(ctx, tenantCluster(tc.Namespace, "probe", "v1.34.4"), client.DryRunAll)
	})
	mustMention(t, setVersion(tc, "v1.34.4"), "failed calling webhook", "tenantcluster-version.kubefarm.io")
	mustMention(t, env.Client.Create(context.Background(), tenantCluster(tc.Namespace, "unchecked", "v1.34.4")),
		"failed calling webhook", "tenantcluster-version.kubefarm.io")

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(tc), tc); err != nil {
			return err
		}
		tc.Labels = map[string]string{"team": "a"}
		return env.Client.Update(context.Background(), tc)
	})
	if err != nil {
		t.Fatalf("an update that keeps spec.version was blocked by the stopped webhook: %v", err)
	}
}
