package nodepool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testenv"
)

var (
	env *testenv.Env
	// stopManager stops the in-process kubefarm-manager and waits for it.
	stopManager func()
)

// TestMain runs a real API server and cert-manager, has cert-manager issue the
// webhook's serving certificate, starts kubefarm-manager's webhook server
// in-process with it, and installs the generated webhook configuration
// (failurePolicy Fail) pointing at it.
func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration environment:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	env, err = testenv.Start(testenv.Options{CertManager: true})
	if env != nil {
		defer func() {
			if stopManager != nil {
				stopManager()
			}
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the integration environment:", err)
			}
		}()
	}
	if err != nil {
		return 1, err
	}
	ctx := context.Background()
	if _, stopManager, err = env.StartManager(ctx, manager.Options{}, true); err != nil {
		return 1, err
	}
	// The webhook is up once a valid pool passes admission (dry run).
	probe := pool("default", "probe", machine("p", "02:ff:00:00:00:01", "10.255.0.1"))
	probe.Spec.Network.Subnet = "10.255.0.0/24"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil, nil
	})
	if err != nil {
		return 1, errors.New("the webhook never admitted a valid NodePool")
	}
	return m.Run(), nil
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "addresses-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

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
