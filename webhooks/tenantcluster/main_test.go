package tenantcluster_test

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

var (
	env *testenv.Env
	// stopManager stops the in-process kubefarm-manager and waits for it.
	stopManager func()
)

// TestMain: testenv.MainWithWebhooks (a real API server and cert-manager,
// kubefarm-manager in-process as it ships, its generated webhook
// configuration, failurePolicy Fail).
func TestMain(m *testing.M) {
	// The webhook answers once a valid cluster passes admission (dry run).
	probe := tenantCluster("default", "probe", "v1.34.4")
	answers := func(ctx context.Context, env *testenv.Env) bool {
		return env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil
	}
	testenv.MainWithWebhooks(m, &env, &stopManager, "a valid TenantCluster is admitted", answers)
}
