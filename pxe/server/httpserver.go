package server

// The HTTP listeners: the boot service on the boot network, with the limits
// that keep one host on it from holding the replica's connections or
// goroutines, and the probe listener (/healthz, /metrics) apart from it.

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/httplimit"
)

// DefaultMetricsAddr is where /healthz and /metrics listen: loopback, so
// that nothing on the boot network (which is the node's primary network
// unless pxe.serverIP says otherwise) reaches them. The kubelet probes a
// hostNetwork pod from the node's own network namespace, so an httpGet
// probe with host 127.0.0.1 reaches it.
const DefaultMetricsAddr = "127.0.0.1:9090"

// routeDeadlines are the read and write deadlines of one boot service
// request, by its route. Downloads get none: a rootfs of hundreds of MiB
// over a slow link takes as long as it takes, and a stalled one holds only
// a connection within its IP's cap. /boot waits up to --artifact-wait for
// the artifacts before it answers, so it gets that on top.
func (o *Options) routeDeadlines(r *http.Request) httplimit.Deadlines {
	route, _ := bootpaths.Parse(r.URL.Path)
	switch route {
	case bootpaths.RouteArtifact, bootpaths.RouteBinary:
		return httplimit.Deadlines{}
	case bootpaths.RouteScript:
		return httplimit.Deadlines{Read: o.HTTP.ReadTimeout + o.ArtifactWait, Write: o.HTTP.WriteTimeout + o.ArtifactWait}
	}
	return httplimit.Deadlines{Read: o.HTTP.ReadTimeout, Write: o.HTTP.WriteTimeout}
}

// bootHTTPServer is the boot service's server. It sets no ReadTimeout or
// WriteTimeout of its own: those would apply to downloads too; each
// request's come from routeDeadlines.
func (o *Options) bootHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           httplimit.Handler(h, o.routeDeadlines),
		ReadHeaderTimeout: o.HTTP.ReadHeaderTimeout,
		IdleTimeout:       o.HTTP.IdleTimeout,
		MaxHeaderBytes:    o.HTTP.MaxHeaderBytes,
	}
}

// bootListener caps ln's connections per client IP and counts the ones
// refused.
func (o *Options) bootListener(ln net.Listener, reg prometheus.Registerer) (*httplimit.Listener, error) {
	limited := httplimit.NewListener(ln, o.HTTP.MaxConnsPerIP)
	refused := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "kubefarm", Subsystem: "pxe_http", Name: "connections_refused_total",
		Help: "Connections to the HTTP boot service closed at once because their client IP had --http-max-conns-per-ip open.",
	}, func() float64 { return float64(limited.Refused()) })
	if err := reg.Register(refused); err != nil {
		return nil, err
	}
	return limited, nil
}

// listenProbes opens --metrics-addr; nil when it is empty.
func (o *Options) listenProbes() (net.Listener, error) {
	if o.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return ln, nil
}

// probeServer serves /healthz and /metrics. Its clients are the kubelet and
// Prometheus, never a booting machine, so plain short limits do.
func probeServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    8 << 10,
	}
}
