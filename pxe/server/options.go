package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/jointoken"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// Options configure a kubefarm-pxe replica; cmd/kubefarm-pxe maps its
// flags onto them, one field per flag. Each field names its flag, which is
// also how errors name it, and the flag's default, which DefaultOptions
// returns. The zero value of a field is not its default: several zeros
// mean something (--workers 0, --tftp-spin-wait 0, --http-max-conns-per-ip
// 0, an empty address that turns a service off), so start from
// DefaultOptions.
type Options struct {
	// Interface is the boot network's interface the DHCP server listens on
	// (port 67, and 4011 with ProxyDHCP); empty disables DHCP and the
	// router advertisements. --interface (alias --dhcp-listen), default "".
	Interface string
	// ServerIP is this server's IPv4 address on the boot network: DHCP
	// server identifier, TFTP next-server and the host of every boot URL.
	// --server-ip, required.
	ServerIP string
	// HTTPAddr is where the HTTP boot service listens. --http-addr,
	// default ":8080".
	HTTPAddr string
	// HTTPPort is the port booting machines reach the HTTP service on when
	// it differs from HTTPAddr's (behind a hostPort); 0 uses HTTPAddr's.
	// --http-port, default 0.
	HTTPPort int
	// MetricsAddr is where /healthz and /metrics listen, apart from the
	// boot service; empty disables both. --metrics-addr, default
	// DefaultMetricsAddr.
	MetricsAddr string
	// HTTP bounds what clients of the boot service can hold.
	HTTP HTTPLimits
	// TFTPAddr is where the TFTP service listens; empty disables TFTP.
	// --tftp-addr, default ":69".
	TFTPAddr string
	// IPXEDir holds the iPXE binaries served over TFTP and HTTP.
	// --ipxe-dir, default tftp.DefaultDir (/usr/lib/ipxe).
	IPXEDir string
	// UEFIBinary is the iPXE binary of x86-64 UEFI clients. --uefi-binary,
	// default bootfile.BinaryUEFIx64 (ipxe.efi).
	UEFIBinary string
	// CacheDir is the content-addressed artifact cache. --cache-dir,
	// default "/var/cache/kubefarm-pxe".
	CacheDir string
	// ProxyDHCP answers PXE clients with boot options only, another DHCP
	// server handing out addresses. --proxy-dhcp, default false.
	ProxyDHCP bool
	// AnswerRouterSolicitations answers IPv6 router solicitations on
	// Interface with an advertisement of nothing, so iPXE does not wait
	// for IPv6. --answer-router-solicitations, default true.
	AnswerRouterSolicitations bool
	// Workers are the DHCP worker goroutines; 0 means 2 x GOMAXPROCS.
	// --workers, default 0.
	Workers int
	// Queue is how many DHCP packets may wait for a worker. --queue,
	// default 1024.
	Queue int
	// TFTPTimeout is how long TFTP waits for each acknowledgement.
	// --tftp-timeout, default 2s.
	TFTPTimeout time.Duration
	// TFTPRetries are the resends of one block before a transfer is
	// abandoned. --tftp-retries, default 5.
	TFTPRetries int
	// TFTPMaxTransfers are the concurrent TFTP transfers.
	// --tftp-max-transfers, default 64.
	TFTPMaxTransfers int
	// TFTPMaxWindowSize is the largest RFC 7440 window granted; 1 turns
	// windowsize off. --tftp-max-windowsize, default
	// tftp.DefaultMaxWindowSize (16).
	TFTPMaxWindowSize int
	// TFTPSpinWait is how long a transfer polls for an ACK before it
	// blocks; 0 never polls. --tftp-spin-wait, default
	// tftp.DefaultSpinWait (50µs).
	TFTPSpinWait time.Duration
	// MaxArtifactSize is the largest artifact the cache downloads, in
	// bytes. --max-artifact-size, default 4 GiB.
	MaxArtifactSize int64
	// ArtifactWait is how long a script request waits for its artifacts
	// before answering 503. --artifact-wait, default 2m.
	ArtifactWait time.Duration
	// InsecureRegistry reaches OCI registries over plain HTTP.
	// --insecure-registry, default false.
	InsecureRegistry bool
	// FetchDeniedCIDRs are comma-separated prefixes (or addresses) that
	// artifact fetches never connect to, on top of fetchguard's built-in
	// classes and the API server's addresses. --fetch-denied-cidrs,
	// default "".
	FetchDeniedCIDRs string
	// FetchAllowedCIDRs are prefixes artifact fetches may connect to
	// although denied; never the API server's addresses.
	// --fetch-allowed-cidrs, default "".
	FetchAllowedCIDRs string
	// VerifyImages fetches every BootImage's artifacts when it appears
	// and writes its conditions; false fetches only when a machine asks.
	// --verify-images, default true.
	VerifyImages bool
	// Namespace limits the Machines and NodePools served; empty means all.
	// --namespace, default "".
	Namespace string
	// BootWindow is how long after its iPXE DHCP answer a machine may take
	// its boot secret, and its agent then its configuration.
	// --boot-window, default 10m.
	BootWindow time.Duration
	// PodNamespace is where this replica runs: the token issuer
	// credentials are read there only; empty disables join tokens (/config
	// answers 503). --pod-namespace, default $POD_NAMESPACE.
	PodNamespace string
	// JoinTokenTTL is how long a machine's join token is valid; at most
	// 24h. --join-token-ttl, default jointoken.DefaultTTL (15m).
	JoinTokenTTL time.Duration
	// DynamicRanges answers MACs of no Machine from their NodePool's
	// dynamic range, leases stored as DHCPLeases. --dynamic-ranges,
	// default true.
	DynamicRanges bool
	// DynamicWorkers are the goroutines answering from dynamic ranges.
	// --dynamic-workers, default dhcp.DefaultDynamicWorkers (4).
	DynamicWorkers int
	// Discovery boots the machines a Hold pool's catch-all range leases to
	// (MACs no Machine claims) in discovery mode and records their agents'
	// reports as DiscoveredMachines (docs/discovery.md); needs
	// DynamicRanges. --discovery, default false.
	Discovery bool
	// DiscoveryMaxMachines caps the DiscoveredMachines that may exist; a
	// report that would make one more is answered 429.
	// --discovery-max-machines, default
	// httpboot.DefaultDiscoveryMaxMachines (1000).
	DiscoveryMaxMachines int
	// DiscoveryRate is how many new DiscoveredMachines per second this
	// replica may create. --discovery-rate, default
	// httpboot.DefaultDiscoveryRate (5).
	DiscoveryRate float64
	// DiscoveryBurst is how many it may create at once before
	// DiscoveryRate applies. --discovery-burst, default
	// httpboot.DefaultDiscoveryBurst (20).
	DiscoveryBurst int
	// EventInterval is how often the same Event of one machine may be
	// recorded; 0 disables Events on Machines. --event-interval, default
	// events.DefaultInterval (1m).
	EventInterval time.Duration
	// EventQPS is the replica's budget of Events on Machines per second.
	// --event-qps, default events.DefaultRate (5).
	EventQPS float64
	// EventBurst is how many Events may be written at once before
	// EventQPS applies. --event-burst, default events.DefaultBurst (50).
	EventBurst int
	// NodeName is the node this replica runs on, its Events' source host.
	// --node-name, default $NODE_NAME.
	NodeName string
	// ShutdownTimeout is how long in-flight HTTP requests and TFTP
	// transfers may take to finish when Start's context ends.
	// --shutdown-timeout, default 30s.
	ShutdownTimeout time.Duration

	// Config reaches the admin cluster's API server; nil loads it as
	// controller-runtime does (ctrl.GetConfig: --kubeconfig, $KUBECONFIG,
	// in-cluster, ~/.kube/config). Not a flag of its own.
	Config *rest.Config
	// Log is the replica's logger; the zero Logger discards.
	Log logr.Logger
}

