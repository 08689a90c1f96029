package dhcp

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubefarm/kubefarm/pxe/leases"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzHandlePacket from the packets built in seedPackets")

// seedPackets are valid requests of every kind the server answers, built by
// code so that the fuzzer starts from packets that reach the reply path.
func seedPackets() map[string][]byte {
	pxe := []dhcpv4.Modifier{withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000:UNDI:002001")}
	out := map[string][]byte{
		"discover-bios":      request(dhcpv4.MessageTypeDiscover, pxe...).ToBytes(),
		"discover-uefi-http": request(dhcpv4.MessageTypeDiscover, withArch(iana.EFI_X86_64_HTTP), withVendor("HTTPClient:Arch:00016")).ToBytes(),
		"discover-ipxe":      request(dhcpv4.MessageTypeDiscover, append(pxe, dhcpv4.WithUserClass("iPXE", false))...).ToBytes(),
		"discover-relayed":   request(dhcpv4.MessageTypeDiscover, append(pxe, dhcpv4.WithRelay(relayIP))...).ToBytes(),
		"request-selecting":  request(dhcpv4.MessageTypeRequest, append(pxe, withSID(serverID), withReqIP(leaseIP))...).ToBytes(),
		"request-renewing":   request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(leaseIP)).ToBytes(),
		"request-other":      request(dhcpv4.MessageTypeRequest, withSID(otherID), withReqIP(leaseIP)).ToBytes(),
		"request-proxy4011":  request(dhcpv4.MessageTypeRequest, append(pxe, dhcpv4.WithClientIP(net.IPv4(192, 168, 1, 5)))...).ToBytes(),
	}
	return out
}

func corpusDir() string { return filepath.Join("testdata", "fuzz", "FuzzHandlePacket") }

func corpusFile(b []byte) string {
	return "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
}

// TestSeedCorpus keeps the checked-in seed corpus equal to seedPackets;
// run with -update-corpus after changing them.
func TestSeedCorpus(t *testing.T) {
	for name, pkt := range seedPackets() {
		path := filepath.Join(corpusDir(), name)
		if *updateCorpus {
			if err := os.MkdirAll(corpusDir(), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(corpusFile(pkt)), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != corpusFile(pkt) {
			t.Errorf("%s is missing or stale (%v): run go test ./pxe/dhcp/ -run TestSeedCorpus -update-corpus", path, err)
		}
	}
}

func testServer(t testing.TB, cfg Config, tab Leases) (*Server, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, tab, m, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func tableWith(ls ...*leases.Lease) *leases.Table {
	tab := leases.NewTable()
	for _, l := range ls {
		tab.Upsert(l.Machine, []leases.Lease{*l})
	}
	return tab
}

func FuzzHandlePacket(f *testing.F) {
	for _, p := range seedPackets() {
		f.Add(p)
	}
	tab := tableWith(testLease())
	auth, _ := testServer(f, testConfig(), tab)
	proxy, _ := testServer(f, proxyConfig(), tab)
	// Unknown MACs take the same answer path with an allocator's lease.
	dyn, _ := testServer(f, dynamicConfig(newMemDynamic()), tab)
	peer := &net.UDPAddr{IP: net.IPv4(10, 28, 0, 11), Port: 68}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for _, s := range []*Server{auth, proxy, dyn} {
			out, dst, typ, o := s.HandlePacket(pkt, peer)
			if typ == "" || o == "" {
				t.Fatalf("empty labels %q %q", typ, o)
			}
			if out == nil {
				continue
			}
			if dst == nil || len(out) > MaxPacket {
				t.Fatalf("reply of %d bytes to %v", len(out), dst)
			}
			if _, err := dhcpv4.FromBytes(out); err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
		}
	})
}

func TestHandlePacketRejects(t *testing.T) {
	s, _ := testServer(t, testConfig(), tableWith(testLease()))
	valid := seedPackets()["discover-bios"]
	oversize := append(append([]byte(nil), valid...), make([]byte, MaxPacket+1-len(valid))...)
	for name, pkt := range map[string][]byte{
		"empty": nil, "short": valid[:100], "garbage": []byte("GET / HTTP/1.1\r\n\r\n"), "oversize": oversize,
		"bad cookie":       func() []byte { b := append([]byte(nil), valid...); b[236] = 0; return b }(),
		"truncated option": func() []byte { b := append([]byte(nil), valid[:240]...); return append(b, 53, 5, 1) }(),
	} {
		if out, _, _, o := s.HandlePacket(pkt, nil); out != nil || o != Malformed {
			t.Errorf("%s: outcome %s, reply %v", name, o, out != nil)
		}
	}
	if out, dst, typ, o := s.HandlePacket(valid, nil); out == nil || o != Offered || typ != "DISCOVER" || !dst.IP.Equal(net.IPv4bcast) {
		t.Fatalf("valid discover: %v %v %s %s", out != nil, dst, typ, o)
	}
}

// blockingLeases holds every lookup until release is closed, so a test can
// keep the only worker busy and fill the queue deterministically.
type blockingLeases struct {
	entered chan struct{}
	release chan struct{}
	inner   Leases
}

func (b *blockingLeases) Lookup(mac net.HardwareAddr) (*leases.Lease, bool) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.inner.Lookup(mac)
}

