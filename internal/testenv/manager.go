package testenv

import (
	"context"
	"testing"

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
