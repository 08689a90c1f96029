package dynamic

// Read-your-writes for the lookups (lookup.go). A machine asks the HTTP
// side right after its DHCP ACK: iPXE chains to its boot script at once,
// and a discovery agent reports as soon as it is up. Both answers hang on
// a lookup of the lease this replica has just written, and on a loaded
// admin cluster the write's watch event can reach the cache after the
// machine's request does: the lookup would miss the lease (a 404 boot
// script, a 403 discovery report logged as a stranger's) although this very
// replica handed it out. So the allocator remembers each version it writes
// or reads from the API server until its cache shows that version or a
// later one, and the lookups prefer it over an older cached copy.
//
// Versions are ordered by resourceVersion (apimachinery's
// CompareResourceVersion: the API's comparable resource versions). Another
// replica's writes still arrive through the watch: this is one replica
// seeing its own writes, not a shared view.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

const (
	// writtenTTL bounds how long a version is preferred over the cache. A
	// watch that lags longer is broken, and then the cache's answer is as
	// good as any.
	writtenTTL = 30 * time.Second
	// writtenMax bounds the versions held. Each is one DHCP write of the
	// last watch delay; beyond the bound a write is simply not remembered
	// (the lookup is the cache's, as without this).
	writtenMax = 4096
)

// writtenLease is a version this replica knows the API server holds.
type writtenLease struct {
	// rv is its resourceVersion; for a deletion, the one deleted.
	rv string
	// lease is the object; nil when this replica deleted it.
	lease *kubefarmv1.DHCPLease
	at    time.Time
}

// shadows says whether e is newer than the cached version rv: a deletion
// hides the version it deleted, a write every version before it. An rv
// that does not compare (never from a real API server) counts as caught
// up, so that the cache decides.
func (e writtenLease) shadows(rv string) bool {
	c, err := resourceversion.CompareResourceVersion(rv, e.rv)
	if err != nil {
		return false
	}
	return c < 0 || c == 0 && e.lease == nil
}

// written is the set of versions, by object.
type written struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[types.NamespacedName]writtenLease
}

func newWritten(now func() time.Time) *written {
	return &written{now: now, m: map[types.NamespacedName]writtenLease{}}
}

// wrote remembers l (as the API server returned it) as current.
func (w *written) wrote(l *kubefarmv1.DHCPLease) {
	w.put(types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, writtenLease{rv: l.ResourceVersion, lease: l.DeepCopy()})
}

// deleted remembers that key's version rv is gone.
func (w *written) deleted(key types.NamespacedName, rv string) {
	w.put(key, writtenLease{rv: rv})
}

func (w *written) put(key types.NamespacedName, e writtenLease) {
	if e.rv == "" {
		return
	}
	now := w.now()
	e.at = now
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.m[key]; ok {
		if c, err := resourceversion.CompareResourceVersion(e.rv, old.rv); err == nil && c < 0 {
			return // a later version of ours is already held
		}
	}
	if _, ok := w.m[key]; !ok && len(w.m) >= writtenMax {
		w.expire(now)
		if len(w.m) >= writtenMax {
			return
		}
	}
	w.m[key] = e
}

// expire drops versions older than writtenTTL. Called with mu held.
func (w *written) expire(now time.Time) {
	for k, e := range w.m {
		if now.Sub(e.at) > writtenTTL {
			delete(w.m, k)
		}
	}
}

// seen is the cache's watch showing key at rv (a deletion when gone): a
// version it catches up with is dropped.
func (w *written) seen(key types.NamespacedName, rv string, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok {
		return
	}
	c, err := resourceversion.CompareResourceVersion(rv, e.rv)
	// A deletion event carries the last version the object had: at or
	// after ours, the object is gone for the cache too.
	if err != nil || c > 0 || c == 0 && (e.lease != nil || gone) {
		delete(w.m, key)
	}
}

// follow drops versions as c's DHCPLease watch catches up with them.
func (w *written) follow(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, &kubefarmv1.DHCPLease{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching DHCPLeases: %w", err)
	}
	see := func(o any, gone bool) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if l, ok := o.(*kubefarmv1.DHCPLease); ok {
			w.seen(types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, l.ResourceVersion, gone)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { see(o, false) },
		UpdateFunc: func(_, o any) { see(o, false) },
		DeleteFunc: func(o any) { see(o, true) },
	})
	if err != nil {
		return fmt.Errorf("watching DHCPLeases: %w", err)
	}
	return nil
}

// overlay merges the remembered versions into leases, the cache's answer to
// a lookup whose match is match: a cached copy older than a remembered
// version is replaced by it (or dropped, deleted or no longer matching),
// and a remembered version that matches is added when the cache has no
// copy of its object at all (inCache, asked only then, says whether it has
// and at which version).
func (w *written) overlay(leases []*kubefarmv1.DHCPLease, match func(*kubefarmv1.DHCPLease) bool,
	inCache func(types.NamespacedName) (rv string, ok bool)) []*kubefarmv1.DHCPLease {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return leases
	}
	out := leases[:0:0]
	listed := make(map[types.NamespacedName]bool, len(leases))
	for _, l := range leases {
		key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
		listed[key] = true
		if e, ok := w.m[key]; ok && now.Sub(e.at) <= writtenTTL && e.shadows(l.ResourceVersion) {
			if e.lease != nil && match(e.lease) {
				out = append(out, e.lease)
			}
			continue
		}
		out = append(out, l)
	}
	for key, e := range w.m {
		if listed[key] || e.lease == nil || now.Sub(e.at) > writtenTTL || !match(e.lease) {
			continue
		}
		if rv, ok := inCache(key); ok && !e.shadows(rv) {
			continue
		}
		out = append(out, e.lease)
	}
	return out
}
