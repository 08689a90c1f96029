package dynamic_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/dynamic"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// The DHCP server drives the allocator through this interface.
var _ dhcp.Dynamic = (*dynamic.Allocator)(nil)

// env is one real etcd + kube-apiserver shared by the package's tests. Each
// test works in its own namespace and on its own subnet: allocators find
// catch-all pools in every namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	// client-go's watch code logs through controller-runtime's root logger.
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, testenv.Options{}, &env)
}

// clock is a fake clock shared by the allocators of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// replica is one kubefarm-pxe's allocator: its own cache, the shared API.
type replica struct {
	*dynamic.Allocator
	cache cache.Cache
}

func newReplica(t *testing.T, static *leases.Table, clk *clock) *replica {
	t.Helper()
	return newReplicaOpts(t, static, clk, cache.Options{Scheme: env.Scheme})
}

// newReplicaOpts is newReplica with a cache built with opts.
func newReplicaOpts(t *testing.T, static *leases.Table, clk *clock, opts cache.Options) *replica {
	t.Helper()
	ctx := context.Background()
	c, err := cache.New(env.Config, opts)
	must(t, err)
	a, err := dynamic.New(ctx, dynamic.Config{Cache: c, Client: env.Client, APIReader: env.Client, Static: static, Now: clk.Now})
	must(t, err)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(sctx) {
		t.Fatal("cache did not sync")
	}
	return &replica{Allocator: a, cache: c}
}

// sees waits until the replica's cache holds the pool: creating a pool
// reaches each replica through its watch.
func (r *replica) sees(t *testing.T, p *kubefarmv1.NodePool) {
	t.Helper()
	waitFor(t, "the replica's cache to hold pool "+p.Name, func(ctx context.Context) bool {
		return r.cache.Get(ctx, client.ObjectKeyFromObject(p), &kubefarmv1.NodePool{}) == nil
	})
}

func newNamespace(t *testing.T) string { return env.NewNamespace(t, "dynamic-") }

// newPool creates a catch-all pool on 10.<net>.0.0/24 with a range from
// .<first> to .<last> and the default lease time (1h).
func newPool(t *testing.T, ns, name string, netw, first, last int) *kubefarmv1.NodePool {
	t.Helper()
	return newPoolLeasing(t, ns, name, netw, first, last, 0)
}

// newPoolLeasing is newPool with the lease time leaseTime (0: the default).
func newPoolLeasing(t *testing.T, ns, name string, netw, first, last int, leaseTime time.Duration) *kubefarmv1.NodePool {
	t.Helper()
	p := &kubefarmv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubefarmv1.NodePoolSpec{
			Cluster: "c1", BootImage: "img",
			Network: kubefarmv1.BootNetwork{
				Subnet: fmt.Sprintf("10.%d.0.0/24", netw), Gateway: fmt.Sprintf("10.%d.0.1", netw),
				DNS: []string{fmt.Sprintf("10.%d.0.53", netw)}, Domain: "farm.example",
				DynamicRange: &kubefarmv1.DynamicRange{Start: fmt.Sprintf("10.%d.0.%d", netw, first), End: fmt.Sprintf("10.%d.0.%d", netw, last)},
			},
		},
	}
	if leaseTime > 0 {
		p.Spec.Network.LeaseTime = &metav1.Duration{Duration: leaseTime}
	}
	must(t, env.Client.Create(context.Background(), p))
	// Pool selection looks across namespaces: a pool left behind would
	// serve the next run's (-count) packets on the same subnet. Its leases
	// go too (envtest runs no garbage collector): a replica
	// skips addresses it sees leased in any pool.
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), p)
		_ = env.Client.DeleteAllOf(context.Background(), &kubefarmv1.DHCPLease{}, client.InNamespace(ns))
	})
	return p
}

func mac(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xd1, 0, 0, byte(i >> 8), byte(i)}
}

func leasesIn(t *testing.T, ns string) []kubefarmv1.DHCPLease {
	t.Helper()
	var list kubefarmv1.DHCPLeaseList
	must(t, env.Client.List(context.Background(), &list, client.InNamespace(ns)))
	return list.Items
}

