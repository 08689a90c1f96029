package main

// The command line: one flag per field of server.Options, which documents
// each; the defaults are what a hostNetwork pod on a boot network wants,
// --server-ip the one flag with no sensible default.

import (
	"flag"
	"os"

	"github.com/kubefarm/kubefarm/pxe/server"
)

// bindFlags defines every flag on fs, with its default and help text.
func bindFlags(fs *flag.FlagSet, o *server.Options) {
	d := server.DefaultOptions()
	fs.StringVar(&o.Interface, "interface", d.Interface,
		"network interface of the boot network the DHCP server listens on (port 67, and 4011 with --proxy-dhcp); empty disables DHCP")
	fs.StringVar(&o.Interface, "dhcp-listen", d.Interface, "alias of --interface")
	fs.StringVar(&o.ServerIP, "server-ip", d.ServerIP,
		"this server's IPv4 address on the boot network: DHCP server identifier, TFTP next-server and the host of every boot URL (required)")
	fs.StringVar(&o.HTTPAddr, "http-addr", d.HTTPAddr, "address the HTTP boot service (scripts, artifacts, configuration) listens on")
	fs.IntVar(&o.HTTPPort, "http-port", d.HTTPPort,
		"port booting machines use to reach the HTTP service, when it differs from --http-addr's (e.g. behind a hostPort); 0 uses --http-addr's")
	fs.StringVar(&o.TFTPAddr, "tftp-addr", d.TFTPAddr, "address the TFTP service listens on; empty disables TFTP")
	fs.StringVar(&o.IPXEDir, "ipxe-dir", d.IPXEDir, "directory with the iPXE binaries served over TFTP and HTTP")
	fs.StringVar(&o.UEFIBinary, "uefi-binary", d.UEFIBinary,
		"iPXE binary for x86-64 UEFI clients: ipxe.efi, or snponly.efi for firmware whose NIC drivers misbehave under iPXE")
	fs.StringVar(&o.CacheDir, "cache-dir", d.CacheDir, "directory of the content-addressed artifact cache")
	fs.BoolVar(&o.ProxyDHCP, "proxy-dhcp", d.ProxyDHCP,
		"proxyDHCP mode: another DHCP server hands out addresses; answer PXE clients with boot options only")
	fs.BoolVar(&o.AnswerRouterSolicitations, "answer-router-solicitations", d.AnswerRouterSolicitations,
		"answer IPv6 router solicitations on --interface with an advertisement of no router, no prefix and no DHCPv6, "+
			"so iPXE ends its IPv6 autoconfiguration at once instead of after ~15 s; false where the boot network has IPv6 routers")
	fs.IntVar(&o.Workers, "workers", d.Workers, "DHCP worker goroutines; 0 means 2 x GOMAXPROCS")
	fs.IntVar(&o.Queue, "queue", d.Queue, "DHCP packets that may wait for a worker before new ones are dropped")
	fs.DurationVar(&o.TFTPTimeout, "tftp-timeout", d.TFTPTimeout, "how long TFTP waits for each acknowledgement before resending")
	fs.IntVar(&o.TFTPRetries, "tftp-retries", d.TFTPRetries, "TFTP resends of one block before a transfer is abandoned")
	fs.IntVar(&o.TFTPMaxTransfers, "tftp-max-transfers", d.TFTPMaxTransfers, "concurrent TFTP transfers; requests beyond are refused at once")
	fs.DurationVar(&o.TFTPSpinWait, "tftp-spin-wait", d.TFTPSpinWait, "how long a TFTP transfer polls for the client's ACK before it blocks, while ACKs come that fast (at most 1ms); 0 never polls")
	fs.IntVar(&o.TFTPMaxWindowSize, "tftp-max-windowsize", d.TFTPMaxWindowSize, "largest RFC 7440 window granted to a TFTP client that asks for one (blocks sent before an ACK is awaited); 1 turns windowsize off")
	bindArtifactFlags(fs, o)
	fs.StringVar(&o.Namespace, "namespace", d.Namespace, "only serve Machines and NodePools of this namespace; empty means all")
	fs.DurationVar(&o.BootWindow, "boot-window", d.BootWindow,
		"how long after answering a machine's iPXE DHCP request it may take its boot secret (once), and how long after that its agent may fetch its boot configuration (once)")
	fs.StringVar(&o.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace this replica runs in (default $POD_NAMESPACE): the token issuer credentials kubefarm-manager writes there "+
			"(its --pxe-namespace) are the only Secrets read, so join tokens need only get/list/watch on Secrets of this namespace; "+
			"empty disables join tokens (/config answers 503)")
	fs.DurationVar(&o.JoinTokenTTL, "join-token-ttl", d.JoinTokenTTL,
		"how long a machine's join token (a bootstrap token in its tenant cluster) is valid; at most 24h")
	fs.BoolVar(&o.DynamicRanges, "dynamic-ranges", d.DynamicRanges,
		"answer MACs of no Machine from the spec.network.dynamicRange of the NodePool serving their network, with leases stored as DHCPLease objects; "+
			"false ignores every unknown MAC (and needs no access to dhcpleases)")
	fs.IntVar(&o.DynamicWorkers, "dynamic-workers", d.DynamicWorkers,
		"goroutines answering unknown MACs from dynamic ranges (each makes API calls, apart from the static workers)")
	bindDiscoveryFlags(fs, o)
	fs.DurationVar(&o.EventInterval, "event-interval", d.EventInterval,
		"Events on Machines (Offered, Acked, ScriptServed, ImageServed, ConfigServed, BootReported, Refused, Declined): "+
			"the same event of one machine is recorded at most once per interval; 0 disables events")
	fs.Float64Var(&o.EventQPS, "event-qps", d.EventQPS,
		"Events on Machines this replica writes per second at most, over all machines (a boot storm makes every machine a new one, "+
			"which --event-interval does not bound); refused ones are counted in kubefarm_pxe_events_dropped_total and logged")
	fs.IntVar(&o.EventBurst, "event-burst", d.EventBurst, "Events on Machines this replica may write at once before --event-qps applies")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "node this replica runs on (default $NODE_NAME): the source host of its events")
	bindHTTPFlags(fs, o)
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", d.ShutdownTimeout,
		"how long in-flight HTTP requests and TFTP transfers may take to finish on SIGTERM")
}

