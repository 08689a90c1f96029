package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// options are the command line. Defaults are what a hostNetwork pod on a
// boot network wants; --server-ip is the one flag with no sensible default.
type options struct {
	iface           string
	serverIP        string
	httpAddr        string
	httpPort        int
	metricsAddr     string
	http            httpLimits
	tftpAddr        string
	ipxeDir         string
	uefiBinary      string
	cacheDir        string
	proxyDHCP       bool
	answerRS        bool
	workers         int
	queue           int
	tftpTimeout     time.Duration
	tftpRetries     int
	tftpTransfers   int
	tftpWindow      int
	tftpSpin        time.Duration
	maxArtifact     int64
	ensureTimeout   time.Duration
	insecureReg     bool
	namespace       string
	shutdownTimeout time.Duration
	bootWindow      time.Duration
	podNamespace    string
	joinTokenTTL    time.Duration
	eventInterval   time.Duration
	eventQPS        float64
	eventBurst      int
	nodeName        string
	dynamicRanges   bool
	dynamicWorkers  int
	verifyImages    bool
	fetchDenied     string
	fetchAllowed    string
}

// register defines every flag on fs, with its default and help text.
func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.iface, "interface", "",
		"network interface of the boot network the DHCP server listens on (port 67, and 4011 with --proxy-dhcp); empty disables DHCP")
	fs.StringVar(&o.iface, "dhcp-listen", "", "alias of --interface")
	fs.StringVar(&o.serverIP, "server-ip", "",
		"this server's IPv4 address on the boot network: DHCP server identifier, TFTP next-server and the host of every boot URL (required)")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "address the HTTP boot service (scripts, artifacts, configuration) listens on")
	fs.IntVar(&o.httpPort, "http-port", 0,
		"port booting machines use to reach the HTTP service, when it differs from --http-addr's (e.g. behind a hostPort); 0 uses --http-addr's")
	fs.StringVar(&o.tftpAddr, "tftp-addr", ":69", "address the TFTP service listens on; empty disables TFTP")
	fs.StringVar(&o.ipxeDir, "ipxe-dir", tftp.DefaultDir, "directory with the iPXE binaries served over TFTP and HTTP")
	fs.StringVar(&o.uefiBinary, "uefi-binary", bootfile.BinaryUEFIx64,
		"iPXE binary for x86-64 UEFI clients: ipxe.efi, or snponly.efi for firmware whose NIC drivers misbehave under iPXE")
	fs.StringVar(&o.cacheDir, "cache-dir", "/var/cache/kubefarm-pxe", "directory of the content-addressed artifact cache")
	fs.BoolVar(&o.proxyDHCP, "proxy-dhcp", false,
		"proxyDHCP mode: another DHCP server hands out addresses; answer PXE clients with boot options only")
	fs.BoolVar(&o.answerRS, "answer-router-solicitations", true,
		"answer IPv6 router solicitations on --interface with an advertisement of no router, no prefix and no DHCPv6, "+
			"so iPXE ends its IPv6 autoconfiguration at once instead of after ~15 s; false where the boot network has IPv6 routers")
	fs.IntVar(&o.workers, "workers", 0, "DHCP worker goroutines; 0 means 2 x GOMAXPROCS")
	fs.IntVar(&o.queue, "queue", 1024, "DHCP packets that may wait for a worker before new ones are dropped")
	fs.DurationVar(&o.tftpTimeout, "tftp-timeout", 2*time.Second, "how long TFTP waits for each acknowledgement before resending")
	fs.IntVar(&o.tftpRetries, "tftp-retries", 5, "TFTP resends of one block before a transfer is abandoned")
	fs.IntVar(&o.tftpTransfers, "tftp-max-transfers", 64, "concurrent TFTP transfers; requests beyond are refused at once")
	fs.DurationVar(&o.tftpSpin, "tftp-spin-wait", tftp.DefaultSpinWait, "how long a TFTP transfer polls for the client's ACK before it blocks, while ACKs come that fast (at most 1ms); 0 never polls")
	fs.IntVar(&o.tftpWindow, "tftp-max-windowsize", tftp.DefaultMaxWindowSize, "largest RFC 7440 window granted to a TFTP client that asks for one (blocks sent before an ACK is awaited); 1 turns windowsize off")
	fs.Int64Var(&o.maxArtifact, "max-artifact-size", 4<<30, "largest artifact (kernel, initrd, rootfs) the cache downloads, in bytes")
	fs.DurationVar(&o.ensureTimeout, "artifact-wait", 2*time.Minute,
		"how long a script request waits for its artifacts to be cached before answering 503 (iPXE retries)")
	fs.BoolVar(&o.insecureReg, "insecure-registry", false, "reach OCI registries over plain HTTP")
	fs.StringVar(&o.fetchDenied, "fetch-denied-cidrs", "",
		"comma-separated CIDR prefixes (or addresses) that artifact fetches never connect to, on top of loopback, link-local, "+
			"unspecified, multicast, cloud metadata and the API server's own addresses: the admin cluster's Service and Pod ranges. "+
			"Checked on every connection, after DNS and redirects")
	fs.StringVar(&o.fetchAllowed, "fetch-allowed-cidrs", "",
		"comma-separated CIDR prefixes (or addresses) artifact fetches may connect to although denied, e.g. a registry on a denied "+
			"private range; never the API server's addresses")
	fs.BoolVar(&o.verifyImages, "verify-images", true,
		"fetch every BootImage's kernel, initrd and rootfs into the cache when the image appears (and at start), so first boots do not wait, "+
			"and write its ArtifactsVerified and Ready conditions; failures are retried with backoff. "+
			"false fetches artifacts only when a machine asks (and needs no patch on bootimages/status)")
	fs.StringVar(&o.namespace, "namespace", "", "only serve Machines and NodePools of this namespace; empty means all")
	fs.DurationVar(&o.bootWindow, "boot-window", 10*time.Minute,
		"how long after answering a machine's iPXE DHCP request it may take its boot secret (once), and how long after that its agent may fetch its boot configuration (once)")
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
	fs.Float64Var(&o.eventQPS, "event-qps", events.DefaultRate,
		"Events on Machines this replica writes per second at most, over all machines (a boot storm makes every machine a new one, "+
			"which --event-interval does not bound); refused ones are counted in kubefarm_pxe_events_dropped_total and logged")
	fs.IntVar(&o.eventBurst, "event-burst", events.DefaultBurst, "Events on Machines this replica may write at once before --event-qps applies")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "node this replica runs on (default $NODE_NAME): the source host of its events")
	o.registerHTTP(fs)
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"how long in-flight HTTP requests and TFTP transfers may take to finish on SIGTERM")
}