func getLease(t *testing.T, ns, pool string, ip net.IP) *kubefarmv1.DHCPLease {
	t.Helper()
	var l kubefarmv1.DHCPLease
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: dynamic.LeaseName(pool, ip)}, &l))
	return &l
}

// boundAt fails t unless l's spec.boundTime is want (nil: absent).
func boundAt(t *testing.T, what string, l *kubefarmv1.DHCPLease, want *time.Time) {
	t.Helper()
	switch got := l.Spec.BoundTime; {
	case want == nil && got != nil:
		t.Fatalf("%s: boundTime %s, want none", what, got.UTC().Format(time.RFC3339))
	case want != nil && got == nil:
		t.Fatalf("%s: no boundTime, want %s", what, want.UTC().Format(time.RFC3339))
	case want != nil && !got.Time.Equal(*want):
		t.Fatalf("%s: boundTime %s, want %s", what, got.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) { return cond(ctx), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// offerAtOnce sends one DISCOVER per entry of macs, all released at the same
// moment, alternately to the two replicas, and returns each call's result.
func offerAtOnce(ctx context.Context, rs [2]*replica, macs []net.HardwareAddr, local net.IP) ([]*leases.Lease, []error) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	got := make([]*leases.Lease, len(macs))
	errs := make([]error, len(macs))
	for i := range macs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = rs[i%2].Offer(ctx, macs[i], "", nil, local)
		}()
	}
	close(start)
	wg.Wait()
	return got, errs
}

// local is the server's own address on a test subnet: packets not relayed.
// Each test uses a subnet of its own (10.61 to 10.68): pools of all tests
// share the API server, and pool selection looks across namespaces.
func local(netw int) net.IP { return net.IPv4(10, byte(netw), 0, 2).To4() }

// TestSameMACOnTwoReplicas: two replicas answer one client's DISCOVER at the
// same moment; they must offer the same address and leave one object.
func TestSameMACOnTwoReplicas(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 61, 10, 200)
	clk, static := newClock(), leases.NewTable()
	a, b := newReplica(t, static, clk), newReplica(t, static, clk)
	a.sees(t, p)
	b.sees(t, p)
	ctx := context.Background()

	for m := 0; m < 5; m++ {
		const callers = 8
		same := make([]net.HardwareAddr, callers)
		for i := range same {
			same[i] = mac(m)
		}
		got, errs := offerAtOnce(ctx, [2]*replica{a, b}, same, local(61))
		for i := range got {
			if errs[i] != nil {
				t.Fatalf("MAC %s, caller %d: %v", mac(m), i, errs[i])
			}
			if !got[i].IP.Equal(got[0].IP) {
				t.Fatalf("MAC %s offered %s and %s", mac(m), got[0].IP, got[i].IP)
			}
		}
		l := getLease(t, ns, "rack", got[0].IP)
		if l.Spec.MAC != mac(m).String() {
			t.Fatalf("object for %s names MAC %s", got[0].IP, l.Spec.MAC)
		}
	}
	if n := len(leasesIn(t, ns)); n != 5 {
		t.Fatalf("%d DHCPLease objects for 5 MACs", n)
	}
}

