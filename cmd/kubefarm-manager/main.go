// Command kubefarm-manager runs kubefarm's controllers and admission webhooks
// in the admin cluster. Replicas elect a leader for the controllers; every
// replica serves the webhooks.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefarm/kubefarm/controllers/machinepower"
	"github.com/kubefarm/kubefarm/controllers/machineremoval"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/alertgate"
	"github.com/kubefarm/kubefarm/internal/manager"
	"github.com/kubefarm/kubefarm/power/drivers"
	"github.com/kubefarm/kubefarm/power/ipmi"
	"github.com/kubefarm/kubefarm/power/redfish"
)

// bindFlags maps flags onto manager options. Every default is what the
// operator chart uses, so a bare binary behaves like an installed manager.
func bindFlags(fs *flag.FlagSet, o *manager.Options) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080",
		"address the Prometheus /metrics endpoint listens on; \"0\" disables it")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081",
		"address the /healthz and /readyz endpoints listen on")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the admission webhook server binds to; empty means all")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the admission webhook server listens on (TLS)")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"directory with tls.crt and tls.key for the webhook server, issued by cert-manager and reloaded on change")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true,
		"elect a leader so that only one replica runs the controllers")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "",
		"namespace of the leader election Lease; empty means the namespace the manager runs in")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "kubefarm-manager.kubefarm.io", "name of the leader election Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second,
		"how long followers wait before taking over from a silent leader")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"how long the leader keeps trying to renew before it steps down")
	fs.DurationVar(&o.GracefulShutdown, "graceful-shutdown-timeout", 30*time.Second,
		"how long running reconciles may take to finish on shutdown")
	fs.DurationVar(&o.AddonsResync, "tenant-addons-resync", tenantcluster.DefaultAddonsResync,
		"how often each tenant's add-ons (bootstrap RBAC, cluster-info, kubelet config, konnectivity-agent, kube-proxy, "+
			"CoreDNS, the probe-host policy) are applied again, which repairs deletions and edits made inside the tenant")
	fs.StringVar(&o.PXENamespace, "pxe-namespace", "kubefarm-system",
		"namespace kubefarm-pxe runs in: each tenant's token issuer kubeconfig (a tenant identity that may only manage "+
			"bootstrap tokens) is written there as Secret token-issuer-<namespace>-<cluster>-<hash>; empty writes none")
	fs.StringVar(&o.ImageRegistry, "image-registry", "registry.k8s.io",
		"registry prefix of the tenant control plane images (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, "+
			"kas-network-proxy/proxy-server), e.g. a mirror such as mirror.example.com/k8s; the Kubernetes tags follow each "+
			"TenantCluster's spec.version, etcd and Konnectivity use the tags this manager pins")
	fs.StringVar(&o.EtcdToolsImage, "etcd-tools-image", "",
		"whole reference of the image with /usr/local/bin/kubefarm-etcd (this manager's own image; the operator chart "+
			"sets it), which tenants' etcd backup CronJobs and restores run; empty refuses spec.etcd.backup and spec.etcd.restoreFrom")
	fs.DurationVar(&o.PowerPollInterval, "power-poll-interval", machinepower.DefaultInterval,
		"how often each Machine with spec.power has its power state read from its BMC (status.power, the PowerControl "+
			"condition), jittered by ±20% so that a farm's BMCs are not asked at once")
	fs.Func("alert-source", "a Prometheus-compatible API a NodePool's spec.rollout.alertGate may name, as `name=URL` "+
		"(repeatable; for example prod=http://prometheus.monitoring.svc:9090): while alerts matching a pool's patterns "+
		"fire there, none of its machines starts an update", func(v string) error {
		if _, _, err := alertgate.ParseSource(v); err != nil {
			return err
		}
		o.AlertSources = append(o.AlertSources, v)
		return nil
	})
	fs.Func("alert-source-auth", "the CA and credentials of an --alert-source, as `name=DIR` (repeatable): DIR, an absolute "+
		"path (a mounted Secret), may hold ca.crt (PEM, verifies an https source instead of the system roots), token (a "+
		"bearer token) or username and password (basic authentication); the token and password are read for every request", func(v string) error {
		if _, _, err := alertgate.ParseAuth(v); err != nil {
			return err
		}
		o.AlertSourceAuth = append(o.AlertSourceAuth, v)
		return nil
	})
	fs.StringVar(&o.NotifyDeniedCIDRs, "notify-denied-cidrs", "",
		"comma-separated CIDRs the rollout's notifications (spec.rollout.notify) may not connect to, such as the admin "+
			"cluster's Service and Pod ranges; loopback, link-local, cloud metadata, multicast and the API server's "+
			"addresses are always refused")
	fs.StringVar(&o.NotifyAllowedCIDRs, "notify-allowed-cidrs", "",
		"comma-separated CIDRs the rollout's notifications may connect to although --notify-denied-cidrs or the fixed "+
			"refusals (not the API server) cover them: an in-cluster receiver's Service range, say")
	fs.Var((*bmcTimeout)(&o.BMCTimeout), "bmc-timeout",
		fmt.Sprintf("the `duration` one operation of the ipmi and redfish power drivers may take (a power read, on, off "+
			"or reset: session, requests and retries), for BMCs that answer slowly (some iDRACs and iLOs under load take "+
			"over 20s to reset); 0 means each driver's own (ipmi %s, redfish %s); at most %s. The power and machine "+
			"removal controllers' own bound of one operation (%s, %s) grows to it plus %s when that is longer",
			ipmi.DefaultTimeout, redfish.DefaultTimeout, drivers.MaxTimeout,
			machinepower.DefaultTimeout, machineremoval.DefaultPowerOffTimeout, drivers.CallerMargin))
}

// bmcTimeout is --bmc-timeout: a duration that flag parsing refuses when
// drivers.Options would (the flag package names the flag in the error).
type bmcTimeout time.Duration

func (b *bmcTimeout) String() string { return time.Duration(*b).String() }

func (b *bmcTimeout) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration such as 45s or 2m: %w", err)
	}
	if err := (drivers.Options{Timeout: d}).Validate(); err != nil {
		return err
	}
	*b = bmcTimeout(d)
	return nil
}

func main() {
	var opts manager.Options
	bindFlags(flag.CommandLine, &opts)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("kubefarm-manager")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		log.Error(err, "setting up the manager")
		os.Exit(1)
	}
	log.Info("starting")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
