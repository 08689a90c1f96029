package httpboot

// The handler: routing by bootpaths.Parse, the request metrics, and what
// its routes share (events, the machine key, the peer's address).

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootpaths"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// Route names, the label values of the request metrics: bootpaths' routes.
// A fixed set keeps the metric's cardinality bounded whatever paths clients
// send.
const (
	RouteBoot      = string(bootpaths.RouteScript)
	RouteArtifacts = string(bootpaths.RouteArtifact)
	RouteIPXE      = string(bootpaths.RouteBinary)
	RouteConfig    = string(bootpaths.RouteConfig)
	RouteSecret    = string(bootpaths.RouteSecret)
	RouteReport    = string(bootpaths.RouteReport)
	RouteHeartbeat = string(bootpaths.RouteHeartbeat)
	RouteDiscovery = string(bootpaths.RouteDiscovery)
	RouteHealthz   = string(bootpaths.RouteHealthz)
	RouteMetrics   = string(bootpaths.RouteMetrics)
	RouteOther     = string(bootpaths.RouteOther)
)

// Config of the HTTP boot handler.
type Config struct {
	// BaseURL is how booting machines reach this service,
	// http://<server-ip>[:port]; it goes into every script.
	BaseURL string
	// IPXEDir holds the iPXE binaries served at /ipxe/<name> to UEFI HTTP
	// boot clients; the names allowed are bootpaths.Binaries, as over TFTP.
	IPXEDir string
	// EnsureTimeout bounds how long a /boot request waits for the
	// machine's artifacts to be cached (default 2 minutes). iPXE retries a
	// failed script fetch, so a slow first download costs a retry, not a
	// failed boot.
	EnsureTimeout time.Duration
	// Ready, when set, gates Probes' /healthz (e.g. the cache has synced).
	Ready func() bool
	// Windows tracks boots in progress: the DHCP server arms a machine's
	// boot, /secret takes the arm and issues the boot's secret, /config
	// takes the secret once (BootWindows). Nil disables /secret and
	// /config (every request gets 403).
	Windows *BootWindows
	// Tokens issues join tokens for /config. Nil: /config answers 503 to
	// an otherwise authorised request, without consuming its window.
	Tokens JoinTokens
	// Tenants, when set, fills the tenant facts of /config (API server,
	// CA, DNS, pod network). Nil: /config carries none of them.
	Tenants Tenants
	// Recorder writes boot reports and heartbeats' RebootRequired. Nil:
	// /report answers 503, and so does a heartbeat that would raise
	// RebootRequired (unless it is asked to reboot).
	Recorder BootRecorder
	// Leases finds the current leases of the pools' catch-all ranges
	// (pxe/dynamic); nil when kubefarm-pxe runs without them, and then a
	// MAC no Machine claims gets 404.
	Leases DynamicLeases
	// Discovery, when set (--discovery), boots the machines a Hold pool's
	// range leases to in discovery mode and records their reports (POST
	// /discovery); nil answers both 404.
	Discovery *Discovery
	// Events, when set, records each stage of a machine's HTTP boot
	// (script, artifacts, configuration, report) and each refusal as an
	// Event on the machine.
	Events events.Sink
}

// Metrics of the HTTP boot handler.
type Metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
}