// TestManyMACsAcrossReplicas: 40 clients at once through two replicas get
// 40 distinct addresses of the range and never a static machine's IP, even
// the client whose search starts at that IP.
func TestManyMACsAcrossReplicas(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 62, 10, 137)
	staticIP := net.IPv4(10, 62, 0, 40).To4()
	static := leases.NewTable()
	static.Upsert(ns+"/rack-m1", []leases.Lease{{MAC: mac(9999), IP: staticIP, Pool: "rack"}})
	clk := newClock()
	a, b := newReplica(t, static, clk), newReplica(t, static, clk)
	a.sees(t, p)
	b.sees(t, p)

	// Find a MAC whose first candidate is the static IP.
	rng, err := dynamic.ParseRange(p)
	must(t, err)
	macs := []net.HardwareAddr{}
	for i := 0; len(macs) == 0; i++ {
		if i > 100000 {
			t.Fatal("no MAC starts at the static IP")
		}
		m := net.HardwareAddr{0x02, 0xd2, 0, 0, byte(i >> 8), byte(i)}
		if 10+rng.First(m) == 40 {
			macs = append(macs, m)
		}
	}
	for i := 1; i < 40; i++ {
		macs = append(macs, mac(1000+i))
	}

	ctx := context.Background()
	got, errs := offerAtOnce(ctx, [2]*replica{a, b}, macs, local(62))
	seen := map[string]string{}
	for i, l := range got {
		if errs[i] != nil {
			t.Fatalf("MAC %s: %v", macs[i], errs[i])
		}
		if !rng.Contains(l.IP) {
			t.Errorf("MAC %s got %s, outside the range", macs[i], l.IP)
		}
		if l.IP.Equal(staticIP) {
			t.Errorf("MAC %s got the static machine IP %s", macs[i], l.IP)
		}
		if other, dup := seen[l.IP.String()]; dup {
			t.Errorf("%s offered to %s and %s", l.IP, other, macs[i])
		}
		seen[l.IP.String()] = macs[i].String()
	}
	objs := leasesIn(t, ns)
	if len(objs) != len(macs) {
		t.Fatalf("%d DHCPLease objects for %d MACs", len(objs), len(macs))
	}
	for _, o := range objs {
		if seen[o.Spec.IP] != o.Spec.MAC {
			t.Errorf("object %s: %s for %s, but the offer gave it to %q", o.Name, o.Spec.IP, o.Spec.MAC, seen[o.Spec.IP])
		}
		if len(o.OwnerReferences) != 1 || o.OwnerReferences[0].Kind != "NodePool" || o.OwnerReferences[0].UID != p.UID {
			t.Errorf("object %s: owner references %+v, want the pool", o.Name, o.OwnerReferences)
		}
	}
}

// TestRangeFullThenExpiry: four addresses, four clients; the fifth gets
// ErrRangeFull until an offer hold runs out, then takes that address over.
func TestRangeFullThenExpiry(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "tiny", 63, 4, 7)
	clk := newClock()
	a := newReplica(t, leases.NewTable(), clk)
	a.sees(t, p)
	ctx := context.Background()
	held := map[string]string{}
	for i := 1; i <= 4; i++ {
		l, err := a.Offer(ctx, mac(i), "", nil, local(63))
		must(t, err)
		held[l.IP.String()] = mac(i).String()
	}
	if len(held) != 4 {
		t.Fatalf("4 MACs hold %d addresses", len(held))
	}
	if _, err := a.Offer(ctx, mac(5), "", nil, local(63)); !errors.Is(err, dynamic.ErrRangeFull) {
		t.Fatalf("fifth MAC: %v, want ErrRangeFull", err)
	}
	// One client confirms its address; the others let the hold lapse.
	var kept net.IP
	for ip, m := range held {
		if m == mac(1).String() {
			kept = net.ParseIP(ip)
		}
	}
	_, err := a.Ack(ctx, mac(1), kept, "", nil, local(63))
	must(t, err)

	clk.Advance(dynamic.DefaultOfferHold + time.Second)
	l, err := a.Offer(ctx, mac(5), "", nil, local(63))
	if err != nil {
		t.Fatalf("fifth MAC after the holds expired: %v", err)
	}
	if l.IP.Equal(kept) {
		t.Fatalf("fifth MAC took %s, which MAC 1 confirmed", kept)
	}
	if _, ok := held[l.IP.String()]; !ok {
		t.Fatalf("fifth MAC got %s, not one of the range's four", l.IP)
	}
	if o := getLease(t, ns, "tiny", l.IP); o.Spec.MAC != mac(5).String() {
		t.Fatalf("object of %s names %s after the take-over", l.IP, o.Spec.MAC)
	}
	if n := len(leasesIn(t, ns)); n != 4 {
		t.Fatalf("%d objects, want still 4", n)
	}
}

