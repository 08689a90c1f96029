package server

// The optional components, each off by an option: join tokens, the
// BootImage check, Events on Machines, router advertisements.

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/imagecheck"
	"github.com/kubefarm/kubefarm/pxe/inventory"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/routeradv"
)

// joinTokens is the join token issuer of /config, reading the credentials
// of --pod-namespace from c; nil when there is none. It registers its
// informer, so it runs before the cache starts.
func joinTokens(ctx context.Context, c cache.Cache, o Options, log logr.Logger) (*jointoken.Issuer, error) {
	if o.PodNamespace == "" {
		log.Info("no --pod-namespace (or $POD_NAMESPACE): join tokens disabled, /config answers 503")
		return nil, nil
	}
	// Registered now so that the credentials are part of the cache
	// sync that makes the replica ready.
	if _, err := c.GetInformer(ctx, &corev1.Secret{}); err != nil {
		return nil, fmt.Errorf("watching the token issuer credentials: %w", err)
	}
	issuer, err := jointoken.New(jointoken.Config{Reader: c, Namespace: o.PodNamespace, TTL: o.JoinTokenTTL})
	if err != nil {
		return nil, fmt.Errorf("--join-token-ttl: %w", err)
	}
	return issuer, nil
}

// bootImageCheck is the BootImage controller of --verify-images (nil
// without it), recording its events through rec. It is built before the
// cache starts and started after it synced.
func bootImageCheck(rec record.EventRecorder, c cache.Cache, writer client.Client, store *httpboot.Store,
	o Options, log logr.Logger) (controller.Controller, error) {
	if !o.VerifyImages {
		log.Info("--verify-images=false: artifacts are fetched when a machine first asks for them")
		return nil, nil
	}
	ctl, err := imagecheck.New(c, &imagecheck.Reconciler{Reader: c, Client: writer, Store: store, Recorder: imagecheck.CoreRecorder(rec)},
		imagecheck.Options{}, log.WithName("imagecheck"))
	if err != nil {
		return nil, fmt.Errorf("bootimage check: %w", err)
	}
	return ctl, nil
}

// machineEvents is the sink of the Events on Machines (nil with
// --event-interval 0) over rec, client-go's broadcaster: throttled per
// machine and bounded for the replica (--event-qps, --event-burst) before,
// queued and aggregated after, so a boot storm or a slow API server never
// delays an answer and never floods the API server.
func machineEvents(rec record.EventRecorder, inv *inventory.Inventory, o Options, reg prometheus.Registerer, log logr.Logger) (events.Sink, error) {
	if o.EventInterval <= 0 {
		return nil, nil
	}
	if err := o.eventBudget(); err != nil {
		return nil, err
	}
	r := events.New(rec, events.Config{Interval: o.EventInterval, Rate: o.EventQPS, Burst: o.EventBurst, Log: log, UID: inv.UID})
	return r, r.Register(reg)
}

// listenRouterSolicitations opens the IPv6 router solicitation responder on
// the boot interface. An interface without IPv6 gets none, with a warning:
// iPXE then waits for IPv6 as it would anyway.
func listenRouterSolicitations(iface string, reg prometheus.Registerer, log logr.Logger) (*routeradv.Responder, error) {
	m, err := routeradv.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	r, err := routeradv.Listen(iface, 0, 0, m, log.WithName("ipv6"))
	if errors.Is(err, routeradv.ErrNoLinkLocal) {
		log.Info("not answering IPv6 router solicitations: iPXE waits about 15 s for IPv6 on every boot", "reason", err.Error())
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("router solicitations: %w", err)
	}
	return r, nil
}

// discovery is the recorder of discovery reports of --discovery (nil
// without it), registering its watch of DiscoveredMachines: it runs
// before the cache starts. Its Warnings on NodePools (the cap refusing a
// report, a Hold pool's BootImage missing) go through rec (nil: only the
// log lines).
func discovery(ctx context.Context, c cache.Cache, writer client.Client, rec record.EventRecorder, o Options,
	reg prometheus.Registerer, log logr.Logger) (*httpboot.Discovery, error) {
	if !o.Discovery {
		return nil, nil
	}
	return httpboot.NewDiscovery(ctx, c, httpboot.DiscoveryConfig{
		MaxMachines: o.DiscoveryMaxMachines, Rate: o.DiscoveryRate, Burst: o.DiscoveryBurst,
		Client: writer, Events: rec,
	}, reg, log.WithName("discovery"))
}