// bindArtifactFlags defines the flags of the artifact cache: its size,
// the registries' and fetch guard's, and whether BootImages are fetched
// when they appear.
func bindArtifactFlags(fs *flag.FlagSet, o *server.Options) {
	d := server.DefaultOptions()
	fs.Int64Var(&o.MaxArtifactSize, "max-artifact-size", d.MaxArtifactSize, "largest artifact (kernel, initrd, rootfs) the cache downloads, in bytes")
	fs.DurationVar(&o.ArtifactWait, "artifact-wait", d.ArtifactWait,
		"how long a script request waits for its artifacts to be cached before answering 503 (iPXE retries)")
	fs.BoolVar(&o.InsecureRegistry, "insecure-registry", d.InsecureRegistry, "reach OCI registries over plain HTTP")
	fs.StringVar(&o.FetchDeniedCIDRs, "fetch-denied-cidrs", d.FetchDeniedCIDRs,
		"comma-separated CIDR prefixes (or addresses) that artifact fetches never connect to, on top of loopback, link-local, "+
			"unspecified, multicast, cloud metadata and the API server's own addresses: the admin cluster's Service and Pod ranges. "+
			"Checked on every connection, after DNS and redirects")
	fs.StringVar(&o.FetchAllowedCIDRs, "fetch-allowed-cidrs", d.FetchAllowedCIDRs,
		"comma-separated CIDR prefixes (or addresses) artifact fetches may connect to although denied, e.g. a registry on a denied "+
			"private range; never the API server's addresses")
	fs.BoolVar(&o.VerifyImages, "verify-images", d.VerifyImages,
		"fetch every BootImage's kernel, initrd and rootfs into the cache when the image appears (and at start), so first boots do not wait, "+
			"and write its ArtifactsVerified and Ready conditions; failures are retried with backoff. "+
			"false fetches artifacts only when a machine asks (and needs no patch on bootimages/status)")
}

