// Command kubefarm-pxe boots kubefarm's bare-metal machines: DHCPv4 (static
// leases from Machines and NodePools), TFTP for the iPXE binaries, and HTTP
// for iPXE scripts and boot artifacts.
//
// It runs as hostNetwork pods on the nodes of the boot network, several
// replicas at once. There is no leader election: every replica answers,
// because the answers are derived from the same API objects and agree, and a
// machine must be able to boot while any one replica is down. State is read
// through a controller-runtime cache, so when the admin API server goes away
// the replicas keep serving what they last knew.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/imagecheck"
	"github.com/kubefarm/kubefarm/pxe/inventory"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/routeradv"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// gcPercent is kubefarm-pxe's garbage collection target when GOGC is not
// set: the heap may grow 50% over what is live between collections instead
// of Go's default 100%. Every replica holds every Machine, and allocation per
// packet is small, so the trade is cheap: with 20,000 Machines `make bench`
// measured 90 MiB resident instead of 121 MiB (with the Machines then still
// in the informer cache), at the same CPU per DHCP exchange (86 against 89
// µs at 5,000/s). GOGC in the environment overrides it, as for any Go
// program.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	var o options
	o.register(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("kubefarm-pxe")

	if err := run(ctrl.SetupSignalHandler(), o, log); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
	log.Info("stopped")
}

