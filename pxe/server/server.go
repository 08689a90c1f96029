// Package server is kubefarm-pxe: DHCPv4 (static leases from Machines and
// NodePools, dynamic ones from their ranges), TFTP for the iPXE binaries,
// HTTP for iPXE scripts, boot artifacts and the agent's configuration,
// IPv6 router advertisements of nothing, Events on Machines, the BootImage
// check, and /healthz and /metrics. cmd/kubefarm-pxe maps its flags onto
// Options; tests build the same server from Options, so they exercise the
// wiring that ships.
//
// Replicas run as hostNetwork pods on the nodes of the boot network, several
// at once. There is no leader election: every replica answers, because the
// answers are derived from the same API objects and agree, and a machine
// must be able to boot while any one replica is down. State is read
// through a controller-runtime cache, so when the admin API server goes away
// the replicas keep serving what they last knew.
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
	"github.com/kubefarm/kubefarm/pxe/inventory"
	"github.com/kubefarm/kubefarm/pxe/routeradv"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// Server is one kubefarm-pxe replica: New builds its services and opens
// their sockets, Start serves until its context ends or a service fails,
// Shutdown stops it.
type Server struct {
	opts Options
	log  logr.Logger
	boot bootServer
	reg  *prometheus.Registry

	// What New builds, in the order it builds it.
	cfg        *rest.Config
	scheme     *k8sruntime.Scheme
	cache      cache.Cache
	inv        *inventory.Inventory
	machines   *httpboot.CacheMachines
	watcher    client.WithWatch
	tokens     httpboot.JoinTokens
	tenants    httpboot.Tenants
	writer     client.Client
	allocator  *dynamic.Allocator
	store      *httpboot.Store
	stopEvents func()
	eventSink  events.Sink
	imageCheck controller.Controller
	discovery  *httpboot.Discovery
	windows    *httpboot.BootWindows
	handler    *httpboot.Handler

	// The sockets, opened by New, and their servers.
	httpLn    net.Listener
	httpSrv   *http.Server
	probeLn   net.Listener
	probes    *http.Server
	tftpConn  net.PacketConn
	tftpSrv   *tftp.Server
	dhcpConns []net.PacketConn
	dhcpSrv   *dhcp.Server
	ra        *routeradv.Responder

	// ready is closed once the cache and the inventory have synced.
	ready  chan struct{}
	synced sync.Once

	// Start and Shutdown.
	mu       sync.Mutex
	cancel   context.CancelFunc // the services' context; nil until Start
	shutDown bool
	wg       sync.WaitGroup
	errs     chan error
	stopOnce sync.Once
	stopErr  error
}

// New validates opts, then builds every service and opens every socket, so
// that a bad option or address fails here instead of leaving a
// half-working replica. What it opened is closed again when it fails.
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	boot, err := opts.bootServer()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Log, boot: boot, reg: prometheus.NewRegistry(), ready: make(chan struct{})}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := s.build(); err != nil {
		s.release(false)
		return nil, err
	}
	return s, nil
}

// build makes the services in the order they depend on each other. Its
// context bounds only the informers' registration and the lookup of the
// API server's addresses; nothing keeps it.
func (s *Server) build() error {
	ctx := context.Background()
	cfg := s.opts.Config
	if cfg == nil {
		var err error
		if cfg, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
	}
	s.cfg = cfg
	for _, step := range []func(context.Context) error{
		s.newCache, s.newClients, s.newStore, s.newEvents, s.newHandler,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return s.listen()
}
