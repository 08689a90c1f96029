// Command kubefarm-manager runs kubefarm's controllers and admission webhooks
// in the admin cluster. Replicas elect a leader for the controllers; every
// replica serves the webhooks.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// options are the manager's flags. Every default is what the operator chart
// uses, so running the binary bare behaves like an installed manager.
type options struct {
	metricsAddr      string
	probeAddr        string
	webhookPort      int
	webhookCertDir   string
	leaderElect      bool
	leaderElectionNS string
	leaderElectionID string
	leaseDuration    time.Duration
	renewDeadline    time.Duration
	gracefulShutdown time.Duration
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080",
		"address the Prometheus /metrics endpoint listens on; \"0\" disables it")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"address the /healthz and /readyz endpoints listen on")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "port the admission webhook server listens on (TLS)")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"directory with tls.crt and tls.key for the webhook server, issued by cert-manager and reloaded on change")
	fs.BoolVar(&o.leaderElect, "leader-elect", true,
		"elect a leader so that only one replica runs the controllers")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "",
		"namespace of the leader election Lease; empty means the namespace the manager runs in")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "kubefarm-manager.kubefarm.io", "name of the leader election Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second,
		"how long followers wait before taking over from a silent leader")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"how long the leader keeps trying to renew before it steps down")
	fs.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second,
		"how long running reconciles may take to finish on shutdown")
}

func main() {
	var opts options
	opts.bind(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(opts); err != nil {
		ctrl.Log.Error(err, "kubefarm-manager failed")
		os.Exit(1)
	}
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

func run(opts options) error {
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:        opts.probeAddr,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: opts.webhookPort, CertDir: opts.webhookCertDir}),
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              opts.leaderElectionID,
		LeaderElectionNamespace:       opts.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.leaseDuration,
		RenewDeadline:                 &opts.renewDeadline,
		GracefulShutdownTimeout:       &opts.gracefulShutdown,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := setupWebhooks(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready only once the webhook server answers TLS, so no API request is
	// routed to a replica that would fail it closed.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	ctrl.Log.Info("starting kubefarm-manager")
	return mgr.Start(ctrl.SetupSignalHandler())
}