// TestServeBoundedQueue runs Serve on loopback with one worker and a queue of
// one: with the worker held, one packet waits and the rest are dropped and
// counted, and oversized or unparsable packets are counted as malformed.
func TestServeBoundedQueue(t *testing.T) {
	bl := &blockingLeases{entered: make(chan struct{}, 1), release: make(chan struct{}), inner: tableWith(testLease())}
	cfg := testConfig()
	cfg.Workers, cfg.QueueSize = 1, 1
	s, m := testServer(t, cfg, bl)

	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, srv) }()
	released := false
	defer func() {
		if !released {
			close(bl.release)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	// Renewing requests are unicast to ciaddr: point ciaddr at the test
	// client so replies come back over loopback.
	renew := request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(net.IPv4(127, 0, 0, 1)))
	send := func(b []byte) {
		if _, err := cli.WriteTo(b, srv.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	count := func(typ string, o Outcome) float64 {
		return testutil.ToFloat64(m.packets.WithLabelValues(typ, string(o)))
	}
	waitCount := func(typ string, o Outcome, want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for count(typ, o) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s = %v, want %v", typ, o, count(typ, o), want)
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
	}

	send(renew.ToBytes())
	select {
	case <-bl.entered: // the worker now holds packet 1
	case <-time.After(10 * time.Second):
		t.Fatal("worker never looked up the first packet")
	}
	send(renew.ToBytes()) // waits in the queue
	send(renew.ToBytes()) // queue full: dropped
	send(renew.ToBytes()) // dropped
	waitCount("unknown", DroppedQueueFull, 2)

	close(bl.release)
	released = true
	// Packets 1 and 2 are answered: NAK, because the lease is 10.28.0.11,
	// not 127.0.0.1; NAKs are broadcast, so count them instead of reading.
	waitCount("REQUEST", Nak, 2)

	send(make([]byte, MaxPacket+200))
	send([]byte("not dhcp"))
	waitCount("unknown", Malformed, 2)

	if n := testutil.CollectAndCount(m.latency); n != 1 {
		t.Fatalf("latency histogram series = %d", n)
	}
}

func TestNewServerValidates(t *testing.T) {
	if _, err := NewServer(Config{}, leases.NewTable(), nil, logr.Discard()); err == nil {
		t.Fatal("accepted a config without server id")
	}
	if _, err := NewServer(testConfig(), nil, nil, logr.Discard()); err == nil {
		t.Fatal("accepted a nil lease table")
	}
	s, err := NewServer(testConfig(), leases.NewTable(), nil, logr.Discard())
	if err != nil || s.cfg.Workers <= 0 || s.cfg.QueueSize <= 0 {
		t.Fatalf("defaults not applied: %+v %v", s, err)
	}
	if err := s.Serve(context.Background()); err == nil {
		t.Fatal("Serve without sockets returned nil")
	}
}

func benchTable(n int) (*leases.Table, []net.HardwareAddr) {
	tab := leases.NewTable()
	macs := make([]net.HardwareAddr, n)
	for i := 0; i < n; i++ {
		mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(mac[2:], uint32(i))
		macs[i] = mac
		l := testLease()
		l.MAC, l.Machine = mac, fmt.Sprintf("farm/m%d", i)
		l.IP = net.IPv4(10, 28, byte(i>>8), byte(i)).To4()
		tab.Upsert(l.Machine, []leases.Lease{*l})
	}
	return tab, macs
}

// BenchmarkReplyPath measures one DISCOVER from bytes to reply bytes
// (parse, lookup among 20,000 leases, build, serialize).
func BenchmarkReplyPath(b *testing.B) {
	tab, macs := benchTable(20000)
	s, _ := testServer(b, testConfig(), tab)
	pkts := make([][]byte, 256)
	for i := range pkts {
		pkts[i] = request(dhcpv4.MessageTypeDiscover, dhcpv4.WithHwAddr(macs[(i*7919)%len(macs)]),
			withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000:UNDI:002001")).ToBytes()
	}
	peer := &net.UDPAddr{IP: net.IPv4zero, Port: 68}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if out, _, _, o := s.HandlePacket(pkts[i%len(pkts)], peer); out == nil {
				b.Fatal(o)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if out, _, _, o := s.HandlePacket(pkts[i%len(pkts)], peer); out == nil {
					b.Fatal(o)
				}
				i++
			}
		})
	})
}