func run(ctx context.Context, o options, log logr.Logger) error {
	boot, err := o.bootServer()
	if err != nil {
		return err
	}
	serverIP, httpPort, baseURL := boot.ip, boot.httpPort, boot.base.String()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	c, err := cache.New(cfg, o.cacheOptions(scheme))
	if err != nil {
		return fmt.Errorf("creating the cache: %w", err)
	}

	// Informers are registered before the cache starts. The Machines,
	// thousands of them on every replica, are not in the cache: the
	// inventory keeps one compact record of each, fed by its own reflector.
	inv, err := inventory.New(ctx, c, log.WithName("inventory"))
	if err != nil {
		return err
	}
	if err := inv.Register(reg); err != nil {
		return err
	}
	machines, err := httpboot.NewCacheMachines(ctx, c, inv, log.WithName("machines"))
	if err != nil {
		return err
	}
	watcher, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating the Machines' watch client: %w", err)
	}
	issuer, err := joinTokens(ctx, c, o, log)
	if err != nil {
		return err
	}
	// Interfaces are set only with an issuer: a nil *Issuer in one would
	// not compare equal to nil, and /config would call it.
	var tokens httpboot.JoinTokens
	var tenants httpboot.Tenants
	if issuer != nil {
		tokens, tenants = issuer, issuer
	}

	// Writes go straight to the API server: /report's status patch,
	// dynamic leases, nothing else.
	writer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	var allocator *dynamic.Allocator
	if o.dynamicRanges {
		// Registered before the cache starts (its indexes), so the
		// DHCPLeases are part of the sync that makes the replica ready.
		if allocator, err = dynamic.New(ctx, dynamic.Config{Cache: c, Client: writer, APIReader: writer, Static: inv}); err != nil {
			return err
		}
	}

	storeCfg, err := o.storeConfig(ctx, cfg.Host)
	if err != nil {
		return err
	}
	store, err := httpboot.NewStore(storeCfg)
	if err != nil {
		return fmt.Errorf("artifact cache: %w", err)
	}
	defer store.Close()

	// One broadcaster (one client, one bounded queue) for every Event this
	// replica writes: Machines' boot stages and BootImages' checks.
	var recorder record.EventRecorder
	if o.eventInterval > 0 || o.verifyImages {
		rec, stopEvents, err := events.StartAPI(cfg, scheme, o.nodeName)
		if err != nil {
			return err
		}
		defer stopEvents()
		recorder = rec
	}
	eventSink, err := machineEvents(recorder, inv, o, reg, log.WithName("events"))
	if err != nil {
		return err
	}
	imageCheck, err := bootImageCheck(recorder, c, writer, store, o, log)
	if err != nil {
		return err
	}

	var synced sync.Once
	ready := make(chan struct{})
	hm, err := httpboot.NewMetrics(reg)
	if err != nil {
		return err
	}
	// The boots in progress: DHCP arms them, HTTP issues their secrets.
	windows := httpboot.NewBootWindows(o.bootWindow, nil)
	handler, err := httpboot.NewHandler(httpboot.Config{
		BaseURL:       baseURL,
		IPXEDir:       o.ipxeDir,
		EnsureTimeout: o.ensureTimeout,
		Windows:       windows,
		Recorder:      httpboot.StatusRecorder{Client: writer},
		Events:        eventSink,
		// A tenant without a credential (not ready yet, or written into
		// another namespace) makes Issue fail: /config answers 503 to the
		// machine, which retries, and logs which Secret is missing.
		Tokens: tokens,
		// The tenant's endpoint, CA and DNS for the agent come from the
		// same Secret as the credential (bootstraptoken.KeyNodeFacts).
		Tenants: tenants,
		Ready: func() bool {
			select {
			case <-ready:
				return true
			default:
				return false
			}
		},
	}, machines, store, hm, reg, log.WithName("http"))
	if err != nil {
		return err
	}

	// Open every socket before anything serves, so a bad address fails the
	// start instead of leaving a half-working replica.
	if err := o.http.validate(); err != nil {
		return err
	}
	rawHTTPLn, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	httpLn, err := o.bootListener(rawHTTPLn, reg)
	if err != nil {
		rawHTTPLn.Close()
		return err
	}
	// /healthz and /metrics, on a listener of their own (never the boot
	// network's); closed by probes.Shutdown, or here on an early return.
	probeLn, err := o.listenProbes()
	if err != nil {
		httpLn.Close()
		return err
	}
	if probeLn != nil {
		defer probeLn.Close()
	}
	var tftpConn net.PacketConn
	var tftpSrv *tftp.Server
	if o.tftpAddr != "" {
		tm, err := tftp.NewMetrics(reg)
		if err != nil {
			return err
		}
		tftpSrv, err = tftp.NewServer(o.tftpConfig(), tm, log.WithName("tftp"))
		if err != nil {
			return err
		}
		if tftpConn, err = tftp.Listen(o.tftpAddr); err != nil {
			httpLn.Close()
			return fmt.Errorf("tftp: %w", err)
		}
	}
	var dhcpSrv *dhcp.Server
	var dhcpConns []net.PacketConn
	var raResponder *routeradv.Responder
	if o.iface != "" {
		dcfg := dhcp.Config{
			ServerID:  serverIP,
			Boot:      bootfile.Config{Server: serverIP, HTTPPort: httpPort, UEFIx64Binary: o.uefiBinary},
			ProxyDHCP: o.proxyDHCP,
			Workers:   o.workers,
			QueueSize: o.queue,
			Events:    eventSink,
			Boots:     windows,
		}
		if allocator != nil {
			dcfg.Dynamic = allocator
			dcfg.DynamicWorkers = o.dynamicWorkers
		}
		dm, err := dhcp.NewMetrics(reg)
		if err != nil {
			return err
		}
		if dhcpSrv, err = dhcp.NewServer(dcfg, inv, dm, log.WithName("dhcp")); err != nil {
			return err
		}
		if dhcpConns, err = dhcp.Listen(o.iface, dcfg); err != nil {
			httpLn.Close()
			if tftpConn != nil {
				tftpConn.Close()
			}
			return fmt.Errorf("dhcp: %w", err)
		}
		if o.answerRS {
			if raResponder, err = listenRouterSolicitations(o.iface, reg, log); err != nil {
				httpLn.Close()
				if tftpConn != nil {
					tftpConn.Close()
				}
				for _, c := range dhcpConns {
					c.Close()
				}
				return err
			}
		}
	} else {
		log.Info("no --interface: DHCP disabled")
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16) // more than the services, so no sender ever blocks
	start := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", what, err)
			}
		}()
	}

	start("cache", func() error { return c.Start(ctx) })
	if r, ok := eventSink.(*events.Recorder); ok {
		// The Events' per-machine throttle forgets a storm's machines
		// an interval later, also on a replica gone quiet.
		start("events throttle", func() error { r.Run(ctx); return nil })
	}
	start("machines", func() error {
		inv.Run(ctx, inventory.ListWatch(watcher, o.namespace))
		return nil
	})
	start("cache sync", func() error {
		if !c.WaitForCacheSync(ctx) {
			return errors.New("cache did not sync")
		}
		// Ready only once the inventory holds every Machine known at start
		// with its lease, not merely once the cache has the pools.
		if !toolscache.WaitForCacheSync(ctx.Done(), inv.HasSynced) {
			return errors.New("the inventory of Machines did not sync")
		}
		// The first list's decoded Machines are garbage once compacted:
		// give their pages back now rather than over the scavenger's
		// minutes, so the replica's resident memory is what it keeps.
		debug.FreeOSMemory()
		synced.Do(func() { close(ready) })
		log.Info("cache synced", "machines", inv.Machines(), "leases", inv.Len())
		return nil
	})

	// Boot clients send tiny requests and download large files: the
	// limits (a slow header is an attack or a dead client) are by route.
	srv := o.bootHTTPServer(handler)
	start("http", func() error {
		if err := srv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	probes := probeServer(handler.Probes())
	if probeLn != nil {
		start("metrics", func() error {
			if err := probes.Serve(probeLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	if tftpSrv != nil {
		start("tftp", func() error { return tftpSrv.Serve(ctx, tftpConn) })
	}
	if dhcpSrv != nil {
		start("dhcp", func() error {
			// Not before the inventory holds every machine known at start:
			// read earlier, a known machine's DISCOVER would be taken for an
			// unknown MAC and ignored (or leased a dynamic address). The
			// sockets are open already, so what arrives meanwhile waits in
			// their receive buffers (bounded by the kernel, like any burst)
			// and is answered once the inventory is whole.
			select {
			case <-ready:
			case <-ctx.Done():
				for _, c := range dhcpConns {
					c.Close()
				}
				return nil
			}
			return dhcpSrv.Serve(ctx, dhcpConns...)
		})
	}
	if raResponder != nil {
		start("router solicitations", func() error { return raResponder.Serve(ctx) })
	}
	if imageCheck != nil {
		start("bootimage check", func() error {
			// After the sync, so its watch starts from a synced cache
			// instead of timing out while the API server is away.
			select {
			case <-ready:
			case <-ctx.Done():
				return nil
			}
			return imageCheck.Start(ctx)
		})
	}
	log.Info("serving", "serverIP", serverIP.String(), "http", httpLn.Addr().String(), "metrics", o.metricsAddr, "baseURL", baseURL,
		"tftp", o.tftpAddr, "dhcpInterface", o.iface, "proxyDHCP", o.proxyDHCP, "answerRouterSolicitations", raResponder != nil, "ipxeDir", o.ipxeDir, "cacheDir", o.cacheDir)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errs:
		log.Error(runErr, "a service failed; shutting down")
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error(err, "http shutdown")
	}
	if err := probes.Shutdown(sctx); err != nil {
		log.Error(err, "metrics shutdown")
	}
	wg.Wait()
	return runErr
}

func newScheme() (*k8sruntime.Scheme, error) {
	scheme := k8sruntime.NewScheme()
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// joinTokens is the join token issuer of /config, reading the credentials
// of --pod-namespace from c; nil when there is none. It registers its
// informer, so it runs before the cache starts.
func joinTokens(ctx context.Context, c cache.Cache, o options, log logr.Logger) (*jointoken.Issuer, error) {
	if o.podNamespace == "" {
		log.Info("no --pod-namespace (or $POD_NAMESPACE): join tokens disabled, /config answers 503")
		return nil, nil
	}
	// Registered now so that the credentials are part of the cache
	// sync that makes the replica ready.
	if _, err := c.GetInformer(ctx, &corev1.Secret{}); err != nil {
		return nil, fmt.Errorf("watching the token issuer credentials: %w", err)
	}
	issuer, err := jointoken.New(jointoken.Config{Reader: c, Namespace: o.podNamespace, TTL: o.joinTokenTTL})
	if err != nil {
		return nil, fmt.Errorf("--join-token-ttl: %w", err)
	}
	return issuer, nil
}

// bootImageCheck is the BootImage controller of --verify-images (nil
// without it), recording its events through rec. It is built before the
// cache starts and started after it synced.
func bootImageCheck(rec record.EventRecorder, c cache.Cache, writer client.Client, store *httpboot.Store,
	o options, log logr.Logger) (controller.Controller, error) {
	if !o.verifyImages {
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
func machineEvents(rec record.EventRecorder, inv *inventory.Inventory, o options, reg prometheus.Registerer, log logr.Logger) (events.Sink, error) {
	if o.eventInterval <= 0 {
		return nil, nil
	}
	if o.eventQPS <= 0 || o.eventBurst <= 0 {
		return nil, fmt.Errorf("--event-qps (%g) and --event-burst (%d) must be positive; --event-interval 0 turns events off", o.eventQPS, o.eventBurst)
	}
	r := events.New(rec, events.Config{Interval: o.eventInterval, Rate: o.eventQPS, Burst: o.eventBurst, Log: log, UID: inv.UID})
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
