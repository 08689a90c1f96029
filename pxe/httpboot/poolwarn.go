package httpboot

// Warnings on NodePools from discovery: the cap refusing a report, and
// the discovery boot of a pool whose BootImage does not exist. Both come
// from traffic any host on the boot network can send, so both are
// throttled before anything is formatted or written, in tables of bounded
// size.

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/events"
)

// poolWarningInterval is how often, at most, one replica records the same
// Warning on NodePools (per pool for BootImageMissing, for all pools for
// DiscoveryCapReached).
const poolWarningInterval = time.Minute

// maxWarnedPools bounds the pools whose BootImageMissing is remembered
// within poolWarningInterval; past it, a pool new to the table gets no
// Event until older entries lapse (its 503s are still logged).
const maxWarnedPools = 1024

// capReached logs the refusal and records a Warning on the pool, both at
// most once a minute for the replica: a flood must not turn into a flood
// of log lines and Events.
func (d *Discovery) capReached(r *http.Request, mac string, held dynamic.Held, machines Machines) {
	if !d.capWarn.allow("") {
		return
	}
	msg := fmt.Sprintf("discovery report of %s from %s refused: %d DiscoveredMachines exist, the cap (--discovery-max-machines); "+
		"enroll or delete some, or raise the cap (further refusals this minute are only counted in kubefarm_pxe_discovery_reports_total{result=%q})",
		mac, peerHost(r), d.known.count(), DiscoveryCapped)
	d.log.Info(msg, "pool", held.PoolKey())
	if d.cfg.Events == nil {
		return
	}
	if pool, ok := machines.Pool(held.Namespace, held.Pool); ok {
		d.cfg.Events.Event(pool, corev1.EventTypeWarning, events.ReasonDiscoveryCapReached, msg)
	}
}

// imageMissing records a Warning on pool, whose spec.bootImage does not
// exist, when the discovery boot of mac (leased ip from its range) is
// answered 503 for it: at most once per poolWarningInterval for the pool.
func (d *Discovery) imageMissing(pool *kubefarmv1.NodePool, mac, ip string) {
	if d.cfg.Events == nil || !d.missing.allow(pool.Namespace+"/"+pool.Name) {
		return
	}
	d.cfg.Events.Event(pool, corev1.EventTypeWarning, events.ReasonBootImageMissing,
		fmt.Sprintf("discovery boot of %s (%s, leased from this pool's dynamic range; no Machine claims it) refused: BootImage %q (spec.bootImage) not found; "+
			"kubefarm-pxe answers the discovery boot of this pool's unknown machines 503 until it exists (kubectl get bootimages)",
			mac, ip, pool.Spec.BootImage))
}

// keyThrottle lets one thing per key through per interval, remembering at
// most max keys: when the table is full, keys whose interval has passed
// are swept, and a new key finding it still full is refused.
type keyThrottle struct {
	interval time.Duration
	max      int
	now      func() time.Time
	mu       sync.Mutex
	last     map[string]time.Time
}

func newKeyThrottle(interval time.Duration, max int, now func() time.Time) *keyThrottle {
	return &keyThrottle{interval: interval, max: max, now: now, last: map[string]time.Time{}}
}

// allow reports whether key's thing may happen now, and if so stamps it.
func (k *keyThrottle) allow(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if t, ok := k.last[key]; ok {
		if now.Sub(t) < k.interval {
			return false
		}
		k.last[key] = now
		return true
	}
	if len(k.last) >= k.max {
		for key, t := range k.last {
			if now.Sub(t) >= k.interval {
				delete(k.last, key)
			}
		}
		if len(k.last) >= k.max {
			return false
		}
	}
	k.last[key] = now
	return true
}
