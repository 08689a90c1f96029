// Package events records Kubernetes Events on Machines for each stage of a
// boot: DHCP offer and ack, iPXE script, boot artifacts, boot configuration,
// and refusals. Events are what an operator sees in `kubectl describe
// machine`; metrics count everything, events tell the story of one boot.
//
// Boot traffic is bursty (a rack powering on, a perfdhcp run) and an event
// is an API write, so recording is throttled per machine, reason and
// subject before anything is built: a repeat within Interval costs one map
// lookup and no allocation. That throttle does nothing in a storm, where
// every machine is a new machine, so what passes it also needs a token of a
// bucket shared by every machine (Rate per second, Burst at once): a storm
// of 20,000 boots writes at most Burst + Rate x seconds Events per replica.
// What the bucket refuses is counted by reason (a metric, and a log line at
// most every DropReportInterval), never silently lost. What passes goes to
// client-go's event broadcaster, which queues a bounded number of events
// and aggregates repeats; a slow or absent API server therefore never slows
// a DHCP or HTTP answer.
package events

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Reasons of the events kubefarm-pxe records on Machines. They are the
// stages of a boot in order, plus the refusals and what stops a boot.
// BootImageMissing is also, and DiscoveryCapReached only, recorded on
// NodePools, by httpboot's Discovery through a record.EventRecorder.
const (
	ReasonOffered      = "Offered"      // DHCPOFFER sent
	ReasonAcked        = "Acked"        // DHCPACK sent
	ReasonDeclined     = "Declined"     // the machine reported its address in use
	ReasonScriptServed = "ScriptServed" // iPXE script served
	ReasonImageServed  = "ImageServed"  // a kernel, initrd or root filesystem fully sent
	ReasonSecretIssued = "SecretIssued" // the boot's secret handed to the booting machine
	ReasonConfigServed = "ConfigServed" // boot configuration with the join token served
	ReasonBootReported = "BootReported" // the booted machine reported boot ID and digest
	ReasonRefused      = "Refused"      // a request for the machine was refused (403)
	// ReasonNetworkUnverified (Warning): the agent's CNI chain check failed;
	// the node keeps kubefarm.io/network-unavailable.
	ReasonNetworkUnverified = "NetworkUnverified"
	// ReasonBootFailed (Warning): the initrd stopped the boot before the
	// image (a root filesystem whose digest did not match, a download
	// that never completed) and reported why.
	ReasonBootFailed = "BootFailed"
	// ReasonBootImageMissing (Warning): the BootImage a boot needs does
	// not exist, so kubefarm-pxe answers the script request 503 until it
	// does. Recorded on the Machine (its status.servedImage or
	// spec.desiredImage) and, for the discovery boot of a MAC no Machine
	// claims, on the NodePool (its spec.bootImage).
	ReasonBootImageMissing = "BootImageMissing"
	// ReasonPoolMissing (Warning): the Machine's NodePool (spec.pool) does
	// not exist; its script request is answered 503 until it does.
	ReasonPoolMissing = "PoolMissing"
	// ReasonDiscoveryCapReached (Warning, on the NodePool): a discovery
	// report from its range was refused by --discovery-max-machines.
	ReasonDiscoveryCapReached = "DiscoveryCapReached"
)

// DefaultInterval is how often the same event (machine, reason, subject)
// may be recorded. One boot does DHCP up to three times (firmware, iPXE,
// kernel) within a minute; an interval of a minute shows it once, and the
// next boot again.
const DefaultInterval = time.Minute

// DefaultRate and DefaultBurst bound the Events one replica writes over all
// machines: a burst of 50 covers a rack powering on (its first stages are
// all recorded), and 5 per second afterwards costs the API server and etcd
// about a hundredth of a core (an Event write costs them about 2 ms of CPU)
// however long the storm lasts.
const (
	DefaultRate  = 5.0
	DefaultBurst = 50
)

// DropReportInterval is how often, at most, the Events refused by the
// bucket are logged (counts by reason since the last line).
const DropReportInterval = 30 * time.Second

// maxTracked bounds the throttle's memory: past it, entries older than the
// interval are swept, and if that frees nothing the map is reset (which at
// worst lets one extra event per machine through).
const maxTracked = 100_000

// Sink is what the DHCP and HTTP servers need of a Recorder. Due is asked
// first so that a throttled event costs no message formatting.
type Sink interface {
	Due(machine, reason, subject string) bool
	Normal(machine, reason, subject, message string)
	Warning(machine, reason, subject, message string)
}

var _ Sink = (*Recorder)(nil)

// UIDLookup finds a machine's UID so that events attach to the object
// `kubectl describe` shows; it is called only for events that pass the
// throttle. ok=false records the event without a UID.
type UIDLookup func(namespace, name string) (uid types.UID, ok bool)

// Recorder records throttled Events on Machines. A nil *Recorder records
// nothing, so callers need no checks.
type Recorder struct {
	rec      record.EventRecorder
	uid      UIDLookup
	interval time.Duration
	now      func() time.Time
	bucket   *rate.Limiter
	dropped  *prometheus.CounterVec
	log      logr.Logger

	mu   sync.Mutex
	last map[key]time.Time
	// sweptAt is when last was last swept of the entries past the
	// interval (Sweep).
	sweptAt time.Time
	// unreported counts the bucket's refusals by reason since the last
	// log line, written at reportedAt.
	unreported map[string]int
	reportedAt time.Time
}

type key struct {
	machine, reason, subject string
}