// bootServer is where booting machines reach this replica.
type bootServer struct {
	// ip is --server-ip, 4 bytes.
	ip net.IP
	// httpPort is --http-port, or --http-addr's port.
	httpPort int
	// base is the root of every boot URL.
	base bootpaths.Base
}

// bootServer checks --server-ip, --http-addr and --http-port and derives
// the boot URLs' root from them.
func (o *options) bootServer() (bootServer, error) {
	ip := net.ParseIP(o.serverIP).To4()
	if ip == nil {
		return bootServer{}, fmt.Errorf("--server-ip %q is not an IPv4 address", o.serverIP)
	}
	port := o.httpPort
	if port == 0 {
		_, p, err := net.SplitHostPort(o.httpAddr)
		if err != nil {
			return bootServer{}, fmt.Errorf("--http-addr: %w", err)
		}
		if port, err = strconv.Atoi(p); err != nil || port == 0 {
			return bootServer{}, fmt.Errorf("--http-addr %q needs an explicit port", o.httpAddr)
		}
	}
	return bootServer{ip: ip, httpPort: port, base: bootpaths.NewBase(ip, port)}, nil
}

// cacheOptions are the informer cache's: --namespace for Machines and
// NodePools, --pod-namespace for the token issuer credentials.
func (o *options) cacheOptions(scheme *k8sruntime.Scheme) cache.Options {
	copts := cache.Options{Scheme: scheme, DefaultTransform: trimCached}
	if o.namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
		// BootImages are cluster-scoped; DefaultNamespaces does not apply.
	}
	if o.podNamespace != "" {
		// Secrets only of this namespace, and only the credentials:
		// whatever --namespace says for Machines.
		copts = jointoken.CacheOptions(o.podNamespace, copts)
	}
	return copts
}

// trimCached drops from every cached object what kubefarm-pxe never reads,
// before it is stored: managed fields everywhere (an update from a cached
// object without them leaves the server's as they are); and of NodePools
// the annotations, labels, owner references and finalizers (an ArgoCD or
// kubectl last-applied annotation alone is as large as the spec; nothing
// here selects by label or follows an owner) and spec.machines, the entries
// the NodePool controller turns into the Machines this server reads
// instead (250 per pool, copied whenever a pool is read from the cache). No
// NodePool is ever written back from the cache. Machines are not cached at
// all: pxe/inventory keeps a compact record of each.
func trimCached(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	if p, ok := obj.(*kubefarmv1.NodePool); ok {
		p.Annotations, p.Labels, p.OwnerReferences, p.Finalizers = nil, nil, nil, nil
		p.Spec.Machines = nil
	}
	return obj, nil
}

// storeConfig is the artifact cache's. Its guard refuses the defaults,
// --fetch-denied-cidrs but --fetch-allowed-cidrs, and the addresses of
// apiHost, the API server of kubefarm-pxe's rest.Config (in a pod, the
// kubernetes Service's address), resolved now.
func (o *options) storeConfig(ctx context.Context, apiHost string) (httpboot.StoreConfig, error) {
	denied, err := fetchguard.ParsePrefixes("--fetch-denied-cidrs", o.fetchDenied)
	if err != nil {
		return httpboot.StoreConfig{}, err
	}
	allowed, err := fetchguard.ParsePrefixes("--fetch-allowed-cidrs", o.fetchAllowed)
	if err != nil {
		return httpboot.StoreConfig{}, err
	}
	api, err := fetchguard.HostAddrs(ctx, nil, apiHost)
	if err != nil {
		return httpboot.StoreConfig{}, fmt.Errorf("the API server's addresses, which artifact fetches refuse: %w", err)
	}
	return httpboot.StoreConfig{
		Dir:     o.cacheDir,
		MaxSize: o.maxArtifact,
		Guard:   fetchguard.New(fetchguard.Options{Denied: denied, Allowed: allowed, APIServer: api}),
		// Registry credentials come from the pod's docker config, if any;
		// anonymous otherwise.
		RemoteOptions: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)},
		NameOptions:   nameOptions(o.insecureReg),
	}, nil
}

func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// tftpConfig is the TFTP service's.
func (o *options) tftpConfig() tftp.Config {
	spin := o.tftpSpin
	if spin == 0 {
		spin = -1 // the flag's 0 is "never"; the Config's zero is the default
	}
	return tftp.Config{Dir: o.ipxeDir, Timeout: o.tftpTimeout, Retries: o.tftpRetries, MaxTransfers: o.tftpTransfers,
		MaxWindowSize: o.tftpWindow, SpinWait: spin}
}
