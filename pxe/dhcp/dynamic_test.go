package dhcp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/pxe/leases"
)

// The allocator's errors, as package dynamic defines them: each names its
// outcome.
var (
	errNoPool    error = &OutcomeError{IgnoredUnknown, "no pool"}
	errRangeFull error = &OutcomeError{IgnoredRangeFull, "range full"}
	errNotLeased error = &OutcomeError{Nak, "not leased"}
	errNoRecord  error = &OutcomeError{IgnoredUnknown, "no record"}
)

// memDynamic is an in-memory allocator standing in for package dynamic
// (whose API-backed allocator has its own tests against a real API
// server): it checks what the server asks and answers from a map.
type memDynamic struct {
	mu       sync.Mutex
	next     byte
	byMAC    map[string]net.IP
	noPool   bool
	full     bool
	block    chan struct{} // when set, Offer waits for it
	relays   []net.IP
	locals   []net.IP
	release  []string
	declined []string
}

func newMemDynamic() *memDynamic { return &memDynamic{next: 100, byMAC: map[string]net.IP{}} }

func (d *memDynamic) lease(mac net.HardwareAddr, ip net.IP) *leases.Lease {
	return &leases.Lease{MAC: mac, IP: ip, Mask: net.CIDRMask(16, 32), Router: net.IPv4(10, 28, 0, 1).To4(),
		LeaseTime: 10 * time.Minute, Pool: "rack1"}
}

func (d *memDynamic) Offer(ctx context.Context, mac net.HardwareAddr, _ string, relay, local net.IP) (*leases.Lease, error) {
	if d.block != nil {
		select {
		case <-d.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.relays, d.locals = append(d.relays, relay), append(d.locals, local)
	switch {
	case d.noPool:
		return nil, fmt.Errorf("pool lookup: %w", errNoPool)
	case d.full:
		return nil, fmt.Errorf("pool rack1: %w", errRangeFull)
	}
	ip, ok := d.byMAC[mac.String()]
	if !ok {
		ip = net.IPv4(10, 28, 9, d.next).To4()
		d.next++
		d.byMAC[mac.String()] = ip
	}
	return d.lease(mac, ip), nil
}

func (d *memDynamic) Ack(_ context.Context, mac net.HardwareAddr, ip net.IP, _ string, _, _ net.IP) (*leases.Lease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	have, ok := d.byMAC[mac.String()]
	switch {
	case !ok:
		return nil, fmt.Errorf("%v: %w", ip, errNoRecord)
	case !have.Equal(ip):
		return nil, fmt.Errorf("%v: %w", ip, errNotLeased)
	}
	return d.lease(mac, ip), nil
}

func (d *memDynamic) Release(_ context.Context, mac net.HardwareAddr, ip net.IP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.release = append(d.release, mac.String()+"@"+ip.String())
	delete(d.byMAC, mac.String())
	return nil
}

func (d *memDynamic) Decline(_ context.Context, mac net.HardwareAddr, ip net.IP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.declined = append(d.declined, mac.String()+"@"+ip.String())
	return nil
}

func dynamicConfig(d Dynamic) Config {
	c := testConfig()
	c.Dynamic = d
	return c
}

func TestDynamicAnswers(t *testing.T) {
	stranger := net.HardwareAddr{2, 0, 0, 0, 0, 0x42}
	pxe := []dhcpv4.Modifier{dhcpv4.WithHwAddr(stranger), withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000")}
	dyn := newMemDynamic()
	s, _ := testServer(t, dynamicConfig(dyn), tableWith(testLease()))
	do := func(mt dhcpv4.MessageType, mods ...dhcpv4.Modifier) (*dhcpv4.DHCPv4, Outcome) {
		t.Helper()
		out, _, _, o := s.HandlePacket(request(mt, append(pxe, mods...)...).ToBytes(), nil)
		if out == nil {
			return nil, o
		}
		resp, err := dhcpv4.FromBytes(out)
		if err != nil {
			t.Fatal(err)
		}
		return resp, o
	}
	dynIP := net.IPv4(10, 28, 9, 100).To4()

	offer, o := do(dhcpv4.MessageTypeDiscover, dhcpv4.WithRelay(relayIP))
	if o != Offered || !offer.YourIPAddr.Equal(dynIP) || offer.BootFileName != "undionly.kpxe" || offer.Options.Get(dhcpv4.OptionHostName) != nil {
		t.Fatalf("offer to an unknown MAC: %v %v", o, offer)
	}
	if !dyn.relays[0].Equal(relayIP) || !dyn.locals[0].Equal(serverID) {
		t.Errorf("allocator asked with relay %v local %v, want %v and %v", dyn.relays[0], dyn.locals[0], relayIP, serverID)
	}
	if ack, o := do(dhcpv4.MessageTypeRequest, withSID(serverID), withReqIP(dynIP)); o != Acked || !ack.YourIPAddr.Equal(dynIP) {
		t.Errorf("ack: %v %v", o, ack)
	}
	if nak, o := do(dhcpv4.MessageTypeRequest, withReqIP(net.IPv4(10, 28, 9, 7))); o != Nak || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("request for another address: %v %v, want a NAK", o, nak)
	}
	// A MAC with no lease asking for an address (INIT-REBOOT): silence,
	// RFC 2131 4.3.2.
	if _, _, _, o := s.HandlePacket(request(dhcpv4.MessageTypeRequest, dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 0x43}),
		withReqIP(dynIP)).ToBytes(), nil); o != IgnoredUnknown {
		t.Errorf("REQUEST from a MAC with no lease: %v, want silence", o)
	}
	if _, o := do(dhcpv4.MessageTypeRequest, withSID(otherID), withReqIP(dynIP)); o != IgnoredOtherServer {
		t.Errorf("request for another server: %v", o)
	}
	// A relay outside the lease's subnet is refused here too.
	if _, o := do(dhcpv4.MessageTypeDiscover, dhcpv4.WithRelay(foreignIP)); o != IgnoredBadRelay {
		t.Errorf("offer relayed from outside the subnet: %v", o)
	}
	if _, o := do(dhcpv4.MessageTypeRelease, withSID(serverID), dhcpv4.WithClientIP(dynIP)); o != Released || len(dyn.release) != 1 {
		t.Errorf("release: %v, allocator saw %v", o, dyn.release)
	}
	if _, o := do(dhcpv4.MessageTypeDecline, withSID(serverID), withReqIP(dynIP)); o != Declined || len(dyn.declined) != 1 ||
		dyn.declined[0] != stranger.String()+"@"+dynIP.String() {
		t.Errorf("decline: %v, allocator saw %v", o, dyn.declined)
	}
	if _, o := do(dhcpv4.MessageTypeDecline, withSID(otherID), withReqIP(dynIP)); o != IgnoredOtherServer || len(dyn.declined) != 1 {
		t.Errorf("decline for another server: %v, allocator saw %v", o, dyn.declined)
	}
	dyn.full = true
	if _, o := do(dhcpv4.MessageTypeDiscover); o != IgnoredRangeFull {
		t.Errorf("full range: %v", o)
	}
	dyn.full, dyn.noPool = false, true
	if _, o := do(dhcpv4.MessageTypeDiscover); o != IgnoredUnknown {
		t.Errorf("no catch-all pool: %v", o)
	}
	// Known machines never reach the allocator.
	calls := len(dyn.relays)
	if _, _, _, o := s.HandlePacket(request(dhcpv4.MessageTypeDiscover).ToBytes(), nil); o != Offered || len(dyn.relays) != calls {
		t.Errorf("known machine: %v, allocator called %d times more", o, len(dyn.relays)-calls)
	}

	// proxyDHCP never allocates: another server owns the addresses.
	pc := dynamicConfig(newMemDynamic())
	pc.ProxyDHCP = true
	ps, _ := testServer(t, pc, tableWith(testLease()))
	if _, _, _, o := ps.HandlePacket(request(dhcpv4.MessageTypeDiscover, pxe...).ToBytes(), nil); o != IgnoredUnknown {
		t.Errorf("proxyDHCP with an unknown MAC: %v", o)
	}
}

