// Package manager wires kubefarm's controllers and webhooks into a
// controller-runtime manager. cmd/kubefarm-manager and the integration tests
// both build the manager here, so tests exercise the wiring that ships.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/csrapproval"
	"github.com/kubefarm/kubefarm/controllers/machinenode"
	"github.com/kubefarm/kubefarm/controllers/machinepower"
	"github.com/kubefarm/kubefarm/controllers/machineremoval"
	"github.com/kubefarm/kubefarm/controllers/nodepool"
	"github.com/kubefarm/kubefarm/controllers/rollout"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/internal/alertgate"
	"github.com/kubefarm/kubefarm/internal/tenantcache"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/drivers"
)

// Options configure the manager; cmd/kubefarm-manager maps its flags onto them.
type Options struct {
	MetricsAddr      string
	ProbeAddr        string
	WebhookHost      string
	WebhookPort      int
	WebhookCertDir   string
	LeaderElect      bool
	LeaderElectionNS string
	LeaderElectionID string
	LeaseDuration    time.Duration
	RenewDeadline    time.Duration
	GracefulShutdown time.Duration
	// ImageRegistry is the registry prefix of the tenant control plane
	// images (kube-apiserver, etcd, ...); empty means registry.k8s.io.
	ImageRegistry string
	// EtcdToolsImage is the whole reference of the image with
	// kubefarm-etcd (the kubefarm-manager image itself), which the etcd
	// backup CronJobs and restores run; empty refuses spec.etcd.backup and
	// spec.etcd.restoreFrom.
	EtcdToolsImage string
	// AddonsResync is how often tenant add-ons are applied again to repair
	// changes made inside a tenant; zero means the controller's default.
	AddonsResync time.Duration
	// PXENamespace is where kubefarm-pxe runs; the TenantCluster controller
	// writes each tenant's token issuer credential there. Empty writes none.
	PXENamespace string
	// DialTenant is how the TenantCluster controller makes the client of a
	// tenant's API server, which it keeps per tenant; nil dials the tenant
	// at its in-cluster address. Tests, whose tenants are stand-ins, set it.
	DialTenant tenantcluster.DialTenant
	// DialEtcd is how the TenantCluster controller reaches a tenant's etcd
	// to change its membership; nil dials member 0's client URL. Tests,
	// whose etcd members are local processes, set it.
	DialEtcd tenantcluster.DialEtcd
	// RolloutTenants is how the rollout reaches a tenant's Nodes and pods;
	// nil uses the manager's tenant cache (internal/tenantcache), which
	// connects with each tenant's internal admin kubeconfig Secret. Tests
	// whose tenants are stand-ins set it.
	RolloutTenants rollout.Tenants
	// PowerDrivers drive the machines' power (the machinepower
	// controller's reads and requested operations, the rollout's resets);
	// nil is drivers.New(), the drivers kubefarm ships.
	PowerDrivers power.Drivers
	// BMCTimeout bounds one operation of the BMC power drivers (ipmi,
	// redfish); zero is each driver's default. Up to
	// drivers.MaxTimeout. The machinepower and machine removal
	// controllers' own bound on one operation grows with it
	// (drivers.Options.CallerBound).
	BMCTimeout time.Duration
	// PowerPollInterval is how often a machine's power state is read
	// (jittered ±20%); zero is machinepower.DefaultInterval (5 minutes).
	PowerPollInterval time.Duration
	// RolloutPoll is how often a pool with updates in flight is looked at
	// again; zero is rollout.DefaultPoll.
	RolloutPoll time.Duration
	// AlertSources are the --alert-source values, name=URL, of the
	// Prometheus-compatible APIs a NodePool's spec.rollout.alertGate may
	// name (internal/alertgate).
	AlertSources []string
	// AlertSourceAuth are the --alert-source-auth values, name=DIR: the
	// directory (a mounted Secret) of a source's CA and credentials.
	AlertSourceAuth []string
	// NotifyDeniedCIDRs and NotifyAllowedCIDRs are comma-separated
	// prefixes the rollout's notifications may not, or may after all,
	// connect to, beyond the fixed refusals (loopback, link-local, cloud
	// metadata, multicast, the admin API server's addresses): see
	// internal/fetchguard.
	NotifyDeniedCIDRs, NotifyAllowedCIDRs string
	// RemovalPowerOff powers off a machine with spec.power once its Node
	// has left the tenant (controllers/machineremoval); nil is the
	// machine's power driver (PowerDrivers).
	RemovalPowerOff func(ctx context.Context, m *kubefarmv1.Machine) error

	// cacheAllSecrets caches every Secret of the cluster, as the manager
	// did before OwnedSecrets: for the memory benchmark's baseline only.
	cacheAllSecrets bool
	// alerts are New's alert sources (nil: none configured).
	alerts rollout.AlertReader
	// secretEvents is New's cache of Secret names (newSecretEvents).
	secretEvents cache.Cache
}

// NewScheme knows every kind the manager reads or writes.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, kubefarmv1.AddToScheme, certmanagerv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// powerDriverOptions are the options of the power drivers; New checks
// them before anything else.
func (o Options) powerDriverOptions() drivers.Options { return drivers.Options{Timeout: o.BMCTimeout} }