// Config of a Recorder.
type Config struct {
	// Interval between two records of the same machine, reason and
	// subject (default DefaultInterval).
	Interval time.Duration
	// UID finds a machine's UID; nil records events without one.
	UID UIDLookup
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Rate is how many Events per second the Recorder writes at most, over
	// all machines, and Burst how many at once (defaults DefaultRate and
	// DefaultBurst).
	Rate  float64
	Burst int
	// Log gets a line with the refused Events' counts by reason, at most
	// every DropReportInterval (default: discarded).
	Log logr.Logger
}

// New makes a Recorder writing through rec.
func New(rec record.EventRecorder, cfg Config) *Recorder {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	return &Recorder{rec: rec, uid: cfg.UID, interval: cfg.Interval, now: cfg.Now, log: cfg.Log,
		bucket: rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_events", Name: "dropped_total",
			Help: "Events on Machines not written because the replica's event budget (--event-qps, --event-burst) was spent, by reason.",
		}, []string{"reason"}),
		last: map[key]time.Time{}, sweptAt: cfg.Now(), unreported: map[string]int{}, reportedAt: cfg.Now()}
}

// Sweep forgets the throttle's entries older than the interval, which no
// longer hold anything back. A storm stamps an entry for every machine and
// reason; without a sweep they would stay until maxTracked. The map is
// built anew when most of it went, since a Go map keeps its size after
// deletes. claim sweeps once an interval as it goes; kubefarm-pxe also
// calls Sweep every interval (Run), for a replica gone quiet after a storm.
func (r *Recorder) Sweep() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(r.now())
}

func (r *Recorder) sweepLocked(now time.Time) {
	before := len(r.last)
	for k, t := range r.last {
		if now.Sub(t) >= r.interval {
			delete(r.last, k)
		}
	}
	if len(r.last) < before/2 {
		r.last = maps.Clone(r.last)
	}
	r.sweptAt = now
}

// Run sweeps the throttle every interval until ctx is done.
func (r *Recorder) Run(ctx context.Context) {
	if r == nil {
		return
	}
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sweep()
		}
	}
}

// Register registers kubefarm_pxe_events_dropped_total{reason} on reg.
func (r *Recorder) Register(reg prometheus.Registerer) error { return reg.Register(r.dropped) }

// Due reports whether an event for machine ("namespace/name"), reason and
// subject would be recorded now. It does not allocate: hot paths call it
// before building a message. An event due by its own throttle but refused
// by the empty bucket is counted as dropped here.
func (r *Recorder) Due(machine, reason, subject string) bool {
	if r == nil {
		return false
	}
	if _, _, ok := splitKey(machine); !ok {
		return false
	}
	k := key{machine, reason, subject}
	now := r.now()
	r.mu.Lock()
	t, ok := r.last[k]
	throttled := ok && now.Sub(t) < r.interval
	r.mu.Unlock()
	if throttled {
		return false
	}
	if r.bucket.TokensAt(now) >= 1 {
		return true
	}
	// The bucket is empty: the event is dropped here, before any message
	// is built, and counted once per interval like a recorded one.
	if r.claim(k) {
		r.drop(reason)
	}
	return false
}

// Normal records a Normal event if it is due.
func (r *Recorder) Normal(machine, reason, subject, message string) {
	r.record(machine, corev1.EventTypeNormal, reason, subject, message)
}

// Warning records a Warning event if it is due.
func (r *Recorder) Warning(machine, reason, subject, message string) {
	r.record(machine, corev1.EventTypeWarning, reason, subject, message)
}

func (r *Recorder) record(machine, eventType, reason, subject, message string) {
	if r == nil {
		return
	}
	ns, name, ok := splitKey(machine)
	if !ok || !r.claim(key{machine, reason, subject}) {
		return
	}
	if !r.bucket.AllowN(r.now(), 1) {
		r.drop(reason)
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: kubefarmv1.GroupVersion.String(),
		Kind:       "Machine",
		Namespace:  ns,
		Name:       name,
	}
	if r.uid != nil {
		if uid, ok := r.uid(ns, name); ok {
			ref.UID = uid
		}
	}
	r.rec.Event(ref, eventType, reason, message)
}

// claim stamps k if it is due; of two concurrent callers only one wins.
func (r *Recorder) claim(k key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if t, ok := r.last[k]; ok && now.Sub(t) < r.interval {
		return false
	}
	if len(r.last) >= maxTracked || now.Sub(r.sweptAt) >= r.interval {
		r.sweepLocked(now)
		if len(r.last) >= maxTracked {
			clear(r.last)
		}
	}
	r.last[k] = now
	return true
}

// drop counts an Event the bucket refused, and logs the counts by reason
// once DropReportInterval has passed since the last line.
func (r *Recorder) drop(reason string) {
	r.dropped.WithLabelValues(reason).Inc()
	r.mu.Lock()
	r.unreported[reason]++
	if r.now().Sub(r.reportedAt) < DropReportInterval {
		r.mu.Unlock()
		return
	}
	counts, since := r.unreported, r.reportedAt
	r.unreported, r.reportedAt = map[string]int{}, r.now()
	r.mu.Unlock()
	kv := []any{"since", since.UTC().Format(time.RFC3339)}
	total := 0
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		kv = append(kv, reason, counts[reason])
		total += counts[reason]
	}
	r.log.Info("Events on Machines not written: this replica's event budget (--event-qps, --event-burst) was spent; counts by reason since the last line",
		append([]any{"dropped", total}, kv...)...)
}

// splitKey splits "namespace/name".
func splitKey(s string) (ns, name string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}
