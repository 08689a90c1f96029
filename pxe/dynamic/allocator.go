package dynamic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// kubefarm-pxe's permissions on leases (make generate writes them to
// config/rbac-pxe/role.yaml); NodePools are read through the same cache as
// the static leases (see pxe/httpboot).
// +kubebuilder:rbac:groups=kubefarm.io,resources=dhcpleases,verbs=get;list;watch;create;update;delete

// The allocator's errors say themselves what the DHCP server does with the
// packet they stop (dhcp.OutcomeError): package dhcp tells them apart by
// their outcome, without importing this package. Callers here still match
// them with errors.Is.
var (
	// ErrNoPool: no pool with a dynamic range serves the packet's network.
	// The DHCP server ignores the unknown MAC, as it does without ranges.
	ErrNoPool error = &dhcp.OutcomeError{Outcome: dhcp.IgnoredUnknown, Msg: "no NodePool with a dynamic range serves this network"}
	// ErrRangeFull: no free address was found. The DHCP server ignores the
	// MAC and counts it.
	ErrRangeFull error = &dhcp.OutcomeError{Outcome: dhcp.IgnoredRangeFull, Msg: "dynamic range full"}
	// ErrNotLeased: the requested address is someone else's, or not an
	// address of the range. The DHCP server answers NAK.
	ErrNotLeased error = &dhcp.OutcomeError{Outcome: dhcp.Nak, Msg: "address not leased to this MAC"}
	// ErrNoRecord: a REQUEST for an address of the range this MAC holds no
	// lease on, and no one else does either. The DHCP server stays silent
	// (RFC 2131 4.3.2), so the client starts over with a DISCOVER.
	ErrNoRecord error = &dhcp.OutcomeError{Outcome: dhcp.IgnoredUnknown, Msg: "no lease of this MAC on the address"}
)

// Cache field index names.
const (
	// MACIndex: DHCPLeases by spec.mac.
	MACIndex = "spec.mac"
	// IPIndex: DHCPLeases by spec.ip.
	IPIndex = "spec.ip"
	// RangeIndex: NodePools with a dynamic range, value "true".
	RangeIndex = "spec.network.dynamicRange"
)

// Defaults of Config.
const (
	DefaultOfferHold   = 60 * time.Second
	DefaultMaxAttempts = 32
)

// Config of an Allocator.
type Config struct {
	// Cache serves every read that may be stale: pools, a MAC's lease,
	// addresses known to be taken. New registers its indexes on it.
	Cache cache.Cache
	// Client writes DHCPLeases.
	Client client.Client
	// APIReader reads around the cache (a manager's GetAPIReader, or a
	// plain client): after an AlreadyExists, the claim decision must see
	// what the API server holds, not what this replica has been told.
	APIReader client.Reader
	// Static are the static leases of known machines (pxe/inventory's, or a
	// leases.Table): their IPs are never handed out.
	Static StaticLeases
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// OfferHold is how long an offered, not yet requested address stays
	// claimed. Default 60s.
	OfferHold time.Duration
	// MaxAttempts bounds the claims (API writes) one call tries before it
	// gives up with ErrRangeFull. Default 32.
	MaxAttempts int
}

// StaticLeases finds the static lease of an address.
type StaticLeases interface {
	LookupIP(ip net.IP) (*leases.Lease, bool)
}

// Allocator hands out addresses of the pools' dynamic ranges to unknown
// MACs, with DHCPLease objects as the shared state of all replicas. It has
// no timeout of its own: each call ends with the caller's context, whose
// deadline the DHCP server sets (dhcp.Config.DynamicTimeout, 3 s by
// default), so that the two can never disagree.
type Allocator struct {
	cache       cache.Cache
	client      client.Client
	api         client.Reader
	static      StaticLeases
	now         func() time.Time
	hold        time.Duration
	maxAttempts int
	// written: this replica's own lease writes, for the lookups until the
	// cache shows them (written.go).
	written *written
}