// bindHTTPFlags defines the flags of the probe listener and of the boot
// service's limits.
func bindHTTPFlags(fs *flag.FlagSet, o *server.Options) {
	d := server.DefaultOptions()
	fs.StringVar(&o.MetricsAddr, "metrics-addr", d.MetricsAddr,
		"address /healthz and /metrics listen on, apart from the boot service (--http-addr), which answers neither; "+
			"keep it off the boot network: loopback (the kubelet probes a hostNetwork pod from the node), or the node's "+
			"management address for Prometheus; empty disables both")
	l := &o.HTTP
	fs.DurationVar(&l.ReadHeaderTimeout, "http-read-header-timeout", d.HTTP.ReadHeaderTimeout,
		"how long a client of the boot service may take to send a request's header; boot clients send tiny ones")
	fs.DurationVar(&l.ReadTimeout, "http-read-timeout", d.HTTP.ReadTimeout,
		"how long a request to the boot service may take to send its body, after its header; net/http also cancels a "+
			"request's context then, so /boot gets --artifact-wait more; not applied to /artifacts and /ipxe downloads")
	fs.DurationVar(&l.WriteTimeout, "http-write-timeout", d.HTTP.WriteTimeout,
		"how long the boot service may take to answer a request, after its header (/boot gets --artifact-wait more); "+
			"not applied to /artifacts and /ipxe downloads, which a slow link may take long to fetch")
	fs.DurationVar(&l.IdleTimeout, "http-idle-timeout", d.HTTP.IdleTimeout,
		"how long a kept-alive connection to the boot service may wait for its next request")
	fs.IntVar(&l.MaxHeaderBytes, "http-max-header-bytes", d.HTTP.MaxHeaderBytes,
		"largest request header the boot service reads; a larger one is answered 431 (net/http allows 4 KiB over it)")
	fs.IntVar(&l.MaxConnsPerIP, "http-max-conns-per-ip", d.HTTP.MaxConnsPerIP,
		"connections one client IP may have open to the boot service at once; more are closed as they are accepted "+
			"(counted in kubefarm_pxe_http_connections_refused_total); 0 means no cap")
}

// bindDiscoveryFlags defines the flags of discovery (docs/discovery.md).
func bindDiscoveryFlags(fs *flag.FlagSet, o *server.Options) {
	d := server.DefaultOptions()
	fs.BoolVar(&o.Discovery, "discovery", d.Discovery,
		"boot the machines a catch-all range with unknownMachines: Hold leases to (MACs no Machine claims) in discovery mode, "+
			"which joins nothing, and record their agents' hardware reports (POST /discovery) as DiscoveredMachines; needs --dynamic-ranges")
	fs.IntVar(&o.DiscoveryMaxMachines, "discovery-max-machines", d.DiscoveryMaxMachines,
		"most DiscoveredMachines that may exist: a report that would make one more is answered 429, counted in "+
			"kubefarm_pxe_discovery_reports_total{result=\"refused_cap\"} and logged (and a Warning on the pool) at most once a minute")
	fs.Float64Var(&o.DiscoveryRate, "discovery-rate", d.DiscoveryRate,
		"new DiscoveredMachines this replica may create per second (a token bucket; over it: 429)")
	fs.IntVar(&o.DiscoveryBurst, "discovery-burst", d.DiscoveryBurst,
		"new DiscoveredMachines this replica may create at once before --discovery-rate applies")
}
