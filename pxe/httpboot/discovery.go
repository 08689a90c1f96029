package httpboot

// Discovery: the boot of a MAC no Machine claims (unclaimed.go decides
// it) and POST /discovery, where the agent of a discovery boot reports the
// hardware, recorded as a cluster-scoped DiscoveredMachine named after the
// MAC (docs/discovery.md).
//
// Every host on the boot network can send a report, so the endpoint is
// bounded on every axis before it writes: the body (MaxDiscoveryReport,
// strict JSON, every field within the API type's bounds), the sender (only
// the address a catch-all range leases to the report's MAC; a rate per
// source address in a table of bounded size), the writes (a new object
// only under the cap of DiscoveredMachines, counted from this replica's
// watch of them, and within a global token bucket; an existing one is
// rewritten only when its facts change or its lastSeen is older than
// Refresh). Over a bound the answer is 429 at once: nothing queues, no
// goroutine outlives its request.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
)

// kubefarm-pxe records discovered machines: it watches them (the cap is
// counted from that watch, and a steady agent's report is compared with
// it) and creates and updates them.
// +kubebuilder:rbac:groups=kubefarm.io,resources=discoveredmachines,verbs=get;list;watch;create;patch

// DynamicLeases finds current leases of the pools' catch-all ranges, from
// the cache (pxe/dynamic's Allocator).
type DynamicLeases interface {
	LeaseOfMAC(ctx context.Context, mac string) (dynamic.Held, bool)
	LeaseOfIP(ctx context.Context, ip string) (dynamic.Held, bool)
}

// Defaults of DiscoveryConfig.
const (
	DefaultDiscoveryMaxMachines = 1000
	DefaultDiscoveryRate        = 5.0
	DefaultDiscoveryBurst       = 20
	// DefaultReportAfter is the agent's reporting interval (it jitters it).
	DefaultReportAfter = 60 * time.Second
	// DefaultRefresh: a steady agent's report rewrites lastSeen at most
	// this often.
	DefaultRefresh = 5 * time.Minute
	// DefaultPerIPInterval and DefaultPerIPBurst: one source address may
	// report once per interval, with this burst (an agent reports once
	// per DefaultReportAfter, and retries a failure sooner).
	DefaultPerIPInterval = 5 * time.Second
	DefaultPerIPBurst    = 3
	// DefaultMaxSources bounds the per-source table: beyond it (after the
	// idle entries are swept) a new source is refused.
	DefaultMaxSources = 4096
	// pendingTTL is how long a created object counts towards the cap
	// before this replica's watch has shown it.
	pendingTTL = time.Minute
)

