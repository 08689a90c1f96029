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
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/leases"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// options are the command line. Defaults are what a hostNetwork pod on a
// boot network wants; --server-ip is the one flag with no sensible default.
type options struct {
	iface           string
	serverIP        string
	httpAddr        string
	httpPort        int
	tftpAddr        string
	ipxeDir         string
	uefiBinary      string
	cacheDir        string
	proxyDHCP       bool
	workers         int
	queue           int
	tftpTimeout     time.Duration
	tftpRetries     int
	tftpTransfers   int
	maxArtifact     int64
	ensureTimeout   time.Duration
	insecureReg     bool
	namespace       string
	shutdownTimeout time.Duration
	bootWindow      time.Duration
	podNamespace    string
	joinTokenTTL    time.Duration
	eventInterval   time.Duration
	nodeName        string
	dynamicRanges   bool
	dynamicWorkers  int
}

func bindFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.iface, "interface", "",
		"network interface of the boot network the DHCP server listens on (port 67, and 4011 with --proxy-dhcp); empty disables DHCP")
	fs.StringVar(&o.iface, "dhcp-listen", "", "alias of --interface")
	fs.StringVar(&o.serverIP, "server-ip", "",
		"this server's IPv4 address on the boot network: DHCP server identifier, TFTP next-server and the host of every boot URL (required)")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "address the HTTP boot service (scripts, artifacts, /healthz, /metrics) listens on")
	fs.IntVar(&o.httpPort, "http-port", 0,
		"port booting machines use to reach the HTTP service, when it differs from --http-addr's (e.g. behind a hostPort); 0 uses --http-addr's")
	fs.StringVar(&o.tftpAddr, "tftp-addr", ":69", "address the TFTP service listens on; empty disables TFTP")
	fs.StringVar(&o.ipxeDir, "ipxe-dir", tftp.DefaultDir, "directory with the iPXE binaries served over TFTP and HTTP")
	fs.StringVar(&o.uefiBinary, "uefi-binary", bootfile.BinaryUEFIx64,
		"iPXE binary for x86-64 UEFI clients: ipxe.efi, or snponly.efi for firmware whose NIC drivers misbehave under iPXE")
	fs.StringVar(&o.cacheDir, "cache-dir", "/var/cache/kubefarm-pxe", "directory of the content-addressed artifact cache")
	fs.BoolVar(&o.proxyDHCP, "proxy-dhcp", false,
		"proxyDHCP mode: another DHCP server hands out addresses; answer PXE clients with boot options only")
	fs.IntVar(&o.workers, "workers", 0, "DHCP worker goroutines; 0 means 2 x GOMAXPROCS")
	fs.IntVar(&o.queue, "queue", 1024, "DHCP packets that may wait for a worker before new ones are dropped")
	fs.DurationVar(&o.tftpTimeout, "tftp-timeout", 2*time.Second, "how long TFTP waits for each acknowledgement before resending")
	fs.IntVar(&o.tftpRetries, "tftp-retries", 5, "TFTP resends of one block before a transfer is abandoned")
	fs.IntVar(&o.tftpTransfers, "tftp-max-transfers", 64, "concurrent TFTP transfers; requests beyond are refused at once")
	fs.Int64Var(&o.maxArtifact, "max-artifact-size", 4<<30, "largest artifact (kernel, initrd, rootfs) the cache downloads, in bytes")
	fs.DurationVar(&o.ensureTimeout, "artifact-wait", 2*time.Minute,
		"how long a script request waits for its artifacts to be cached before answering 503 (iPXE retries)")
	fs.BoolVar(&o.insecureReg, "insecure-registry", false, "reach OCI registries over plain HTTP")
	fs.StringVar(&o.namespace, "namespace", "", "only serve Machines and NodePools of this namespace; empty means all")
	fs.DurationVar(&o.bootWindow, "boot-window", 10*time.Minute,
		"how long after serving a machine's iPXE script its agent may fetch its boot configuration (once)")
	fs.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace this replica runs in (default $POD_NAMESPACE): the token issuer credentials kubefarm-manager writes there "+
			"(its --pxe-namespace) are the only Secrets read, so join tokens need only get/list/watch on Secrets of this namespace; "+
			"empty disables join tokens (/config answers 503)")
	fs.DurationVar(&o.joinTokenTTL, "join-token-ttl", jointoken.DefaultTTL,
		"how long a machine's join token (a bootstrap token in its tenant cluster) is valid; at most 24h")
	fs.BoolVar(&o.dynamicRanges, "dynamic-ranges", true,
		"answer MACs of no Machine from the spec.network.dynamicRange of the NodePool serving their network, with leases stored as DHCPLease objects; "+
			"false ignores every unknown MAC (and needs no access to dhcpleases)")
	fs.IntVar(&o.dynamicWorkers, "dynamic-workers", dhcp.DefaultDynamicWorkers,
		"goroutines answering unknown MACs from dynamic ranges (each makes API calls, apart from the static workers)")
	fs.DurationVar(&o.eventInterval, "event-interval", events.DefaultInterval,
		"Events on Machines (Offered, Acked, ScriptServed, ImageServed, ConfigServed, BootReported, Refused, Declined): "+
			"the same event of one machine is recorded at most once per interval; 0 disables events")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "node this replica runs on (default $NODE_NAME): the source host of its events")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"how long in-flight HTTP requests and TFTP transfers may take to finish on SIGTERM")
}

