package machine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// TestMain runs a real API server and cert-manager, kubefarm-manager
// in-process as it ships (its webhook server with a certificate cert-manager
// issued), and the generated webhook configuration (failurePolicy Fail)
// pointing at it.
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
	// The webhook is up once it answers: an unclaimed Machine (dry run) is
	// refused by it rather than by a failed call.
	probe := machine("default", "probe", "probe-pool", "10.254.0.1", "02:fe:00:00:00:01")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "not claimed"), nil
	})
	if err != nil {
		return 1, errors.New("the Machine webhook never answered")
	}
	return m.Run(), nil
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "claims-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func machine(ns, name, pool, ip string, macs ...string) *kubefarmv1.Machine {
	return &kubefarmv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubefarmv1.MachineSpec{Pool: pool, Cluster: "c", Hostname: name, MACs: macs, IP: ip,
			DesiredImage: "img"},
	}
}
