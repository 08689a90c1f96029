package httpboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	RouteReport    = string(bootpaths.RouteReport)
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
	// Ready, when set, gates /healthz (e.g. the cache has synced).
	Ready func() bool
	// Windows tracks boot windows: serving a script opens one, /config
	// consumes it. Nil disables /config (every request gets 403).
	Windows *BootWindows
	// Tokens issues join tokens for /config. Nil: /config answers 503 to
	// an otherwise authorised request, without consuming its window.
	Tokens JoinTokens
	// Recorder writes boot reports. Nil: /report answers 503.
	Recorder BootRecorder
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

// NewHandler builds the handler. gather serves /metrics (nil: 404); m may
// be nil.
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
	if route == RouteReport {
		allow, ok = "POST", r.Method == http.MethodPost
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
	case bootpaths.RouteHealthz:
		serve = h.healthz
	case bootpaths.RouteMetrics:
		if h.metricsH != nil {
			serve = h.metricsH.ServeHTTP
		}
	case bootpaths.RouteScript:
		serve = func(w http.ResponseWriter, r *http.Request) { h.boot(w, r, arg) }
	case bootpaths.RouteArtifact:
		serve = func(w http.ResponseWriter, r *http.Request) { h.artifact(w, r, arg) }
	case bootpaths.RouteConfig:
		serve = func(w http.ResponseWriter, r *http.Request) { h.config(w, r, arg) }
	case bootpaths.RouteReport:
		serve = h.report
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

func (h *Handler) boot(w http.ResponseWriter, r *http.Request, rawMAC string) {
	mac, err := NormalizeMAC(rawMAC)
	if err != nil {
		http.Error(w, "bad MAC address", http.StatusBadRequest)
		return
	}
	m, ok := h.machines.ByMAC(mac)
	if !ok {
		h.log.V(1).Info("script for unknown MAC", "mac", mac, "peer", r.RemoteAddr)
		http.NotFound(w, r)
		return
	}
	key := machineKey(m)
	log := h.log.WithValues("mac", mac, "machine", key, "peer", r.RemoteAddr)
	// The objects below missing is a state the controllers will repair (a
	// pool or image being created), so 503: retry later, not "no such
	// machine".
	imgName, _ := ImageFor(m)
	img, ok := h.machines.BootImage(imgName)
	if !ok {
		log.Info("machine's boot image not found", "image", imgName)
		http.Error(w, "boot image not available", http.StatusServiceUnavailable)
		return
	}
	pool, ok := h.machines.Pool(m.Namespace, m.Spec.Pool)
	if !ok {
		log.Info("machine's pool not found", "pool", m.Spec.Pool)
		http.Error(w, "node pool not available", http.StatusServiceUnavailable)
		return
	}
	script, err := Script(m, img, pool, h.cfg.BaseURL)
	if err != nil {
		log.Error(err, "building iPXE script")
		http.Error(w, "cannot build boot script", http.StatusServiceUnavailable)
		return
	}
	// Fetch the artifacts before handing out a script that names them: a
	// script whose kernel 404s fails the boot, a 503 here is retried.
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.EnsureTimeout)
	defer cancel()
	for _, a := range []kubefarmv1.Artifact{img.Spec.Kernel, img.Spec.Initrd, img.Spec.Rootfs} {
		if err := h.store.Ensure(ctx, a, img.Spec.Repository); err != nil {
			log.Error(err, "caching artifact", "image", img.Name, "digest", a.Digest)
			http.Error(w, "boot artifacts not available yet", http.StatusServiceUnavailable)
			return
		}
	}
	if h.cfg.Windows != nil && r.Method == http.MethodGet {
		h.cfg.Windows.Open(key)
	}
	log.Info("serving boot script", "image", img.Name, "rootfs", img.Spec.Rootfs.Digest)
	if r.Method == http.MethodGet {
		h.normal(key, events.ReasonScriptServed, "", func() string {
			return fmt.Sprintf("served the iPXE script for image %s (root filesystem %s) to %s", img.Name, img.Spec.Rootfs.Digest, peerHost(r))
		})
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// Scripts change when the served image flips; never cache them.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(script)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = io.WriteString(w, script)
}

func (h *Handler) artifact(w http.ResponseWriter, r *http.Request, digest string) {
	if !validDigest(digest) {
		http.NotFound(w, r)
		return
	}
	f, err := h.store.Open(digest)
	if err != nil {
		if !errors.Is(err, ErrNotCached) {
			h.log.Error(err, "opening artifact", "digest", digest)
		}
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	serveFile(w, r, f, `"`+digest+`"`, "public, max-age=31536000, immutable")
	h.artifactServed(w, r, f, digest)
}

// artifactServed records ImageServed on the machine whose address fetched
// a whole artifact. Ranged or interrupted downloads are counted in the
// metrics only: their parts do not say when an artifact was "served".
func (h *Handler) artifactServed(w http.ResponseWriter, r *http.Request, f *os.File, digest string) {
	cw, ok := w.(*countingWriter)
	if h.cfg.Events == nil || !ok || cw.code != http.StatusOK || r.Method != http.MethodGet {
		return
	}
	fi, err := f.Stat()
	if err != nil || cw.n != fi.Size() {
		return
	}
	m, ok := h.machines.ByIP(peerHost(r))
	if !ok {
		return
	}
	h.normal(machineKey(m), events.ReasonImageServed, digest, func() string {
		what, image := "artifact", ""
		if name, _ := ImageFor(m); name != "" {
			if img, ok := h.machines.BootImage(name); ok {
				image = " of image " + img.Name
				switch digest {
				case img.Spec.Kernel.Digest:
					what = "kernel"
				case img.Spec.Initrd.Digest:
					what = "initrd"
				case img.Spec.Rootfs.Digest:
					what = "root filesystem"
				}
			}
		}
		return fmt.Sprintf("served the %s %s%s (%d bytes) to %s", what, digest, image, cw.n, peerHost(r))
	})
}

func (h *Handler) ipxe(w http.ResponseWriter, r *http.Request, name string) {
	if !bootpaths.IsBinary(name) || h.cfg.IPXEDir == "" {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(filepath.Join(h.cfg.IPXEDir, name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	// Binaries are replaced by package upgrades under the same name: let
	// ServeContent's Last-Modified drive revalidation instead of an ETag.
	serveFile(w, r, f, "", "no-cache")
}

// serveFile hands an *os.File to http.ServeContent, which answers Range and
// conditional requests and, through the ResponseWriter's ReadFrom, lets the
// kernel copy the file to the socket (sendfile).
func serveFile(w http.ResponseWriter, r *http.Request, f *os.File, etag, cacheControl string) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", cacheControl)
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
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

// forbidden answers 403 with one body for every reason, so that a prober
// learns nothing about which MACs exist or whose IP it lacks; the reason
// goes to the log.
func (h *Handler) forbidden(w http.ResponseWriter, r *http.Request, reason string, kv ...any) {
	h.log.Info("config/report request refused", append([]any{"reason", reason, "peer", r.RemoteAddr, "path", r.URL.Path}, kv...)...)
	http.Error(w, "forbidden", http.StatusForbidden)
}

// refused is forbidden for a request that names a known machine: the
// machine also gets a Warning event, so that `kubectl describe` shows
// someone asking for its credentials from the wrong place or time. The
// request path carries only the MAC, never a secret.
func (h *Handler) refused(w http.ResponseWriter, r *http.Request, m *kubefarmv1.Machine, reason string) {
	key := machineKey(m)
	h.forbidden(w, r, reason, "machine", key)
	if h.cfg.Events != nil && h.cfg.Events.Due(key, events.ReasonRefused, reason) {
		h.cfg.Events.Warning(key, events.ReasonRefused, reason, fmt.Sprintf("refused %s %s from %s: %s", r.Method, r.URL.Path, peerHost(r), reason))
	}
}

// normal records a Normal event whose message is built only when due.
func (h *Handler) normal(machine, reason, subject string, message func() string) {
	if h.cfg.Events != nil && h.cfg.Events.Due(machine, reason, subject) {
		h.cfg.Events.Normal(machine, reason, subject, message())
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

// peerMachine finds the machine of mac and checks that the request comes
// from the address it leases. It answers the request itself when not.
func (h *Handler) peerMachine(w http.ResponseWriter, r *http.Request, rawMAC string) (*kubefarmv1.Machine, bool) {
	mac, err := NormalizeMAC(rawMAC)
	if err != nil {
		h.forbidden(w, r, "bad MAC")
		return nil, false
	}
	m, ok := h.machines.ByMAC(mac)
	if !ok {
		h.forbidden(w, r, "unknown MAC", "mac", mac)
		return nil, false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	peer := net.ParseIP(host)
	if err != nil || peer == nil || !peer.Equal(net.ParseIP(m.Spec.IP)) {
		h.refused(w, r, m, "not from the machine's leased IP "+m.Spec.IP)
		return nil, false
	}
	return m, true
}

// config serves the machine's boot configuration with its join token:
// only to the machine's leased IP, for its MAC, inside its boot window,
// once. Anything else is 403.
func (h *Handler) config(w http.ResponseWriter, r *http.Request, rawMAC string) {
	if h.cfg.Windows == nil {
		h.forbidden(w, r, "boot configuration disabled")
		return
	}
	m, ok := h.peerMachine(w, r, rawMAC)
	if !ok {
		return
	}
	key := machineKey(m)
	log := h.log.WithValues("machine", key, "peer", r.RemoteAddr)
	pool, ok := h.machines.Pool(m.Namespace, m.Spec.Pool)
	if !ok {
		log.Info("machine's pool not found", "pool", m.Spec.Pool)
		http.Error(w, "node pool not available", http.StatusServiceUnavailable)
		return
	}
	nc, err := NodeConfigFor(m, pool)
	if err != nil {
		log.Error(err, "building node configuration")
		http.Error(w, "cannot build node configuration", http.StatusServiceUnavailable)
		return
	}
	if h.cfg.Tokens == nil {
		if h.cfg.Windows.IsOpen(key) {
			log.Info("no join token issuer configured")
			http.Error(w, "join credentials not available", http.StatusServiceUnavailable)
			return
		}
		h.refused(w, r, m, noWindow)
		return
	}
	opened, ok := h.cfg.Windows.Consume(key)
	if !ok {
		h.refused(w, r, m, noWindow)
		return
	}
	ctx, cancel := apiWriteContext(r)
	defer cancel()
	tok, err := h.cfg.Tokens.Issue(ctx, m)
	if err != nil {
		h.cfg.Windows.Restore(key, opened)
		log.Error(err, "issuing join token")
		http.Error(w, "join credentials not available", http.StatusServiceUnavailable)
		return
	}
	nc.JoinToken = tok
	body, err := json.Marshal(nc)
	if err != nil {
		h.cfg.Windows.Restore(key, opened)
		log.Error(err, "encoding node configuration")
		http.Error(w, "cannot encode node configuration", http.StatusServiceUnavailable)
		return
	}
	log.Info("served boot configuration")
	h.normal(key, events.ReasonConfigServed, "", func() string {
		return fmt.Sprintf("served the boot configuration with a join token to %s, %s after the boot window opened",
			peerHost(r), time.Since(opened).Round(time.Second))
	})
	w.Header().Set("Content-Type", "application/json")
	// It carries a credential: no cache anywhere may keep it.
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// noWindow is the refusal of a /config request outside its boot window.
const noWindow = "no open boot window (already used, expired, or this replica served no script for this boot)"

// APIWriteTimeout bounds an API write a request makes: issuing a join
// token, recording a boot.
const APIWriteTimeout = 30 * time.Second

// apiWriteContext is the context of an API write made for r: r's values
// without its cancellation, bounded by APIWriteTimeout. net/http cancels a
// request's context as soon as it reads EOF on the connection, which is
// also what a client that half-closes after its request sends (busybox nc
// does) while it still waits for the answer. Abandoning the write then
// would answer 503 about a write that may well land, and the client's
// retry would be cut short the same way.
func apiWriteContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), APIWriteTimeout)
}

// maxReport bounds a report body; a real one is about 150 bytes.
const maxReport = 4096

// report records what a machine booted in its status.lastBoot. Only the
// machine's leased IP may report for its MAC.
func (h *Handler) report(w http.ResponseWriter, r *http.Request) {
	var rep BootReport
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReport))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		http.Error(w, "bad report", http.StatusBadRequest)
		return
	}
	if _, err := rep.Validate(); err != nil {
		http.Error(w, "bad report: "+err.Error(), http.StatusBadRequest)
		return
	}
	m, ok := h.peerMachine(w, r, rep.MAC)
	if !ok {
		return
	}
	key := machineKey(m)
	log := h.log.WithValues("machine", key, "peer", r.RemoteAddr, "bootID", rep.BootID, "image", rep.ImageDigest)
	if lb := m.Status.LastBoot; lb != nil && lb.BootID == rep.BootID && lb.ImageDigest == rep.ImageDigest {
		// Agents retry; a repeat is not a new boot and needs no write.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if h.cfg.Recorder == nil {
		http.Error(w, "boot reports not recorded here", http.StatusServiceUnavailable)
		return
	}
	rec := kubefarmv1.BootRecord{BootID: rep.BootID, ImageDigest: rep.ImageDigest, Time: metav1.NewTime(time.Now())}
	ctx, cancel := apiWriteContext(r)
	defer cancel()
	if err := h.cfg.Recorder.RecordBoot(ctx, m, rec); err != nil {
		log.Error(err, "recording boot")
		http.Error(w, "cannot record boot", http.StatusServiceUnavailable)
		return
	}
	log.Info("boot recorded")
	h.normal(key, events.ReasonBootReported, rep.BootID, func() string {
		return fmt.Sprintf("booted %s, boot ID %s", rep.ImageDigest, rep.BootID)
	})
	w.WriteHeader(http.StatusNoContent)
}
