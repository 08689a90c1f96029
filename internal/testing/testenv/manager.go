package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubefarm/kubefarm/internal/manager"
)

// StartManager runs kubefarm-manager in-process, built by internal/manager as
// it ships, with its webhook server on a free loopback port serving a
// certificate cert-manager issued (so every test that starts a manager also
// exercises the TLS set-up production uses). opts sets everything else;
// metrics and probes are off unless opts says otherwise. With
// installWebhooks, the generated webhook configuration is installed pointing
// at it. stop stops the manager and waits for it.
func (e *Env) StartManager(ctx context.Context, opts manager.Options, installWebhooks bool) (mgr ctrl.Manager, stop func(), err error) {
	certDir, caPEM, err := e.IssueServingCertificate(ctx, "kubefarm-system")
	if err != nil {
		return nil, nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, nil, err
	}
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.ProbeAddr == "" {
		opts.ProbeAddr = "0"
	}
	opts.WebhookHost, opts.WebhookPort, opts.WebhookCertDir = "127.0.0.1", port, certDir
	mgr, err = manager.New(e.Config, opts)
	if err != nil {
		return nil, nil, err
	}
	stop = RunManager(mgr)
	if installWebhooks {
		if err := e.InstallWebhooks(ctx, port, caPEM); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return mgr, stop, nil
}

// BareManagerT is a controller-runtime manager on the environment with no
// controller, webhook, metrics or probe, for a test that registers just the
// controllers it exercises; it is started and stopped by the caller
// (RunManager).
func (e *Env) BareManagerT(t testing.TB) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: e.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// MainWithWebhooks is the TestMain of a webhook package: a real API server
// with cert-manager, kubefarm-manager in-process as it ships (its webhook
// server with a certificate cert-manager issued) and the generated webhook
// configuration (failurePolicy Fail) pointing at it. It waits until
// answers says the webhook answers (what, in the error when it never
// does), sets *env for the tests, runs them, stops everything and exits
// with their code. *stop stops the manager early (a test of failing
// closed); calling it again is harmless.
func MainWithWebhooks(m *testing.M, env **Env, stop *func(), what string, answers func(context.Context, *Env) bool) {
	code, err := runWithWebhooks(m, env, stop, what, answers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration environment:", err)
		code = 1
	}
	os.Exit(code)
}

func runWithWebhooks(m *testing.M, envp **Env, stop *func(), what string, answers func(context.Context, *Env) bool) (int, error) {
	env, err := Start(Options{CertManager: true})
	var stopManager func()
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
	*envp = env
	ctx := context.Background()
	var stopOnce func()
	if _, stopOnce, err = env.StartManager(ctx, manager.Options{}, true); err != nil {
		return 1, err
	}
	var once sync.Once
	stopManager = func() { once.Do(stopOnce) }
	*stop = stopManager
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return answers(ctx, env), nil
	})
	if err != nil {
		return 1, fmt.Errorf("the webhook never answered: %s", what)
	}
	return m.Run(), nil
}