// HTTPLimits bound what clients of the boot service can hold.
type HTTPLimits struct {
	// ReadHeaderTimeout: --http-read-header-timeout, default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a request's body, after its header; not applied
	// to downloads. --http-read-timeout, default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds an answer, after the header; not applied to
	// downloads. --http-write-timeout, default 1m.
	WriteTimeout time.Duration
	// IdleTimeout bounds a kept-alive connection's wait for its next
	// request. --http-idle-timeout, default 2m.
	IdleTimeout time.Duration
	// MaxHeaderBytes is the largest request header read.
	// --http-max-header-bytes, default 8 KiB.
	MaxHeaderBytes int
	// MaxConnsPerIP caps one client IP's open connections; 0 means no
	// cap. --http-max-conns-per-ip, default 16.
	MaxConnsPerIP int
}

// DefaultOptions are the flags' defaults, but for those read from the
// environment (PodNamespace, NodeName), and ServerIP, which has none.
func DefaultOptions() Options {
	return Options{
		HTTPAddr:                  ":8080",
		MetricsAddr:               DefaultMetricsAddr,
		HTTP:                      DefaultHTTPLimits(),
		TFTPAddr:                  ":69",
		IPXEDir:                   tftp.DefaultDir,
		UEFIBinary:                bootfile.BinaryUEFIx64,
		CacheDir:                  "/var/cache/kubefarm-pxe",
		AnswerRouterSolicitations: true,
		Queue:                     1024,
		TFTPTimeout:               2 * time.Second,
		TFTPRetries:               5,
		TFTPMaxTransfers:          64,
		TFTPMaxWindowSize:         tftp.DefaultMaxWindowSize,
		TFTPSpinWait:              tftp.DefaultSpinWait,
		MaxArtifactSize:           4 << 30,
		ArtifactWait:              2 * time.Minute,
		VerifyImages:              true,
		BootWindow:                10 * time.Minute,
		JoinTokenTTL:              jointoken.DefaultTTL,
		DynamicRanges:             true,
		DynamicWorkers:            dhcp.DefaultDynamicWorkers,
		DiscoveryMaxMachines:      httpboot.DefaultDiscoveryMaxMachines,
		DiscoveryRate:             httpboot.DefaultDiscoveryRate,
		DiscoveryBurst:            httpboot.DefaultDiscoveryBurst,
		EventInterval:             events.DefaultInterval,
		EventQPS:                  events.DefaultRate,
		EventBurst:                events.DefaultBurst,
		ShutdownTimeout:           30 * time.Second,
	}
}