// DiscoveryConfig configures the discovery reports of a replica.
type DiscoveryConfig struct {
	// MaxMachines caps the DiscoveredMachines that exist
	// (--discovery-max-machines); a report that would make one more is
	// answered 429.
	MaxMachines int
	// Rate and Burst are the token bucket of new DiscoveredMachines
	// (--discovery-rate, --discovery-burst).
	Rate  float64
	Burst int
	// PerIPInterval and PerIPBurst bound one source address's reports;
	// MaxSources bounds the table that tracks them.
	PerIPInterval time.Duration
	PerIPBurst    int
	MaxSources    int
	// ReportAfter is what the answer tells the agent (ReportAfterSeconds).
	ReportAfter time.Duration
	// Refresh is how old lastSeen may get before an unchanged report
	// rewrites it.
	Refresh time.Duration
	// Client writes DiscoveredMachines.
	Client client.Client
	// Events, when set, gets Warnings on NodePools: DiscoveryCapReached
	// on the pool whose range served a report refused by the cap, at
	// most once a minute for the replica; BootImageMissing on a Hold
	// pool whose spec.bootImage does not exist when an unclaimed MAC of
	// its range asks for its discovery boot, at most once a minute per
	// pool (poolwarn.go).
	Events record.EventRecorder
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Discovery records discovery reports. Build it with NewDiscovery before
// the cache starts.
type Discovery struct {
	cfg     DiscoveryConfig
	reader  client.Reader
	known   *knownSet
	global  *rate.Limiter
	sources *sourceLimiter
	// capWarn throttles capReached's log line and Warning for the
	// replica; missing the BootImageMissing Warnings per pool
	// (poolwarn.go).
	capWarn *keyThrottle
	missing *keyThrottle
	reports *prometheus.CounterVec
	log     logr.Logger
}

// Discovery report results, the label of kubefarm_pxe_discovery_reports_total.
const (
	DiscoveryCreated     = "created"
	DiscoveryUpdated     = "updated"
	DiscoveryUnchanged   = "unchanged"
	DiscoveryEnrolled    = "enrolled"
	DiscoveryCapped      = "refused_cap"
	DiscoveryRateLimited = "refused_rate"
	DiscoverySourceLimit = "refused_source_rate"
	DiscoveryForbidden   = "forbidden"
	DiscoveryInvalid     = "invalid"
	DiscoveryFailed      = "failed"
)

// NewDiscovery registers its watch of DiscoveredMachines on c (which then
// holds at most about MaxMachines of them) and its metrics on reg.
func NewDiscovery(ctx context.Context, c cache.Cache, cfg DiscoveryConfig, reg prometheus.Registerer, log logr.Logger) (*Discovery, error) {
	if cfg.Client == nil {
		return nil, errors.New("discovery: Client is required")
	}
	d, err := newDiscovery(cfg, log)
	if err != nil {
		return nil, err
	}
	d.reader = c
	known := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "kubefarm", Subsystem: "pxe_discovery", Name: "machines",
		Help: "DiscoveredMachines this replica counts against --discovery-max-machines (watched, plus created and not yet seen).",
	}, func() float64 { return float64(d.known.count()) })
	for _, col := range []prometheus.Collector{d.reports, known} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	inf, err := c.GetInformer(ctx, &kubefarmv1.DiscoveredMachine{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("watching DiscoveredMachines: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if m, ok := o.(*kubefarmv1.DiscoveredMachine); ok {
				d.known.seen(m.Name)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if m, ok := o.(*kubefarmv1.DiscoveredMachine); ok {
				d.known.gone(m.Name)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching DiscoveredMachines: %w", err)
	}
	return d, nil
}

// newDiscovery checks cfg, fills its defaults and builds the Discovery,
// without its reader, metrics registration or watch (NewDiscovery's).
func newDiscovery(cfg DiscoveryConfig, log logr.Logger) (*Discovery, error) {
	if cfg.MaxMachines < 1 {
		return nil, fmt.Errorf("--discovery-max-machines (%d) must be at least 1", cfg.MaxMachines)
	}
	if cfg.Rate <= 0 || cfg.Burst < 1 {
		return nil, fmt.Errorf("--discovery-rate (%g) must be positive and --discovery-burst (%d) at least 1", cfg.Rate, cfg.Burst)
	}
	if cfg.PerIPInterval <= 0 {
		cfg.PerIPInterval = DefaultPerIPInterval
	}
	if cfg.PerIPBurst < 1 {
		cfg.PerIPBurst = DefaultPerIPBurst
	}
	if cfg.MaxSources < 1 {
		cfg.MaxSources = DefaultMaxSources
	}
	if cfg.ReportAfter <= 0 {
		cfg.ReportAfter = DefaultReportAfter
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Discovery{
		cfg: cfg, known: newKnownSet(cfg.Now),
		global:  rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst),
		sources: newSourceLimiter(rate.Every(cfg.PerIPInterval), cfg.PerIPBurst, cfg.MaxSources, cfg.Now),
		capWarn: newKeyThrottle(poolWarningInterval, 1, cfg.Now),
		missing: newKeyThrottle(poolWarningInterval, maxWarnedPools, cfg.Now),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_discovery", Name: "reports_total",
			Help: "Discovery reports (POST /discovery), by result: created, updated, unchanged, enrolled, " +
				"refused_cap, refused_rate, refused_source_rate, forbidden, invalid, failed.",
		}, []string{"result"}),
		log: log,
	}
	for _, r := range []string{DiscoveryCreated, DiscoveryUpdated, DiscoveryUnchanged, DiscoveryEnrolled, DiscoveryCapped,
		DiscoveryRateLimited, DiscoverySourceLimit, DiscoveryForbidden, DiscoveryInvalid, DiscoveryFailed} {
		d.reports.WithLabelValues(r)
	}
	return d, nil
}

// ParseDiscoveryReport decodes a report body (already bounded by
// MaxDiscoveryReport) strictly: one JSON object, no unknown field, nothing
// after it; then bootproto's checks of every field.
func ParseDiscoveryReport(body []byte) (bootproto.DiscoveryReport, error) {
	var rep bootproto.DiscoveryReport
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		// Not the decoder's message: it may quote the body.
		return bootproto.DiscoveryReport{}, errors.New("not a discovery report: malformed JSON, an unknown field or a field of the wrong type")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bootproto.DiscoveryReport{}, errors.New("not a discovery report: data after the JSON object")
	}
	return rep.Validate()
}

// DiscoveryWrite is what a report costs the API server.
type DiscoveryWrite int

const (
	// WriteNone: the object says what the report says, recently enough.
	WriteNone DiscoveryWrite = iota
	// WriteCreate: no object yet.
	WriteCreate
	// WriteUpdate: the facts, address or pool changed, or lastSeen is
	// older than refresh.
	WriteUpdate
)