// TestAckReleaseRestart covers REQUEST, RELEASE and a replica restart.
func TestAckReleaseRestart(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 64, 10, 50)
	clk, static := newClock(), leases.NewTable()
	a := newReplica(t, static, clk)
	a.sees(t, p)
	ctx := context.Background()

	offered, err := a.Offer(ctx, mac(1), "", nil, local(64))
	must(t, err)
	o := getLease(t, ns, "rack", offered.IP)
	boundAt(t, "an offer", o, nil)
	rvOffer := o.ResourceVersion

	ack := func(m net.HardwareAddr, ip net.IP) (*leases.Lease, error) {
		return a.Ack(ctx, m, ip, "", nil, local(64))
	}
	l, err := ack(mac(1), offered.IP)
	must(t, err)
	ackedAt := clk.Now()
	o = getLease(t, ns, "rack", offered.IP)
	boundAt(t, "the first ACK", o, &ackedAt)
	if o.ResourceVersion == rvOffer || !o.Spec.ExpireTime.Time.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("first ACK did not extend the hold to the lease time: rv %s (offer %s), expires %s", o.ResourceVersion, rvOffer, o.Spec.ExpireTime)
	}
	if l.LeaseTime != time.Hour || !l.IP.Equal(offered.IP) || !l.Dynamic || l.Machine != "" || l.Pool != "rack" ||
		l.Mask.String() != "ffffff00" || !l.Router.Equal(net.IPv4(10, 64, 0, 1)) || len(l.DNS) != 1 || l.Domain != "farm.example" {
		t.Fatalf("unexpected lease %+v", l)
	}
	rvAck := o.ResourceVersion

	// Renewals before half-time do not write.
	for _, step := range []time.Duration{0, 20 * time.Minute, 9 * time.Minute} {
		clk.Advance(step)
		_, err := ack(mac(1), offered.IP)
		must(t, err)
		if rv := getLease(t, ns, "rack", offered.IP).ResourceVersion; rv != rvAck {
			t.Fatalf("renewal %s after the ACK wrote (rv %s -> %s)", step, rvAck, rv)
		}
	}
	// Past half-time (31 minutes after the ACK) it does.
	clk.Advance(2 * time.Minute)
	_, err = ack(mac(1), offered.IP)
	must(t, err)
	o = getLease(t, ns, "rack", offered.IP)
	if o.ResourceVersion == rvAck || !o.Spec.ExpireTime.Time.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("renewal past half-time did not extend: rv %s, expires %s (now %s)", o.ResourceVersion, o.Spec.ExpireTime, clk.Now())
	}
	boundAt(t, "a renewal", o, &ackedAt)

	// Someone else's address, an address outside the range: NAK.
	if _, err := ack(mac(2), offered.IP); !errors.Is(err, dynamic.ErrNotLeased) {
		t.Fatalf("ACK of another MAC's address: %v, want ErrNotLeased", err)
	}
	if _, err := ack(mac(2), net.IPv4(10, 64, 0, 99)); !errors.Is(err, dynamic.ErrNotLeased) {
		t.Fatalf("ACK outside the range: %v, want ErrNotLeased", err)
	}
	// A REQUEST for an address this MAC has no lease on (INIT-REBOOT with
	// no record): silence, and nothing written (RFC 2131 4.3.2).
	free := net.IPv4(10, 64, 0, 10).To4()
	if free.Equal(offered.IP) {
		free = net.IPv4(10, 64, 0, 11).To4()
	}
	if _, err := ack(mac(3), free); !errors.Is(err, dynamic.ErrNoRecord) {
		t.Fatalf("INIT-REBOOT on a free address: %v, want ErrNoRecord", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: dynamic.LeaseName("rack", free)}, &kubefarmv1.DHCPLease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a REQUEST without a lease claimed %s: %v", free, err)
	}
	// A static machine's IP is never confirmed, even inside the range.
	static.Upsert(ns+"/rack-m1", []leases.Lease{{MAC: mac(9000), IP: net.IPv4(10, 64, 0, 30).To4()}})
	if _, err := ack(mac(4), net.IPv4(10, 64, 0, 30)); !errors.Is(err, dynamic.ErrNotLeased) {
		t.Fatalf("ACK of a static IP: %v, want ErrNotLeased", err)
	}

	// A restarted replica (a fresh cache) offers the MAC its stored address,
	// also once the lease has expired and nobody took it.
	b := newReplica(t, static, clk)
	b.sees(t, p)
	again, err := b.Offer(ctx, mac(1), "", nil, local(64))
	must(t, err)
	if !again.IP.Equal(offered.IP) {
		t.Fatalf("after a restart MAC 1 is offered %s, had %s", again.IP, offered.IP)
	}
	clk.Advance(2 * time.Hour)
	c := newReplica(t, static, clk)
	c.sees(t, p)
	again, err = c.Offer(ctx, mac(1), "", nil, local(64))
	must(t, err)
	if !again.IP.Equal(offered.IP) {
		t.Fatalf("with an expired lease MAC 1 is offered %s, had %s", again.IP, offered.IP)
	}
	// Offered again after it lapsed: bound to nobody until the next ACK.
	boundAt(t, "the lapsed lease offered again to its MAC", getLease(t, ns, "rack", offered.IP), nil)

	// RELEASE from another MAC changes nothing; from the owner deletes.
	must(t, a.Release(ctx, mac(2), offered.IP))
	getLease(t, ns, "rack", offered.IP)
	must(t, a.Release(ctx, mac(1), offered.IP))
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: dynamic.LeaseName("rack", offered.IP)}, &kubefarmv1.DHCPLease{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("released lease still there: %v", err)
	}
	must(t, a.Release(ctx, mac(1), offered.IP)) // absent: not an error
}

