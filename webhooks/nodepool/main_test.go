package nodepool_test

import (
	"context"
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
	// The webhook answers once a valid pool passes admission (dry run).
	probe := pool("default", "probe", machine("p", "02:ff:00:00:00:01", "10.255.0.1"))
	probe.Spec.Network.Subnet = "10.255.0.0/24"
	answers := func(ctx context.Context, env *testenv.Env) bool {
		return env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil
	}
	testenv.MainWithWebhooks(m, &env, &stopManager, "a valid NodePool is admitted", answers)
}

func newNamespace(t *testing.T) string { return env.NewNamespace(t, "addresses-") }

func machine(name, mac, ip string) kubefarmv1.MachineEntry {
	return kubefarmv1.MachineEntry{Name: name, MACs: []string{mac}, IP: ip}
}

func pool(ns, name string, machines ...kubefarmv1.MachineEntry) *kubefarmv1.NodePool {
	return &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c", BootImage: "img",
			Network:  kubefarmv1.BootNetwork{Subnet: "10.40.0.0/16"},
			Machines: machines,
		},
	}
}