// NewMetrics registers the HTTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_http", Name: "requests_total",
			Help: "HTTP boot requests, by route and status code.",
		}, []string{"route", "code"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_http", Name: "bytes_total",
			Help: "Response body bytes sent, by route.",
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.bytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Handler serves iPXE scripts, artifacts and iPXE binaries.
type Handler struct {
	cfg      Config
	machines Machines
	store    *Store
	metrics  *Metrics
	metricsH http.Handler
	log      logr.Logger
}

// NewHandler builds the handler. gather is what Probes serves at /metrics
// (nil: 404); m may be nil.
func NewHandler(cfg Config, machines Machines, store *Store, m *Metrics, gather prometheus.Gatherer, log logr.Logger) (*Handler, error) {
	if _, err := bootpaths.ParseBase(cfg.BaseURL); err != nil {
		return nil, err
	}
	if machines == nil || store == nil {
		return nil, errors.New("machines and store are required")
	}
	if cfg.EnsureTimeout <= 0 {
		cfg.EnsureTimeout = 2 * time.Minute
	}
	h := &Handler{cfg: cfg, machines: machines, store: store, metrics: m, log: log}
	if gather != nil {
		h.metricsH = promhttp.HandlerFor(gather, promhttp.HandlerOpts{})
	}
	return h, nil
}

// Windows is the handler's memory of boots in progress (Config.Windows),
// which the DHCP server arms.
func (h *Handler) Windows() *BootWindows { return h.cfg.Windows }

// ServeHTTP dispatches on the exact path shapes of bootpaths.Parse rather
// than a pattern mux, so that every accepted path is one that package
// spells out.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, serve := h.route(r.URL.Path)
	rw := &countingWriter{ResponseWriter: w}
	defer func() {
		if h.metrics != nil {
			code := rw.code
			if code == 0 {
				code = http.StatusOK
			}
			h.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			h.metrics.bytes.WithLabelValues(route).Add(float64(rw.n))
		}
	}()
	allow, ok := "GET, HEAD", r.Method == http.MethodGet || r.Method == http.MethodHead
	switch route {
	case RouteReport, RouteHeartbeat, RouteDiscovery:
		allow, ok = "POST", r.Method == http.MethodPost
	case RouteSecret:
		// A HEAD would be a GET that mints a secret nobody receives.
		allow, ok = "GET", r.Method == http.MethodGet
	}
	if !ok {
		rw.Header().Set("Allow", allow)
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	serve(rw, r)
}

// route is the metric label and the handler of path p.
func (h *Handler) route(p string) (string, http.HandlerFunc) {
	route, arg := bootpaths.Parse(p)
	var serve http.HandlerFunc
	switch route {
	case bootpaths.RouteScript:
		serve = func(w http.ResponseWriter, r *http.Request) { h.boot(w, r, arg) }
	case bootpaths.RouteArtifact:
		serve = func(w http.ResponseWriter, r *http.Request) { h.artifact(w, r, arg) }
	case bootpaths.RouteConfig:
		serve = func(w http.ResponseWriter, r *http.Request) { h.config(w, r, arg) }
	case bootpaths.RouteSecret:
		serve = func(w http.ResponseWriter, r *http.Request) { h.secret(w, r, arg) }
	case bootpaths.RouteReport:
		serve = h.report
	case bootpaths.RouteHeartbeat:
		serve = h.heartbeat
	case bootpaths.RouteDiscovery:
		serve = h.discovery
	case bootpaths.RouteBinary:
		serve = func(w http.ResponseWriter, r *http.Request) { h.ipxe(w, r, arg) }
	}
	if serve == nil {
		return RouteOther, http.NotFound
	}
	return string(route), serve
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	if h.cfg.Ready != nil && !h.cfg.Ready() {
		http.Error(w, "cache not synced", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// countingWriter records the status code and body bytes for metrics. It
// implements io.ReaderFrom so that wrapping does not turn off sendfile.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(struct{ io.Writer }{c.ResponseWriter}, r)
	}
	c.n += n
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// normal records a Normal event whose message is built only when due.
func (h *Handler) normal(machine, reason, subject string, message func() string) {
	if h.cfg.Events != nil && h.cfg.Events.Due(machine, reason, subject) {
		h.cfg.Events.Normal(machine, reason, subject, message())
	}
}

// warning records a Warning event whose message is built only when due.
func (h *Handler) warning(machine, reason, subject string, message func() string) {
	if h.cfg.Events != nil && h.cfg.Events.Due(machine, reason, subject) {
		h.cfg.Events.Warning(machine, reason, subject, message())
	}
}

// machineKey is bootpaths' key of m.
func machineKey(m *kubefarmv1.Machine) string { return bootpaths.MachineKey(m.Namespace, m.Name) }

// peerHost is the request's source address without the port.
func peerHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