// TestPoolSelection: the relay address picks the pool; no pool serves an
// unknown network.
func TestPoolSelection(t *testing.T) {
	ns := newNamespace(t)
	pa := newPool(t, ns, "a", 65, 10, 20)
	pb := newPool(t, ns, "b", 66, 10, 20)
	r := newReplica(t, leases.NewTable(), newClock())
	r.sees(t, pa)
	r.sees(t, pb)
	ctx := context.Background()
	rngB, _ := dynamic.ParseRange(pb)
	rngA, _ := dynamic.ParseRange(pa)

	l, err := r.Offer(ctx, mac(1), "", net.IPv4(10, 66, 0, 1), local(65))
	must(t, err)
	if l.Pool != "b" || !rngB.Contains(l.IP) || !l.Router.Equal(net.IPv4(10, 66, 0, 1)) {
		t.Fatalf("relayed from B's subnet: got pool %s, %s, router %s", l.Pool, l.IP, l.Router)
	}
	l, err = r.Offer(ctx, mac(2), "", nil, local(65))
	must(t, err)
	if l.Pool != "a" || !rngA.Contains(l.IP) {
		t.Fatalf("not relayed, server on A's subnet: got pool %s, %s", l.Pool, l.IP)
	}
	if _, err := r.Offer(ctx, mac(3), "", net.IPv4(10, 99, 0, 1), local(65)); !errors.Is(err, dynamic.ErrNoPool) {
		t.Fatalf("relayed from a network without a catch-all pool: %v, want ErrNoPool", err)
	}
	if _, err := r.Ack(ctx, mac(3), net.IPv4(10, 99, 0, 5), "", nil, net.IPv4(10, 99, 0, 2)); !errors.Is(err, dynamic.ErrNoPool) {
		t.Fatalf("ACK on a network without a catch-all pool: %v, want ErrNoPool", err)
	}
}