// New registers the allocator's field indexes on cfg.Cache and returns the
// allocator. Call it before the cache starts: indexes cannot be added to a
// running informer. ctx bounds only the registration.
func New(ctx context.Context, cfg Config) (*Allocator, error) {
	if cfg.Cache == nil || cfg.Client == nil || cfg.APIReader == nil || cfg.Static == nil {
		return nil, errors.New("dynamic: Cache, Client, APIReader and Static are required")
	}
	a := &Allocator{cache: cfg.Cache, client: cfg.Client, api: cfg.APIReader, static: cfg.Static,
		now: cfg.Now, hold: cfg.OfferHold, maxAttempts: cfg.MaxAttempts}
	if a.now == nil {
		a.now = time.Now
	}
	if a.hold <= 0 {
		a.hold = DefaultOfferHold
	}
	if a.maxAttempts <= 0 {
		a.maxAttempts = DefaultMaxAttempts
	}
	if err := register(ctx, cfg.Cache); err != nil {
		return nil, err
	}
	a.written = newWritten(a.now)
	if err := a.written.follow(ctx, cfg.Cache); err != nil {
		return nil, err
	}
	return a, nil
}

func register(ctx context.Context, c cache.Cache) error {
	leaseField := func(field func(*kubefarmv1.DHCPLease) string) client.IndexerFunc {
		return func(o client.Object) []string {
			if l, ok := o.(*kubefarmv1.DHCPLease); ok && field(l) != "" {
				return []string{field(l)}
			}
			return nil
		}
	}
	for _, ix := range []struct {
		obj         client.Object
		field, what string
		values      client.IndexerFunc
	}{
		{&kubefarmv1.DHCPLease{}, MACIndex, "DHCPLeases by MAC", leaseField(func(l *kubefarmv1.DHCPLease) string { return l.Spec.MAC })},
		{&kubefarmv1.DHCPLease{}, IPIndex, "DHCPLeases by IP", leaseField(func(l *kubefarmv1.DHCPLease) string { return l.Spec.IP })},
		{&kubefarmv1.NodePool{}, RangeIndex, "NodePools by dynamic range", func(o client.Object) []string {
			if p, ok := o.(*kubefarmv1.NodePool); ok && p.Spec.Network.DynamicRange != nil {
				return []string{"true"}
			}
			return nil
		}},
	} {
		if err := c.IndexField(ctx, ix.obj, ix.field, ix.values); err != nil {
			return fmt.Errorf("indexing %s: %w", ix.what, err)
		}
	}
	return nil
}

// Offer returns the lease to offer an unknown MAC: its existing unexpired
// lease, or a new claim held for OfferHold. hostname is what the client
// sent in option 12 ("" for none or invalid); it is recorded on a new or
// rewritten lease, for inventory, and never costs a write of its own.
func (a *Allocator) Offer(ctx context.Context, mac net.HardwareAddr, hostname string, relay, local net.IP) (*leases.Lease, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("MAC %v is not an Ethernet address", mac)
	}
	p, err := a.selectPool(ctx, relay, local)
	if err != nil {
		return nil, err
	}
	now := a.now()
	var prefer net.IP
	if cur, err := a.cachedLeaseOf(ctx, p, mac, now); err != nil {
		return nil, err
	} else if cur != nil {
		ip := net.ParseIP(cur.Spec.IP).To4()
		if cur.Spec.ExpireTime.After(now) {
			// The cache says the MAC holds a lease; offering it needs one
			// read, no write. The read matters: another replica may have
			// just seen the lease declined or released, and this cache may
			// not know yet.
			var fresh kubefarmv1.DHCPLease
			key := types.NamespacedName{Namespace: cur.Namespace, Name: cur.Name}
			switch err := a.api.Get(ctx, key, &fresh); {
			case err == nil && a.owns(&fresh, mac, now):
				return a.lease(p, &fresh), nil
			case err != nil && !apierrors.IsNotFound(err):
				return nil, fmt.Errorf("reading DHCPLease %s: %w", key, err)
			}
			ip = nil // gone or no longer the MAC's: search afresh
		}
		// Expired, but nobody took it yet: the MAC gets its old address back
		// if it still can.
		prefer = ip
	}
	return a.claim(ctx, p, mac, ValidHostname(hostname), prefer, now, now.Add(a.hold))
}