// DecideDiscoveryWrite compares the object (nil when there is none) with
// the spec a report asks for (its lastSeen is now).
func DecideDiscoveryWrite(cur *kubefarmv1.DiscoveredMachine, want kubefarmv1.DiscoveredMachineSpec, refresh time.Duration) DiscoveryWrite {
	if cur == nil {
		return WriteCreate
	}
	have := cur.Spec
	if have.MAC != want.MAC || have.IP != want.IP || have.Pool != want.Pool || !equality.Semantic.DeepEqual(have.Hardware, want.Hardware) {
		return WriteUpdate
	}
	if want.LastSeen.Sub(have.LastSeen.Time) >= refresh {
		return WriteUpdate
	}
	return WriteNone
}

// discovery serves POST /discovery.
func (h *Handler) discovery(w http.ResponseWriter, r *http.Request) {
	d := h.cfg.Discovery
	if d == nil || h.cfg.Leases == nil {
		http.NotFound(w, r)
		return
	}
	peer := peerHost(r)
	if !d.sources.allow(peer) {
		d.count(DiscoverySourceLimit)
		d.tooMany(w, d.cfg.PerIPInterval)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bootproto.MaxDiscoveryReport))
	if err != nil {
		d.count(DiscoveryInvalid)
		http.Error(w, "bad discovery report: body over "+strconv.Itoa(bootproto.MaxDiscoveryReport)+" bytes or unreadable", http.StatusBadRequest)
		return
	}
	rep, err := ParseDiscoveryReport(body)
	if err != nil {
		d.count(DiscoveryInvalid)
		http.Error(w, "bad discovery report: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	held, leased := h.cfg.Leases.LeaseOfIP(ctx, peer)
	cancel()
	leased = leased && held.MAC == rep.MAC
	if m, ok := h.machines.ByMAC(rep.MAC); ok && (leased || peerIs(r, m.Spec.IP)) {
		// Enrolled: the next boot is the Machine's. Asked from the lease's
		// address, or from the Machine's own (the address the enrollment
		// gave it, no longer a lease of the range). Nothing to write: the
		// DiscoveredMachine's removal is the enrollment's business.
		d.count(DiscoveryEnrolled)
		d.answer(w, http.StatusOK, true)
		return
	}
	if !leased {
		d.count(DiscoveryForbidden)
		h.forbidden(w, r, "discovery report not from the address a catch-all range leases to its MAC", "mac", rep.MAC)
		return
	}
	pool, ok := h.machines.Pool(held.Namespace, held.Pool)
	if !ok || DecideUnclaimed(held, true, pool, true, 0) != UnclaimedDiscover {
		d.count(DiscoveryForbidden)
		h.forbidden(w, r, "the lease's pool does not hold unknown machines for discovery", "mac", rep.MAC, "pool", held.PoolKey())
		return
	}
	h.recordDiscovery(w, r, d, rep, held)
}

// recordDiscovery writes the report's DiscoveredMachine when it must, and
// answers.
func (h *Handler) recordDiscovery(w http.ResponseWriter, r *http.Request, d *Discovery, rep bootproto.DiscoveryReport, held dynamic.Held) {
	name := kubefarmv1.DiscoveredMachineName(rep.MAC)
	log := h.log.WithValues("discoveredMachine", name, "peer", r.RemoteAddr, "pool", held.PoolKey())
	want := kubefarmv1.DiscoveredMachineSpec{MAC: rep.MAC, IP: held.IP, Pool: held.PoolKey(),
		LastSeen: metav1.NewTime(d.cfg.Now().Truncate(time.Second)), Hardware: rep.Hardware}
	var cur *kubefarmv1.DiscoveredMachine
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	var obj kubefarmv1.DiscoveredMachine
	if err := d.reader.Get(ctx, types.NamespacedName{Name: name}, &obj); err == nil {
		cur = &obj
	}
	cancel()
	wctx, wcancel := apiWriteContext(r)
	defer wcancel()
	switch DecideDiscoveryWrite(cur, want, d.cfg.Refresh) {
	case WriteNone:
		d.count(DiscoveryUnchanged)
	case WriteUpdate:
		next := cur.DeepCopy()
		next.Spec = want
		if err := d.cfg.Client.Patch(wctx, next, client.MergeFrom(cur), client.FieldOwner(FieldOwner)); err != nil {
			d.count(DiscoveryFailed)
			log.Error(err, "updating the DiscoveredMachine")
			http.Error(w, "cannot record the discovery report", http.StatusServiceUnavailable)
			return
		}
		d.count(DiscoveryUpdated)
	case WriteCreate:
		if !d.known.reserve(name, d.cfg.MaxMachines) {
			d.count(DiscoveryCapped)
			d.capReached(r, rep.MAC, held, h.machines)
			d.tooMany(w, d.cfg.ReportAfter)
			return
		}
		if !d.global.Allow() {
			d.known.release(name)
			d.count(DiscoveryRateLimited)
			d.tooMany(w, time.Duration(float64(time.Second)/d.cfg.Rate)+time.Second)
			return
		}
		obj := &kubefarmv1.DiscoveredMachine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: want}
		err := d.cfg.Client.Create(wctx, obj, client.FieldOwner(FieldOwner))
		switch {
		case apierrors.IsAlreadyExists(err):
			// Another replica recorded it first; the next report
			// compares with that one.
			d.count(DiscoveryUnchanged)
		case err != nil:
			d.known.release(name)
			d.count(DiscoveryFailed)
			log.Error(err, "creating the DiscoveredMachine")
			http.Error(w, "cannot record the discovery report", http.StatusServiceUnavailable)
			return
		default:
			d.count(DiscoveryCreated)
			log.Info("discovered a machine", "mac", rep.MAC, "ip", held.IP)
		}
	}
	d.answer(w, http.StatusOK, false)
}