func main() {
	var o options
	bindFlags(flag.CommandLine, &o)
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
	serverIP := net.ParseIP(o.serverIP).To4()
	if serverIP == nil {
		return fmt.Errorf("--server-ip %q is not an IPv4 address", o.serverIP)
	}
	httpPort := o.httpPort
	if httpPort == 0 {
		_, p, err := net.SplitHostPort(o.httpAddr)
		if err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
		if httpPort, err = strconv.Atoi(p); err != nil || httpPort == 0 {
			return fmt.Errorf("--http-addr %q needs an explicit port", o.httpAddr)
		}
	}
	baseURL := "http://" + serverIP.String()
	if httpPort != 80 {
		baseURL += ":" + strconv.Itoa(httpPort)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	scheme := k8sruntime.NewScheme()
	if err := kubefarmv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	copts := cache.Options{Scheme: scheme}
	if o.namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
		// BootImages are cluster-scoped; DefaultNamespaces does not apply.
	}
	if o.podNamespace != "" {
		// Secrets only of this namespace, and only the credentials:
		// whatever --namespace says for Machines.
		copts = jointoken.CacheOptions(o.podNamespace, copts)
	}
	c, err := cache.New(cfg, copts)
	if err != nil {
		return fmt.Errorf("creating the cache: %w", err)
	}

	// Indexes and informers are registered before the cache starts.
	table := leases.NewTable()
	syncer, err := leases.NewSyncer(ctx, c, table, log.WithName("leases"))
	if err != nil {
		return err
	}
	machines, err := httpboot.NewCacheMachines(ctx, c, log.WithName("machines"))
	if err != nil {
		return err
	}
	var tokens httpboot.JoinTokens
	if o.podNamespace != "" {
		// Registered now so that the credentials are part of the cache
		// sync that makes the replica ready.
		if _, err := c.GetInformer(ctx, &corev1.Secret{}); err != nil {
			return fmt.Errorf("watching the token issuer credentials: %w", err)
		}
		issuer, err := jointoken.New(jointoken.Config{Reader: c, Namespace: o.podNamespace, TTL: o.joinTokenTTL})
		if err != nil {
			return fmt.Errorf("--join-token-ttl: %w", err)
		}
		tokens = issuer
	} else {
		log.Info("no --pod-namespace (or $POD_NAMESPACE): join tokens disabled, /config answers 503")
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
		if allocator, err = dynamic.New(ctx, dynamic.Config{Cache: c, Client: writer, APIReader: writer, Static: table}); err != nil {
			return err
		}
	}

	store, err := httpboot.NewStore(httpboot.StoreConfig{
		Dir:     o.cacheDir,
		MaxSize: o.maxArtifact,
		// Registry credentials come from the pod's docker config, if any;
		// anonymous otherwise.
		RemoteOptions: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)},
		NameOptions:   nameOptions(o.insecureReg),
	})
	if err != nil {
		return fmt.Errorf("artifact cache: %w", err)
	}
	defer store.Close()

	// Events go through client-go's broadcaster: throttled per machine
	// before, queued (bounded, dropping) and aggregated after, so a boot
	// storm or a slow API server never delays an answer.
	var machineEvents *events.Recorder
	if o.eventInterval > 0 {
		rec, stopEvents, err := events.StartAPI(cfg, scheme, o.nodeName)
		if err != nil {
			return err
		}
		defer stopEvents()
		machineEvents = events.New(rec, events.Config{Interval: o.eventInterval, UID: func(ns, name string) (types.UID, bool) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var m kubefarmv1.Machine
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
				return "", false
			}
			return m.UID, true
		}})
	}
	var eventSink events.Sink
	if machineEvents != nil {
		eventSink = machineEvents
	}

	var synced sync.Once
	ready := make(chan struct{})
	hm, err := httpboot.NewMetrics(reg)
	if err != nil {
		return err
	}
	handler, err := httpboot.NewHandler(httpboot.Config{
		BaseURL:       baseURL,
		IPXEDir:       o.ipxeDir,
		EnsureTimeout: o.ensureTimeout,
		Windows:       httpboot.NewBootWindows(o.bootWindow, nil),
		Recorder:      httpboot.StatusRecorder{Client: writer},
		Events:        eventSink,
		// A tenant without a credential (not ready yet, or written into
		// another namespace) makes Issue fail: /config answers 503 to the
		// machine, which retries, and logs which Secret is missing.
		Tokens: tokens,
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
	httpLn, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	var tftpConn net.PacketConn
	var tftpSrv *tftp.Server
	if o.tftpAddr != "" {
		tm, err := tftp.NewMetrics(reg)
		if err != nil {
			return err
		}
		tftpSrv, err = tftp.NewServer(tftp.Config{
			Dir: o.ipxeDir, Timeout: o.tftpTimeout, Retries: o.tftpRetries, MaxTransfers: o.tftpTransfers,
		}, tm, log.WithName("tftp"))
		if err != nil {
			return err
		}
		if tftpConn, err = net.ListenPacket("udp4", o.tftpAddr); err != nil {
			httpLn.Close()
			return fmt.Errorf("tftp: %w", err)
		}
	}
	var dhcpSrv *dhcp.Server
	var dhcpConns []net.PacketConn
	if o.iface != "" {
		dcfg := dhcp.Config{
			ServerID:  serverIP,
			Boot:      bootfile.Config{Server: serverIP, HTTPPort: httpPort, UEFIx64Binary: o.uefiBinary},
			ProxyDHCP: o.proxyDHCP,
			Workers:   o.workers,
			QueueSize: o.queue,
			Events:    eventSink,
		}
		if allocator != nil {
			dcfg.Dynamic = allocator
			dcfg.DynamicWorkers = o.dynamicWorkers
		}
		dm, err := dhcp.NewMetrics(reg)
		if err != nil {
			return err
		}
		if dhcpSrv, err = dhcp.NewServer(dcfg, table, dm, log.WithName("dhcp")); err != nil {
			return err
		}
		if dhcpConns, err = dhcp.Listen(o.iface, dcfg); err != nil {
			httpLn.Close()
			if tftpConn != nil {
				tftpConn.Close()
			}
			return fmt.Errorf("dhcp: %w", err)
		}
	} else {
		log.Info("no --interface: DHCP disabled")
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8) // more than the services, so no sender ever blocks
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
	start("cache sync", func() error {
		if !c.WaitForCacheSync(ctx) {
			return errors.New("cache did not sync")
		}
		// Ready only once the lease table holds every machine known at
		// start, not merely once the cache does.
		if !toolscache.WaitForCacheSync(ctx.Done(), syncer.HasSynced) {
			return errors.New("lease table did not sync")
		}
		synced.Do(func() { close(ready) })
		log.Info("cache synced", "leases", table.Len())
		return nil
	})

	srv := &http.Server{
		Handler: handler,
		// Boot clients send tiny requests; a slow header is an attack or a
		// dead client.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	start("http", func() error {
		if err := srv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if tftpSrv != nil {
		start("tftp", func() error { return tftpSrv.Serve(ctx, tftpConn) })
	}
	if dhcpSrv != nil {
		start("dhcp", func() error { return dhcpSrv.Serve(ctx, dhcpConns...) })
	}
	log.Info("serving", "serverIP", serverIP.String(), "http", httpLn.Addr().String(), "baseURL", baseURL,
		"tftp", o.tftpAddr, "dhcpInterface", o.iface, "proxyDHCP", o.proxyDHCP, "ipxeDir", o.ipxeDir, "cacheDir", o.cacheDir)

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
	wg.Wait()
	return runErr
}

func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}