// Ack confirms (REQUEST) mac's lease on ip: extends expireTime to
// now+leaseTime when less than half of it remains (so renewals do not
// write every time), and revives the MAC's own expired lease. The first
// ACK of an offered lease, or the one that revives a lapsed or once
// declined lease, sets spec.boundTime to now; a renewal keeps it (see
// boundSince). An address
// someone else holds, or outside the range, is ErrNotLeased (the server
// NAKs); an address with no lease of this MAC is ErrNoRecord (silence).
// Leases live in the API, so a restarted replica still knows them.
// hostname as for Offer.
func (a *Allocator) Ack(ctx context.Context, mac net.HardwareAddr, ip net.IP, hostname string, relay, local net.IP) (*leases.Lease, error) {
	hostname = ValidHostname(hostname)
	if len(mac) != 6 {
		return nil, fmt.Errorf("MAC %v is not an Ethernet address", mac)
	}
	p, err := a.selectPool(ctx, relay, local)
	if err != nil {
		return nil, err
	}
	ip = ip.To4()
	if ip == nil || !p.rng.Contains(ip) || a.isStatic(ip) {
		return nil, fmt.Errorf("%w: %v is not an address of the dynamic range of pool %s", ErrNotLeased, ip, p.key())
	}
	now := a.now()
	key := types.NamespacedName{Namespace: p.namespace, Name: LeaseName(p.name, ip)}
	// A renewal well inside its lease is answered from the cache: no API
	// call at all.
	var cached kubefarmv1.DHCPLease
	if err := a.cache.Get(ctx, key, &cached); err == nil && a.owns(&cached, mac, now) && cached.Spec.BoundTime != nil &&
		!a.needsExtension(p, &cached, now) {
		return a.lease(p, &cached), nil
	}
	// Otherwise the API decides. Three rounds absorb a concurrent writer.
	for range 3 {
		var cur kubefarmv1.DHCPLease
		err := a.api.Get(ctx, key, &cur)
		switch {
		case apierrors.IsNotFound(err):
			// RFC 2131 4.3.2: a server with no record of the client stays
			// silent (the client falls back to DISCOVER); claiming the
			// address here would let a client pick any free address.
			return nil, fmt.Errorf("%w: no lease of %s for %s", ErrNoRecord, ip, mac)
		case err != nil:
			return nil, fmt.Errorf("reading DHCPLease %s: %w", key, err)
		}
		if cur.Spec.MAC != mac.String() {
			if cur.Spec.ExpireTime.After(now) {
				return nil, fmt.Errorf("%w: %s is leased to %s until %s", ErrNotLeased, ip, cur.Spec.MAC, cur.Spec.ExpireTime.UTC().Format(time.RFC3339))
			}
			return nil, fmt.Errorf("%w: %s's lease of %s expired; none for %s", ErrNoRecord, cur.Spec.MAC, ip, mac)
		}
		if cur.Spec.Declined && cur.Spec.ExpireTime.After(now) {
			return nil, fmt.Errorf("%w: %s declined %s, which is withheld until %s", ErrNotLeased, mac, ip, cur.Spec.ExpireTime.UTC().Format(time.RFC3339))
		}
		if a.owns(&cur, mac, now) && cur.Spec.BoundTime != nil && !a.needsExtension(p, &cur, now) {
			return a.lease(p, &cur), nil
		}
		// Ours and past half-time, or expired, or only offered so far:
		// (re)write it, conditional on the version just read.
		l, ok, err := a.update(ctx, p, &cur, mac, hostname, now.Add(p.netw.LeaseTime), boundSince(&cur, mac, now))
		if err != nil {
			return nil, err
		}
		if ok {
			return l, nil
		}
	}
	return nil, fmt.Errorf("DHCPLease %s kept changing under three attempts to confirm it", key)
}

func (a *Allocator) selectPool(ctx context.Context, relay, local net.IP) (*pool, error) {
	pools, err := a.catchAllPools(ctx)
	if err != nil {
		return nil, err
	}
	return selectPool(pools, relay, local)
}