// TestDecline: a client that finds its address in use (DHCPDECLINE) makes
// the lease declined for one lease time. The address is then offered to
// nobody, the declining MAC included (which gets another address, from a
// replica whose cache may not know of the decline yet), no one can ACK or
// release it, and once the hold has passed it is free again.
func TestDecline(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 68, 10, 12) // three addresses
	clk, static := newClock(), leases.NewTable()
	a, b := newReplica(t, static, clk), newReplica(t, static, clk)
	a.sees(t, p)
	b.sees(t, p)
	ctx := context.Background()

	first, err := a.Offer(ctx, mac(1), "", nil, local(68))
	must(t, err)
	_, err = a.Ack(ctx, mac(1), first.IP, "", nil, local(68))
	must(t, err)
	ackedAt := clk.Now()
	boundAt(t, "the ACK", getLease(t, ns, "rack", first.IP), &ackedAt)

	// Only the lease's own client may decline it.
	must(t, a.Decline(ctx, mac(2), first.IP))
	if getLease(t, ns, "rack", first.IP).Spec.Declined {
		t.Fatal("another MAC's DECLINE marked the lease")
	}
	must(t, a.Decline(ctx, mac(1), first.IP))
	d := getLease(t, ns, "rack", first.IP)
	if !d.Spec.Declined || !d.Spec.ExpireTime.Time.Equal(clk.Now().Add(time.Hour)) || d.Spec.MAC != mac(1).String() {
		t.Fatalf("declined lease: %+v, want declined and held for the 1h lease time", d.Spec)
	}
	boundAt(t, "the declined lease", d, nil)

	// The declining client, asking either replica, gets another address.
	for _, r := range []*replica{a, b} {
		again, err := r.Offer(ctx, mac(1), "", nil, local(68))
		must(t, err)
		if again.IP.Equal(first.IP) {
			t.Fatalf("the declined address %s was offered again to the MAC that declined it", first.IP)
		}
	}
	if _, err := b.Ack(ctx, mac(1), first.IP, "", nil, local(68)); !errors.Is(err, dynamic.ErrNotLeased) {
		t.Fatalf("ACK of the declined address: %v, want ErrNotLeased", err)
	}
	must(t, b.Release(ctx, mac(1), first.IP))
	if !getLease(t, ns, "rack", first.IP).Spec.Declined {
		t.Fatal("a RELEASE ended the hold of a declined address")
	}
	// Two more MACs exhaust the range: the declined address is not free.
	_, err = a.Offer(ctx, mac(2), "", nil, local(68))
	must(t, err)
	if l, err := a.Offer(ctx, mac(3), "", nil, local(68)); !errors.Is(err, dynamic.ErrRangeFull) {
		t.Fatalf("third MAC with one address declined and two leased: %+v, %v; want ErrRangeFull", l, err)
	}
	// After the hold the address is free again, and not declined any more.
	clk.Advance(time.Hour + time.Second)
	// Another MAC has no record of it: silence.
	if _, err := a.Ack(ctx, mac(3), first.IP, "", nil, local(68)); !errors.Is(err, dynamic.ErrNoRecord) {
		t.Fatalf("another MAC's REQUEST for the once-declined address: %v, want ErrNoRecord", err)
	}
	if _, err := a.Ack(ctx, mac(1), first.IP, "", nil, local(68)); err != nil {
		t.Fatalf("the declining MAC taking its address back after the hold: %v", err)
	}
	o := getLease(t, ns, "rack", first.IP)
	if o.Spec.Declined || o.Spec.MAC != mac(1).String() {
		t.Fatalf("after the hold, the once-declined address is %+v, want MAC 1's and not declined", o.Spec)
	}
	revivedAt := clk.Now()
	boundAt(t, "the once-declined lease ACKed again", o, &revivedAt)
}

// TestHostnameRecorded: the client's option 12 is stored for inventory
// when it is a valid DNS label (folded to lower case), dropped otherwise,
// and never costs a write of its own.
func TestHostnameRecorded(t *testing.T) {
	ns := newNamespace(t)
	p := newPool(t, ns, "rack", 67, 10, 20)
	clk := newClock()
	a := newReplica(t, leases.NewTable(), clk)
	a.sees(t, p)
	ctx := context.Background()

	l, err := a.Offer(ctx, mac(1), "Disco-7", nil, local(67))
	must(t, err)
	if o := getLease(t, ns, "rack", l.IP); o.Spec.Hostname != "disco-7" || l.Hostname != "disco-7" {
		t.Fatalf("hostname stored %q, leased %q, want disco-7", o.Spec.Hostname, l.Hostname)
	}
	bad, err := a.Offer(ctx, mac(2), "no spaces; or $(shell)", nil, local(67))
	must(t, err)
	if o := getLease(t, ns, "rack", bad.IP); o.Spec.Hostname != "" {
		t.Fatalf("an invalid hostname was stored: %q", o.Spec.Hostname)
	}
	_, err = a.Ack(ctx, mac(1), l.IP, "disco-7", nil, local(67))
	must(t, err)
	rv := getLease(t, ns, "rack", l.IP).ResourceVersion
	waitFor(t, "the cache to hold the ACKed lease", func(ctx context.Context) bool {
		var c kubefarmv1.DHCPLease
		return a.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: dynamic.LeaseName("rack", l.IP)}, &c) == nil && c.ResourceVersion == rv
	})
	_, err = a.Ack(ctx, mac(1), l.IP, "renamed", nil, local(67))
	must(t, err)
	if o := getLease(t, ns, "rack", l.IP); o.ResourceVersion != rv || o.Spec.Hostname != "disco-7" {
		t.Fatalf("a renewal with a new hostname wrote (rv %s -> %s, hostname %q)", rv, o.ResourceVersion, o.Spec.Hostname)
	}
}