// TestSlowAllocatorDoesNotDelayStaticMachines runs the socket loop with an
// allocator stuck on its API call: known machines are still answered, the
// unknown MAC is answered once the allocator returns, and unknown MACs
// beyond the dynamic queue are dropped and counted, not queued without
// bound.
func TestSlowAllocatorDoesNotDelayStaticMachines(t *testing.T) {
	srvIP, relay, srvConn, relayConn := relayOnLoopback(t)
	dyn := newMemDynamic()
	dyn.block = make(chan struct{})
	cfg := dynamicConfig(dyn)
	cfg.ServerID, cfg.Boot.Server = srvIP, srvIP
	cfg.Workers, cfg.QueueSize, cfg.DynamicWorkers, cfg.DynamicQueue = 1, 8, 1, 1
	s, m := testServer(t, cfg, tableWith(testLease()))
	serve(t, s, srvConn)

	send := func(mac net.HardwareAddr, xid byte) {
		t.Helper()
		req := request(dhcpv4.MessageTypeDiscover, dhcpv4.WithRelay(relay), dhcpv4.WithHwAddr(mac),
			dhcpv4.WithTransactionID(dhcpv4.TransactionID{xid, 0, 0, 0}))
		if _, err := relayConn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *dhcpv4.DHCPv4 {
		t.Helper()
		buf := make([]byte, 2048)
		_ = relayConn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := relayConn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		resp, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Unknown MACs 1 to 3 meet one dynamic worker and a queue of one:
	// one of them is dropped. Meanwhile the single static worker hands them over without
	// waiting, so the known machine right after is answered first.
	for i := byte(1); i <= 3; i++ {
		send(net.HardwareAddr{2, 0, 0, 0, 0, i}, i)
	}
	waitFor(t, "the third unknown MAC dropped", func() bool {
		return testutil.ToFloat64(m.packets.WithLabelValues("DISCOVER", string(DroppedQueueFull))) == 1
	})
	send(clientMAC, 9)
	if r := recv(); r.TransactionID[0] != 9 || !r.YourIPAddr.Equal(leaseIP) {
		t.Fatalf("first reply while the allocator is stuck: xid %v yiaddr %v, want the known machine's", r.TransactionID, r.YourIPAddr)
	}
	close(dyn.block)
	got := map[byte]bool{}
	for i := 0; i < 2; i++ {
		r := recv()
		if r.MessageType() != dhcpv4.MessageTypeOffer || !r.YourIPAddr.Mask(net.CIDRMask(24, 32)).Equal(net.IPv4(10, 28, 9, 0).To4()) {
			t.Fatalf("dynamic offer: %v", r.Summary())
		}
		got[r.TransactionID[0]] = true
	}
	// Which of 2 and 3 was dropped depends on whether the dynamic worker
	// had taken 1 off the queue yet; 1 is always answered.
	if !got[1] || len(got) != 2 {
		t.Fatalf("dynamic offers for xids %v, want 1 and one of 2 and 3", got)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