// claim finds mac an address: prefer first (its expired lease), then the
// range's candidates in order.
func (a *Allocator) claim(ctx context.Context, p *pool, mac net.HardwareAddr, hostname string, prefer net.IP, now, expire time.Time) (*leases.Lease, error) {
	attempts := 0
	try := func(ip net.IP) (*leases.Lease, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if a.takenInCache(ctx, ip, mac, now) {
			return nil, false, nil
		}
		if attempts >= a.maxAttempts {
			return nil, false, fmt.Errorf("%w: pool %s: no free address among the %d tried", ErrRangeFull, p.key(), attempts)
		}
		attempts++
		return a.claimIP(ctx, p, mac, hostname, ip, now, expire)
	}
	if prefer != nil && p.rng.Contains(prefer) && !a.isStatic(prefer) {
		if l, ok, err := try(prefer); err != nil || ok {
			return l, err
		}
	}
	for ip := range p.rng.Candidates(mac, a.isStatic) {
		if prefer.Equal(ip) {
			continue
		}
		if l, ok, err := try(ip); err != nil || ok {
			return l, err
		}
	}
	return nil, fmt.Errorf("%w: pool %s: every address is leased", ErrRangeFull, p.key())
}

// claimIP tries to make ip mac's: create the object; if it exists, use it
// when it is mac's, take it over when it has expired. ok false means the
// address is someone else's.
func (a *Allocator) claimIP(ctx context.Context, p *pool, mac net.HardwareAddr, hostname string, ip net.IP, now, expire time.Time) (*leases.Lease, bool, error) {
	key := types.NamespacedName{Namespace: p.namespace, Name: LeaseName(p.name, ip)}
	for range 2 {
		l, ok, err := a.create(ctx, p, mac, hostname, ip, expire)
		if err != nil || ok {
			return l, ok, err
		}
		// It exists. The cache may not have it yet: ask the API server.
		var cur kubefarmv1.DHCPLease
		if err := a.api.Get(ctx, key, &cur); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted in between: create again
			}
			return nil, false, fmt.Errorf("reading DHCPLease %s: %w", key, err)
		}
		if a.owns(&cur, mac, now) {
			a.written.wrote(&cur)
			return a.lease(p, &cur), true, nil
		}
		if cur.Spec.ExpireTime.After(now) {
			return nil, false, nil
		}
		// Expired: taken over (or revived by its own MAC) as an offer,
		// bound to nobody until a REQUEST is acknowledged.
		return a.update(ctx, p, &cur, mac, hostname, expire, nil)
	}
	return nil, false, nil
}

// create claims ip for mac. ok false (no error) means the object exists.
func (a *Allocator) create(ctx context.Context, p *pool, mac net.HardwareAddr, hostname string, ip net.IP, expire time.Time) (*leases.Lease, bool, error) {
	obj := &kubefarmv1.DHCPLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: LeaseName(p.name, ip), OwnerReferences: p.ownerRef()},
		Spec: kubefarmv1.DHCPLeaseSpec{
			Pool: p.name, MAC: mac.String(), IP: ip.String(), ExpireTime: metav1.NewTime(expire), Hostname: hostname,
		},
	}
	err := a.client.Create(ctx, obj)
	switch {
	case err == nil:
		a.written.wrote(obj)
		return a.lease(p, obj), true, nil
	case apierrors.IsAlreadyExists(err):
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("creating DHCPLease %s/%s: %w", obj.Namespace, obj.Name, err)
	}
}

// update rewrites cur (as read, resourceVersion included) for mac until
// expire, bound since bound (nil: only offered). ok false means another
// writer changed it first.
func (a *Allocator) update(ctx context.Context, p *pool, cur *kubefarmv1.DHCPLease, mac net.HardwareAddr, hostname string,
	expire time.Time, bound *metav1.Time) (*leases.Lease, bool, error) {
	if cur.Spec.MAC != mac.String() {
		cur.Spec.Hostname = "" // the previous client's
	}
	if hostname != "" {
		cur.Spec.Hostname = hostname
	}
	cur.Spec.MAC = mac.String()
	cur.Spec.ExpireTime = metav1.NewTime(expire)
	cur.Spec.BoundTime = bound
	cur.Spec.Declined = false
	cur.OwnerReferences = p.ownerRef()
	err := a.client.Update(ctx, cur)
	switch {
	case err == nil:
		a.written.wrote(cur)
		return a.lease(p, cur), true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("updating DHCPLease %s/%s: %w", cur.Namespace, cur.Name, err)
	}
}

