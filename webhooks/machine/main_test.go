package machine_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
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
	// The webhook answers once an unclaimed Machine (dry run) is refused by
	// it rather than by a failed call.
	probe := machine("default", "probe", "probe-pool", "10.254.0.1", "02:fe:00:00:00:01")
	answers := func(ctx context.Context, env *testenv.Env) bool {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "not claimed")
	}
	testenv.MainWithWebhooks(m, &env, &stopManager, "an unclaimed Machine is refused", answers)
}

func newNamespace(t *testing.T) string { return env.NewNamespace(t, "claims-") }

func machine(ns, name, pool, ip string, macs ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubefarmv1.MachineSpec{Pool: pool, Cluster: "c", Hostname: name, MACs: macs, IP: ip,
			DesiredImage: "img"},
	}
}