// TestBoundTime: spec.boundTime, what the NodePool controller makes a
// catch-all Machine from, says that a REQUEST was acknowledged, whatever
// the lease time. The pool leases for 2 minutes, so an offer's hold (60 s)
// is already half the lease time: the first ACK must write all the same.
// A renewal keeps the first ACK's time; another MAC taking the lapsed
// address over is an offer again, bound to nobody until its own ACK.
func TestBoundTime(t *testing.T) {
	ns := newNamespace(t)
	p := newPoolLeasing(t, ns, "one", 69, 10, 10, 2*time.Minute) // a single address
	clk := newClock()
	a := newReplica(t, leases.NewTable(), clk)
	a.sees(t, p)
	ctx := context.Background()
	ack := func(m net.HardwareAddr, ip net.IP) {
		t.Helper()
		_, err := a.Ack(ctx, m, ip, "", nil, local(69))
		must(t, err)
	}

	offered, err := a.Offer(ctx, mac(1), "", nil, local(69))
	must(t, err)
	boundAt(t, "an offer", getLease(t, ns, "one", offered.IP), nil)

	ack(mac(1), offered.IP)
	ackedAt := clk.Now()
	o := getLease(t, ns, "one", offered.IP)
	boundAt(t, "the first ACK", o, &ackedAt)
	if !o.Spec.ExpireTime.Time.Equal(ackedAt.Add(2 * time.Minute)) {
		t.Fatalf("the first ACK left expireTime at %s, want the 2m lease time from %s", o.Spec.ExpireTime, ackedAt)
	}

	// The client asks again while bound (DISCOVER after a reboot, then
	// REQUEST): same lease, same boundTime, nothing written.
	clk.Advance(30 * time.Second)
	again, err := a.Offer(ctx, mac(1), "", nil, local(69))
	must(t, err)
	if !again.IP.Equal(offered.IP) {
		t.Fatalf("bound MAC offered %s, holds %s", again.IP, offered.IP)
	}
	ack(mac(1), offered.IP)
	if n := getLease(t, ns, "one", offered.IP); n.ResourceVersion != o.ResourceVersion {
		t.Fatalf("a renewal before half-time wrote (rv %s -> %s)", o.ResourceVersion, n.ResourceVersion)
	}
	// Past half-time the renewal writes, and keeps the time of the first ACK.
	clk.Advance(31 * time.Second)
	ack(mac(1), offered.IP)
	o = getLease(t, ns, "one", offered.IP)
	if !o.Spec.ExpireTime.Time.Equal(clk.Now().Add(2 * time.Minute)) {
		t.Fatalf("renewal past half-time did not extend: expires %s (now %s)", o.Spec.ExpireTime, clk.Now())
	}
	boundAt(t, "a renewal past half-time", o, &ackedAt)

	// The lease lapses; another MAC takes the only address over.
	clk.Advance(3 * time.Minute)
	taken, err := a.Offer(ctx, mac(2), "", nil, local(69))
	must(t, err)
	if !taken.IP.Equal(offered.IP) {
		t.Fatalf("MAC 2 got %s, want the range's only address %s", taken.IP, offered.IP)
	}
	o = getLease(t, ns, "one", offered.IP)
	if o.Spec.MAC != mac(2).String() {
		t.Fatalf("after the take-over the lease names %s, want %s", o.Spec.MAC, mac(2))
	}
	boundAt(t, "an expired lease taken over by another MAC", o, nil)
	ack(mac(2), offered.IP)
	takenAt := clk.Now()
	boundAt(t, "the new MAC's ACK", getLease(t, ns, "one", offered.IP), &takenAt)
}
