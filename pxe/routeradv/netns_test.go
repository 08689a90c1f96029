package routeradv

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/mdlayher/ndp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/ipv6"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
)

// pair makes a server and a client namespace joined by a veth pair, with
// duplicate address detection off so the link-local addresses are usable
// as soon as the links are up, and waits for both addresses.
func pair(t *testing.T) (srvNs, cliNs string) {
	t.Helper()
	srvNs, cliNs = netnstest.New(t, "kfra"), netnstest.New(t, "kfra")
	for _, ns := range []string{srvNs, cliNs} {
		netnstest.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	netnstest.Run(t, "ip", "-n", srvNs, "link", "add", "kfra0", "type", "veth", "peer", "name", "kfra1", "netns", cliNs)
	netnstest.Run(t, "ip", "-n", srvNs, "link", "set", "kfra0", "address", "52:54:00:aa:00:01", "up")
	netnstest.Run(t, "ip", "-n", cliNs, "link", "set", "kfra1", "address", "52:54:00:aa:00:02", "up")
	for ns, ifName := range map[string]string{srvNs: "kfra0", cliNs: "kfra1"} {
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			var ok bool
			err := netnstest.Do(ns, func() error {
				ifi, err := net.InterfaceByName(ifName)
				if err != nil {
					return err
				}
				addrs, err := ifi.Addrs()
				for _, a := range addrs {
					if n, isNet := a.(*net.IPNet); isNet && n.IP.IsLinkLocalUnicast() && n.IP.To4() == nil {
						ok = true
					}
				}
				return err
			})
			return ok, err
		}); err != nil {
			t.Fatalf("%s in %s has no IPv6 link-local address: %v", ifName, ns, err)
		}
	}
	return srvNs, cliNs
}

// serveIn runs a responder on the server side of the pair until the test ends.
func serveIn(t *testing.T, ns string, perSecond float64, burst int) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var r *Responder
	if err := netnstest.Do(ns, func() (err error) { r, err = Listen("kfra0", perSecond, burst, m, testr.New(t)); return err }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return m
}

// client is a host on the boot network soliciting routers as iPXE does.
func client(t *testing.T, ns string) *ndp.Conn {
	t.Helper()
	var c *ndp.Conn
	if err := netnstest.Do(ns, func() error {
		ifi, err := net.InterfaceByName("kfra1")
		if err != nil {
			return err
		}
		c, _, err = ndp.Listen(ifi, ndp.LinkLocal)
		if err != nil {
			return err
		}
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeRouterAdvertisement)
		return c.SetICMPFilter(&f)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func solicit(t *testing.T, c *ndp.Conn, hopLimit int) {
	t.Helper()
	mac, _ := net.ParseMAC("52:54:00:aa:00:02")
	rs := &ndp.RouterSolicitation{Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}}}
	var cm *ipv6.ControlMessage
	if hopLimit != ndp.HopLimit {
		cm = &ipv6.ControlMessage{HopLimit: hopLimit}
	}
	if err := c.WriteTo(rs, cm, netip.IPv6LinkLocalAllRouters()); err != nil {
		t.Fatal(err)
	}
}

// TestAnswersSolicitations: a solicitation from the boot network gets, back
// to its sender, the advertisement that ends iPXE's IPv6 wait: from the
// server's link-local address, router lifetime zero, no DHCPv6 flags, no
// prefix.
func TestAnswersSolicitations(t *testing.T) {
	srvNs, cliNs := pair(t)
	m := serveIn(t, srvNs, 0, 0)
	c := client(t, cliNs)
	solicit(t, c, ndp.HopLimit)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	msg, cm, from, err := c.ReadFrom()
	if err != nil {
		t.Fatalf("no router advertisement: %v", err)
	}
	ra, ok := msg.(*ndp.RouterAdvertisement)
	if !ok {
		t.Fatalf("got %T, want a router advertisement", msg)
	}
	if !from.IsLinkLocalUnicast() {
		t.Errorf("advertisement from %s, want the server's link-local address", from)
	}
	if cm != nil && cm.HopLimit != 0 && cm.HopLimit != ndp.HopLimit {
		t.Errorf("advertisement hop limit %d, want 255", cm.HopLimit)
	}
	if ra.RouterLifetime != 0 || ra.ManagedConfiguration || ra.OtherConfiguration {
		t.Errorf("advertisement %+v: want router lifetime 0 and no DHCPv6 flags", ra)
	}
	for _, o := range ra.Options {
		if _, isPrefix := o.(*ndp.PrefixInformation); isPrefix {
			t.Errorf("advertisement carries a prefix: %+v", o)
		}
	}
	// The responder counts an answer after its write returns, so the
	// advertisement can arrive here first: wait for the count.
	answered := func() float64 { return testutil.ToFloat64(m.solicitations.WithLabelValues(Answered)) }
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return answered() >= 1, nil
	}); err != nil || answered() != 1 {
		t.Errorf("answered %v solicitations, want 1 (%v)", answered(), err)
	}
}

// TestDropsRoutedAndLimits: a solicitation whose hop limit is not 255 was
// routed here from another link and is dropped (RFC 4861 6.1.1); beyond
// the rate limit, solicitations are counted and not answered.
func TestDropsRoutedAndLimits(t *testing.T) {
	srvNs, cliNs := pair(t)
	// One answer, then none for the life of the test.
	m := serveIn(t, srvNs, 1e-9, 1)
	c := client(t, cliNs)
	solicit(t, c, 64)
	for range 3 {
		solicit(t, c, ndp.HopLimit)
	}
	answered := func() float64 { return testutil.ToFloat64(m.solicitations.WithLabelValues(Answered)) }
	limited := func() float64 { return testutil.ToFloat64(m.solicitations.WithLabelValues(Limited)) }
	routed := func() float64 { return testutil.ToFloat64(m.solicitations.WithLabelValues(Routed)) }
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return answered()+limited()+routed() == 4, nil
	}); err != nil {
		t.Fatalf("answered %v, limited %v, routed %v of 4 solicitations: %v", answered(), limited(), routed(), err)
	}
	if routed() != 1 || answered() != 1 || limited() != 2 {
		t.Errorf("routed %v, answered %v, limited %v; want 1 (hop limit 64), 1 and 2 (burst 1)", routed(), answered(), limited())
	}
}