func (d *Discovery) count(result string) { d.reports.WithLabelValues(result).Inc() }

// answer writes a DiscoveryAnswer.
func (d *Discovery) answer(w http.ResponseWriter, code int, enrolled bool) {
	b, _ := json.Marshal(bootproto.DiscoveryAnswer{Enrolled: enrolled, ReportAfterSeconds: int32(d.cfg.ReportAfter / time.Second)})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// tooMany answers 429 with Retry-After and the usual answer, so that an
// agent keeps its cadence either way.
func (d *Discovery) tooMany(w http.ResponseWriter, after time.Duration) {
	secs := int(after.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	d.answer(w, http.StatusTooManyRequests, false)
}

// knownSet counts the DiscoveredMachines against the cap: the names this
// replica's watch holds, plus those it created and has not seen yet
// (pending, for at most pendingTTL). Reserving under one lock makes the
// cap exact for one replica; replicas each count their own creations
// until the watch shows them, so N replicas overshoot by at most what
// they create within one watch delay.
type knownSet struct {
	now     func() time.Time
	mu      sync.Mutex
	names   map[string]struct{}
	pending map[string]time.Time
}

func newKnownSet(now func() time.Time) *knownSet {
	return &knownSet{now: now, names: map[string]struct{}{}, pending: map[string]time.Time{}}
}

func (k *knownSet) seen(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.names[name] = struct{}{}
	delete(k.pending, name)
}

func (k *knownSet) gone(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.names, name)
	delete(k.pending, name)
}

func (k *knownSet) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.names) + len(k.pending)
}

// reserve counts name towards the cap; false when that would exceed max.
// A name already counted is reserved at no cost.
func (k *knownSet) reserve(name string, max int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.names[name]; ok {
		return true
	}
	now := k.now()
	if _, ok := k.pending[name]; ok {
		k.pending[name] = now
		return true
	}
	for n, t := range k.pending {
		if now.Sub(t) > pendingTTL {
			delete(k.pending, n)
		}
	}
	if len(k.names)+len(k.pending) >= max {
		return false
	}
	k.pending[name] = now
	return true
}

// release undoes a reservation whose object was not created.
func (k *knownSet) release(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pending, name)
}

// sourceLimiter is a token bucket per source address, in a table of at
// most max entries: when it is full, entries whose bucket has refilled
// (idle sources) are swept; a new source finding it still full is refused.
type sourceLimiter struct {
	every rate.Limit
	burst int
	max   int
	now   func() time.Time
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func newSourceLimiter(every rate.Limit, burst, max int, now func() time.Time) *sourceLimiter {
	return &sourceLimiter{every: every, burst: burst, max: max, now: now, m: map[string]*rate.Limiter{}}
}

func (s *sourceLimiter) allow(src string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	l, ok := s.m[src]
	if !ok {
		if len(s.m) >= s.max {
			for k, v := range s.m {
				if v.TokensAt(now) >= float64(s.burst) {
					delete(s.m, k)
				}
			}
			if len(s.m) >= s.max {
				return false
			}
		}
		l = rate.NewLimiter(s.every, s.burst)
		s.m[src] = l
	}
	return l.AllowN(now, 1)
}

// peerIs reports whether r comes from ip (dotted quad).
func peerIs(r *http.Request, ip string) bool {
	p := net.ParseIP(peerHost(r))
	return p != nil && p.Equal(net.ParseIP(ip))
}
