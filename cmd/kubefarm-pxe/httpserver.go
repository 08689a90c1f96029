package main

// The HTTP listeners: the boot service on the boot network, with the limits
// that keep one host on it from holding the replica's connections or
// goroutines, and the probe listener (/healthz, /metrics) apart from it.

import (
	"errors"
	"flag"
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

// httpLimits bound what clients of the boot service can hold.
type httpLimits struct {
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int
	maxConnsPerIP     int
}

// registerHTTP defines the flags of the probe listener and of the boot
// service's limits.
func (o *options) registerHTTP(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", DefaultMetricsAddr,
		"address /healthz and /metrics listen on, apart from the boot service (--http-addr), which answers neither; "+
			"keep it off the boot network: loopback (the kubelet probes a hostNetwork pod from the node), or the node's "+
			"management address for Prometheus; empty disables both")
	l := &o.http
	fs.DurationVar(&l.readHeaderTimeout, "http-read-header-timeout", 10*time.Second,
		"how long a client of the boot service may take to send a request's header; boot clients send tiny ones")
	fs.DurationVar(&l.readTimeout, "http-read-timeout", 30*time.Second,
		"how long a request to the boot service may take to send its body, after its header; net/http also cancels a "+
			"request's context then, so /boot gets --artifact-wait more; not applied to /artifacts and /ipxe downloads")
	fs.DurationVar(&l.writeTimeout, "http-write-timeout", time.Minute,
		"how long the boot service may take to answer a request, after its header (/boot gets --artifact-wait more); "+
			"not applied to /artifacts and /ipxe downloads, which a slow link may take long to fetch")
	fs.DurationVar(&l.idleTimeout, "http-idle-timeout", 2*time.Minute,
		"how long a kept-alive connection to the boot service may wait for its next request")
	fs.IntVar(&l.maxHeaderBytes, "http-max-header-bytes", 8<<10,
		"largest request header the boot service reads; a larger one is answered 431 (net/http allows 4 KiB over it)")
	fs.IntVar(&l.maxConnsPerIP, "http-max-conns-per-ip", 16,
		"connections one client IP may have open to the boot service at once; more are closed as they are accepted "+
			"(counted in kubefarm_pxe_http_connections_refused_total); 0 means no cap")
}

// validate refuses limits that would make the boot service unusable.
func (l httpLimits) validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"http-read-header-timeout", l.readHeaderTimeout}, {"http-read-timeout", l.readTimeout},
		{"http-write-timeout", l.writeTimeout}, {"http-idle-timeout", l.idleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s (%s) must be positive", d.flag, d.v))
		}
	}
	if l.maxHeaderBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("--http-max-header-bytes (%d) must be at least 1024", l.maxHeaderBytes))
	}
	if l.maxConnsPerIP < 0 {
		errs = append(errs, fmt.Errorf("--http-max-conns-per-ip (%d) must not be negative", l.maxConnsPerIP))
	}
	return errors.Join(errs...)
}

// routeDeadlines are the read and write deadlines of one boot service
// request, by its route. Downloads get none: a rootfs of hundreds of MiB
// over a slow link takes as long as it takes, and a stalled one holds only
// a connection within its IP's cap. /boot waits up to --artifact-wait for
// the artifacts before it answers, so it gets that on top.
func (o *options) routeDeadlines(r *http.Request) httplimit.Deadlines {
	route, _ := bootpaths.Parse(r.URL.Path)
	switch route {
	case bootpaths.RouteArtifact, bootpaths.RouteBinary:
		return httplimit.Deadlines{}
	case bootpaths.RouteScript:
		return httplimit.Deadlines{Read: o.http.readTimeout + o.ensureTimeout, Write: o.http.writeTimeout + o.ensureTimeout}
	}
	return httplimit.Deadlines{Read: o.http.readTimeout, Write: o.http.writeTimeout}
}

// bootHTTPServer is the boot service's server. It sets no ReadTimeout or
// WriteTimeout of its own: those would apply to downloads too; each
// request's come from routeDeadlines.
func (o *options) bootHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           httplimit.Handler(h, o.routeDeadlines),
		ReadHeaderTimeout: o.http.readHeaderTimeout,
		IdleTimeout:       o.http.idleTimeout,
		MaxHeaderBytes:    o.http.maxHeaderBytes,
	}
}

// bootListener caps ln's connections per client IP and counts the ones
// refused.
func (o *options) bootListener(ln net.Listener, reg prometheus.Registerer) (*httplimit.Listener, error) {
	limited := httplimit.NewListener(ln, o.http.maxConnsPerIP)
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
func (o *options) listenProbes() (net.Listener, error) {
	if o.metricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.metricsAddr)
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
