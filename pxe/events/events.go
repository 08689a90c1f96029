// Package events records Kubernetes Events on Machines for each stage of a
// boot: DHCP offer and ack, iPXE script, boot artifacts, boot configuration,
// and refusals. Events are what an operator sees in `kubectl describe
// machine`; metrics count everything, events tell the story of one boot.
//
// Boot traffic is bursty (a rack powering on, a perfdhcp run) and an event
// is an API write, so recording is throttled per machine, reason and
// subject before anything is built: a repeat within Interval costs one map
// lookup and no allocation. What passes the throttle goes to client-go's
// event broadcaster, which queues a bounded number of events, drops the
// rest, and aggregates repeats; a slow or absent API server therefore never
// slows a DHCP or HTTP answer.
package events

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Reasons of the events kubefarm-pxe records on Machines. They are the
// stages of a boot in order, plus the refusals.
const (
	ReasonOffered      = "Offered"      // DHCPOFFER sent
	ReasonAcked        = "Acked"        // DHCPACK sent
	ReasonDeclined     = "Declined"     // the machine reported its address in use
	ReasonScriptServed = "ScriptServed" // iPXE script served
	ReasonImageServed  = "ImageServed"  // a kernel, initrd or root filesystem fully sent
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
)

// DefaultInterval is how often the same event (machine, reason, subject)
// may be recorded. One boot does DHCP up to three times (firmware, iPXE,
// kernel) within a minute; an interval of a minute shows it once, and the
// next boot again.
const DefaultInterval = time.Minute

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

	mu   sync.Mutex
	last map[key]time.Time
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
}

// New makes a Recorder writing through rec.
func New(rec record.EventRecorder, cfg Config) *Recorder {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{rec: rec, uid: cfg.UID, interval: cfg.Interval, now: cfg.Now, last: map[key]time.Time{}}
}

// Due reports whether an event for machine ("namespace/name"), reason and
// subject would be recorded now. It does not allocate: hot paths call it
// before building a message.
func (r *Recorder) Due(machine, reason, subject string) bool {
	if r == nil {
		return false
	}
	if _, _, ok := splitKey(machine); !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.last[key{machine, reason, subject}]
	return !ok || r.now().Sub(t) >= r.interval
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
	if len(r.last) >= maxTracked {
		for old, t := range r.last {
			if now.Sub(t) >= r.interval {
				delete(r.last, old)
			}
		}
		if len(r.last) >= maxTracked {
			clear(r.last)
		}
	}
	r.last[k] = now
	return true
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