// owns says whether l is mac's and unexpired. A declined lease is
// nobody's: the address is in use by some other host.
func (a *Allocator) owns(l *kubefarmv1.DHCPLease, mac net.HardwareAddr, now time.Time) bool {
	return !l.Spec.Declined && l.Spec.MAC == mac.String() && l.Spec.ExpireTime.After(now)
}

// boundSince is the boundTime an ACK of mac writes on l, read at now: the
// one l has while it is mac's current binding (a renewal), else now (the
// first ACK after an offer, or one that revives a lapsed or once declined
// lease). Renewals keep it rather than move it because most of them write
// nothing (answered from the cache until half the lease time has passed),
// so a time they moved would say only when a renewal last happened to
// write; kept, it says how long the client has held the address.
func boundSince(l *kubefarmv1.DHCPLease, mac net.HardwareAddr, now time.Time) *metav1.Time {
	if l.Spec.BoundTime != nil && !l.Spec.Declined && l.Spec.MAC == mac.String() && l.Spec.ExpireTime.After(now) {
		return l.Spec.BoundTime.DeepCopy()
	}
	t := metav1.NewTime(now)
	return &t
}

// needsExtension: less than half the pool's lease time remains.
func (a *Allocator) needsExtension(p *pool, l *kubefarmv1.DHCPLease, now time.Time) bool {
	return l.Spec.ExpireTime.Sub(now) < p.netw.LeaseTime/2
}

func (a *Allocator) isStatic(ip net.IP) bool {
	_, ok := a.static.LookupIP(ip)
	return ok
}

// cachedLeaseOf is mac's lease in pool as the cache knows it: the one that
// expires last, or nil.
func (a *Allocator) cachedLeaseOf(ctx context.Context, p *pool, mac net.HardwareAddr, now time.Time) (*kubefarmv1.DHCPLease, error) {
	var list kubefarmv1.DHCPLeaseList
	if err := a.cache.List(ctx, &list, client.InNamespace(p.namespace), client.MatchingFields{MACIndex: mac.String()}); err != nil {
		return nil, fmt.Errorf("listing the DHCPLeases of %s: %w", mac, err)
	}
	var best *kubefarmv1.DHCPLease
	for i := range list.Items {
		l := &list.Items[i]
		if l.Spec.Pool != p.name || l.Spec.Declined {
			continue
		}
		ip := net.ParseIP(l.Spec.IP)
		if ip == nil || !p.rng.Contains(ip) || a.isStatic(ip) {
			continue // the range or the machines changed since
		}
		if best == nil || l.Spec.ExpireTime.After(best.Spec.ExpireTime.Time) {
			best = l
		}
	}
	return best, nil
}

// takenInCache says whether the cache knows ip as leased, unexpired, to
// another MAC, in any pool. It only saves API calls: a stale cache makes
// the claim try the address anyway (or skip one freed a moment ago).
func (a *Allocator) takenInCache(ctx context.Context, ip net.IP, mac net.HardwareAddr, now time.Time) bool {
	var list kubefarmv1.DHCPLeaseList
	if err := a.cache.List(ctx, &list, client.MatchingFields{IPIndex: ip.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return false
	}
	for i := range list.Items {
		l := &list.Items[i]
		if (l.Spec.MAC != mac.String() || l.Spec.Declined) && l.Spec.ExpireTime.After(now) {
			return true
		}
	}
	return false
}

// lease builds the DHCP lease of l the way static leases are built: the
// pool's network, no tag options, no machine.
func (a *Allocator) lease(p *pool, l *kubefarmv1.DHCPLease) *leases.Lease {
	mac, _ := net.ParseMAC(l.Spec.MAC)
	out := p.netw.Lease(mac, net.ParseIP(l.Spec.IP), l.Spec.Hostname)
	out.Dynamic = true
	return &out
}

// ValidHostname is h when it is what DHCPLease.spec.hostname admits (a
// lower-case DNS label of at most 63 characters), upper case folded; ""
// otherwise. A client's option 12 is untrusted input: anything else is
// dropped rather than stored.
func ValidHostname(h string) string {
	if len(h) == 0 || len(h) > 63 {
		return ""
	}
	b := []byte(h)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(b)-1:
		default:
			return ""
		}
	}
	return string(b)
}
