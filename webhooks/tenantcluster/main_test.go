package tenantcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/internal/testenv"
)

var (
	env *testenv.Env
	// stopManager stops the in-process kubefarm-manager and waits for it.
	stopManager func()
)

// TestMain runs a real API server and cert-manager, has cert-manager issue the
// webhook's serving certificate, starts kubefarm-manager (built by
// internal/manager, as it ships) with it, and installs the generated webhook
// configuration pointing at it over TLS. The table tests of this package run
// in the same binary; they just do not use the environment.
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
	// The webhook is up once a valid cluster passes admission (dry run).
	probe := tenantCluster("default", "probe", "v1.34.4")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil, nil
	})
	if err != nil {
		return 1, errors.New("the webhook never admitted a valid TenantCluster")
	}
	return m.Run(), nil
}