// New builds a manager with every webhook and health check registered.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	// Options are refused before the manager reaches the API server.
	if err := opts.powerDriverOptions().Validate(); err != nil {
		return nil, fmt.Errorf("manager Options.BMCTimeout (--bmc-timeout): %w", err)
	}
	alerts, err := alertgate.New(opts.AlertSources, alertgate.Options{Auth: opts.AlertSourceAuth})
	if err != nil {
		return nil, fmt.Errorf("manager Options.AlertSources (--alert-source, --alert-source-auth): %w", err)
	}
	if len(opts.AlertSources) > 0 {
		opts.alerts = alerts
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Only the Secrets kubefarm makes (secrets.go).
		Cache:                  secretCache(opts.cacheAllSecrets),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.WebhookCertDir,
		}),
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.LeaseDuration,
		RenewDeadline:                 &opts.RenewDeadline,
		GracefulShutdownTimeout:       &opts.GracefulShutdown,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := setupWebhooks(mgr); err != nil {
		return nil, err
	}
	if opts.secretEvents, err = newSecretEvents(cfg, mgr); err != nil {
		return nil, err
	}
	if err := SetupControllers(mgr, opts); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready only once the webhook server answers TLS, so that no admission
	// request is routed to a replica that would fail it closed.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, err
	}
	// The webhooks answer from the informer cache; until it has synced they
	// would judge against an empty cluster, so the replica is not ready.
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches have not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// SetupControllers registers every controller. They run only on the elected
// leader; the webhooks registered beside them run on every replica. The
// controllers that act inside the tenants share one tenant cache: one
// connection and one set of Node and CSR informers per tenant.
func SetupControllers(mgr ctrl.Manager, opts Options) error {
	tenantCache, err := tenantcluster.NewTenantCache(mgr.GetClient())
	if err != nil {
		return err
	}
	// The kubelet skew check reads Nodes from the tenant cache's shared
	// informer; stand-in tenants (DialTenant) are listed through the
	// add-ons' client instead, as the cache dials the real address.
	var tenantNodes tenantcluster.TenantNodes
	if opts.DialTenant == nil {
		tenantNodes = tenantcluster.CachedTenantNodes{Cache: tenantCache}
	}
	if err := (&tenantcluster.Reconciler{
		TenantNodes:   tenantNodes,
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Scheme:        mgr.GetScheme(),
		Recorder:      mgr.GetEventRecorder("tenantcluster-controller"),
		Images:        tenantcluster.DefaultImages(opts.ImageRegistry, opts.EtcdToolsImage),
		AddonsResync:  opts.AddonsResync,
		PXENamespace:  opts.PXENamespace,
		TenantClients: tenantcluster.NewTenantClients(opts.DialTenant),
		DialEtcd:      opts.DialEtcd,
		SecretEvents:  opts.secretEvents,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the TenantCluster controller: %w", err)
	}
	if err := (&nodepool.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("nodepool-controller"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the NodePool controller: %w", err)
	}
	return setupMachineControllers(mgr, opts, tenantCache)
}

// setupMachineControllers registers the controllers of the pools'
// machines: the rollout, power, the tenant's view of each machine's node
// (serving CSRs, NodeReady) and removal.
func setupMachineControllers(mgr ctrl.Manager, opts Options, tenantCache *tenantcache.Cache) error {
	tenants := opts.RolloutTenants
	if tenants == nil {
		tenants = rollout.CachedTenants{Cache: tenantCache}
	}
	driverOpts := opts.powerDriverOptions()
	powerDrivers := opts.PowerDrivers
	if powerDrivers == nil {
		powerDrivers = drivers.NewWith(driverOpts)
	}
	// The Secrets spec.power names are the operator's: read uncached, as
	// the manager's cache holds only kubefarm's own.
	powerControl := func(recorder string) *power.Control {
		return &power.Control{Reader: mgr.GetAPIReader(), Drivers: powerDrivers, Recorder: mgr.GetEventRecorder(recorder)}
	}
	notifier, err := newNotifier(mgr, opts)
	if err != nil {
		return err
	}
	if err := (&rollout.Reconciler{
		Client:       mgr.GetClient(),
		Recorder:     mgr.GetEventRecorder("rollout-controller"),
		Tenants:      tenants,
		Power:        powerControl("rollout-controller"),
		Poll:         opts.RolloutPoll,
		Notifier:     notifier,
		SecretReader: mgr.GetAPIReader(),
		Alerts:       opts.alerts,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the rollout controller: %w", err)
	}
	if err := (&machinepower.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Power:     *powerControl("machinepower-controller"),
		Recorder:  mgr.GetEventRecorder("machinepower-controller"),
		Interval:  opts.PowerPollInterval,
		// An operator who gives slow BMCs more time means the whole
		// operation: the controller's minute would otherwise cut a
		// longer driver timeout short. The rollout's reset has no bound
		// of its own but the driver's.
		Timeout: driverOpts.CallerBound(machinepower.DefaultTimeout),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the Machine power controller: %w", err)
	}
	if err := (&csrapproval.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("csrapproval-controller"),
		Tenants:  tenantCache,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the kubelet serving CSR approval controller: %w", err)
	}
	if err := (&machinenode.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("machinenode-controller"),
		Tenants:  tenantCache,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the Machine node controller: %w", err)
	}
	removalPowerOff := opts.RemovalPowerOff
	if removalPowerOff == nil {
		removalPowerOff = powerControl("machineremoval-controller").Off
	}
	if err := (&machineremoval.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("machineremoval-controller"),
		Tenants:   tenantCache,
		PowerOff:  removalPowerOff,
		// As machinepower's: the driver's timeout, not the caller's, is
		// the operator's knob.
		PowerOffTimeout: driverOpts.CallerBound(machineremoval.DefaultPowerOffTimeout),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the Machine removal controller: %w", err)
	}
	return nil
}