// DefaultHTTPLimits are the --http-* flags' defaults.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    8 << 10,
		MaxConnsPerIP:     16,
	}
}

// Validate checks what can be checked without the API server, naming the
// flag of the option at fault: the boot server's address, the fetch
// guard's prefixes, the Events' budget and the boot service's limits.
// New calls it first; what needs the cluster (the kubeconfig, the API
// server's addresses) or a component's own rules (the join token TTL, the
// DHCP and TFTP settings) is checked as New builds it.
func (o Options) Validate() error {
	if _, err := o.bootServer(); err != nil {
		return err
	}
	if _, err := fetchguard.ParsePrefixes("--fetch-denied-cidrs", o.FetchDeniedCIDRs); err != nil {
		return err
	}
	if _, err := fetchguard.ParsePrefixes("--fetch-allowed-cidrs", o.FetchAllowedCIDRs); err != nil {
		return err
	}
	if err := o.eventBudget(); err != nil {
		return err
	}
	if err := o.discovery(); err != nil {
		return err
	}
	return o.HTTP.Validate()
}

// eventBudget refuses a zero or negative --event-qps or --event-burst
// while Events are on: 0 would mean "never write an Event" without saying
// so.
func (o Options) eventBudget() error {
	if o.EventInterval > 0 && (o.EventQPS <= 0 || o.EventBurst <= 0) {
		return fmt.Errorf("--event-qps (%g) and --event-burst (%d) must be positive; --event-interval 0 turns events off", o.EventQPS, o.EventBurst)
	}
	return nil
}

// discovery refuses --discovery without the dynamic ranges it serves, and
// bounds that would turn its limits off.
func (o Options) discovery() error {
	if !o.Discovery {
		return nil
	}
	if !o.DynamicRanges {
		return errors.New("--discovery needs --dynamic-ranges: only machines a catch-all range leases to are discovered")
	}
	if o.DiscoveryMaxMachines < 1 {
		return fmt.Errorf("--discovery-max-machines (%d) must be at least 1", o.DiscoveryMaxMachines)
	}
	if o.DiscoveryRate <= 0 || o.DiscoveryBurst < 1 {
		return fmt.Errorf("--discovery-rate (%g) must be positive and --discovery-burst (%d) at least 1", o.DiscoveryRate, o.DiscoveryBurst)
	}
	return nil
}

// Validate refuses limits that would make the boot service unusable.
func (l HTTPLimits) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"http-read-header-timeout", l.ReadHeaderTimeout}, {"http-read-timeout", l.ReadTimeout},
		{"http-write-timeout", l.WriteTimeout}, {"http-idle-timeout", l.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s (%s) must be positive", d.flag, d.v))
		}
	}
	if l.MaxHeaderBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("--http-max-header-bytes (%d) must be at least 1024", l.MaxHeaderBytes))
	}
	if l.MaxConnsPerIP < 0 {
		errs = append(errs, fmt.Errorf("--http-max-conns-per-ip (%d) must not be negative", l.MaxConnsPerIP))
	}
	return errors.Join(errs...)
}
