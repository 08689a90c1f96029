package dhcp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/testing/netnstest"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// serve runs s on conns until the test ends.
func serve(t testing.TB, s *Server, conns ...net.PacketConn) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conns...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// TestRelayedExchange plays a relay agent on loopback inside a fresh
// namespace: requests carry giaddr, replies must come back to giaddr:67.
func TestRelayedExchange(t *testing.T) {
	srvIP, relay, srvConn, relayConn := relayOnLoopback(t)

	cfg := Config{ServerID: srvIP, Boot: bootfile.Config{Server: srvIP}, Workers: 1, QueueSize: 8}
	s, m := testServer(t, cfg, tableWith(testLease()))
	serve(t, s, srvConn)

	exchange := func(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
		t.Helper()
		if _, err := relayConn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		if err := relayConn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, from, err := relayConn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no reply at the relay: %v", err)
		}
		if ua := from.(*net.UDPAddr); !ua.IP.Equal(srvIP) || ua.Port != ServerPort {
			t.Fatalf("reply from %s, want %s:67", from, srvIP)
		}
		resp, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GatewayIPAddr.Equal(relay) || resp.TransactionID != req.TransactionID {
			t.Fatalf("reply giaddr %s xid %s", resp.GatewayIPAddr, resp.TransactionID)
		}
		return resp
	}
	relayed := []dhcpv4.Modifier{dhcpv4.WithRelay(relay), withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000")}

	// An unknown MAC first: with one worker, the known MAC's reply can only
	// arrive after the unknown one was handled, so "no reply" is observable
	// without waiting for a timeout.
	unknown := request(dhcpv4.MessageTypeDiscover, append(relayed, dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 9}),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{9, 9, 9, 9}))...)
	if _, err := relayConn.WriteTo(unknown.ToBytes(), &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
		t.Fatal(err)
	}
	// A known MAC relayed with a giaddr outside its subnet (spoofed, or a
	// misconfigured relay) gets nothing: replies go to giaddr, and the
	// server must not send them to an arbitrary host.
	spoofed := request(dhcpv4.MessageTypeDiscover, dhcpv4.WithRelay(foreignIP), withArch(iana.INTEL_X86PC),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{8, 8, 8, 8}))
	if _, err := relayConn.WriteTo(spoofed.ToBytes(), &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
		t.Fatal(err)
	}
	offer := exchange(request(dhcpv4.MessageTypeDiscover, relayed...))
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(leaseIP) || offer.BootFileName != "undionly.kpxe" {
		t.Fatalf("offer: %s", offer.Summary())
	}
	ack := exchange(request(dhcpv4.MessageTypeRequest, append(relayed, withSID(srvIP), withReqIP(leaseIP))...))
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(leaseIP) || string(ack.Options[12]) != "m1" {
		t.Fatalf("ack: %s", ack.Summary())
	}
	nakResp := exchange(request(dhcpv4.MessageTypeRequest, append(relayed, withSID(srvIP), withReqIP(net.IPv4(10, 28, 0, 99)))...))
	if nakResp.MessageType() != dhcpv4.MessageTypeNak || !nakResp.IsBroadcast() {
		t.Fatalf("nak: %s", nakResp.Summary())
	}
	wants := []struct {
		typ  string
		o    Outcome
		want float64
	}{{"DISCOVER", IgnoredUnknown, 1}, {"DISCOVER", IgnoredBadRelay, 1}, {"DISCOVER", Offered, 1}, {"REQUEST", Acked, 1}, {"REQUEST", Nak, 1}}
	// Workers count after they send, so the last reply can arrive before
	// its count: wait for the counters, bounded.
	_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, c := range wants {
			if testutil.ToFloat64(m.packets.WithLabelValues(c.typ, string(c.o))) != c.want {
				return false, nil
			}
		}
		return true, nil
	})
	for _, c := range wants {
		if got := testutil.ToFloat64(m.packets.WithLabelValues(c.typ, string(c.o))); got != c.want {
			t.Errorf("%s/%s = %v, want %v", c.typ, c.o, got, c.want)
		}
	}
}

// veth builds server and client namespaces joined by a veth pair and
// returns the client's interface name; the server side has 10.99.0.1/24.
func veth(t *testing.T, srvNs, cliNs, clientMAC string) (srvIf, cliIf string) {
	t.Helper()
	srvIf, cliIf = "kfsrv0", "kfcli0"
	netnstest.Run(t, "ip", "-n", srvNs, "link", "add", srvIf, "type", "veth", "peer", "name", cliIf, "netns", cliNs)
	netnstest.Run(t, "ip", "-n", srvNs, "addr", "add", "10.99.0.1/24", "dev", srvIf)
	netnstest.Run(t, "ip", "-n", srvNs, "link", "set", srvIf, "up")
	netnstest.Run(t, "ip", "-n", cliNs, "link", "set", cliIf, "address", clientMAC)
	netnstest.Run(t, "ip", "-n", cliNs, "link", "set", cliIf, "up")
	return srvIf, cliIf
}

func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRealClients serves a veth pair between two namespaces and lets real
// DHCP clients (busybox udhcpc, ISC dhclient) obtain their static lease.
func TestRealClients(t *testing.T) {
	srvNs, cliNs := netnstest.New(t, "kfdhcp"), netnstest.New(t, "kfdhcp")
	const mac = "52:54:00:99:00:02"
	srvIf, cliIf := veth(t, srvNs, cliNs, mac)

	hw, _ := net.ParseMAC(mac)
	srvIP := net.IPv4(10, 99, 0, 1).To4()
	lease := leases.Lease{
		MAC: hw, IP: net.IPv4(10, 99, 0, 42).To4(), Mask: net.CIDRMask(24, 32), Router: srvIP,
		DNS: []net.IP{net.IPv4(10, 99, 0, 53).To4(), net.IPv4(10, 99, 0, 54).To4()}, Domain: "farm.test",
		Hostname: "node-42", LeaseTime: 10 * time.Minute, Machine: "farm/node-42", Pool: "p",
	}
	cfg := Config{ServerID: srvIP, Boot: bootfile.Config{Server: srvIP, HTTPPort: 8080}}
	s, m := testServer(t, cfg, tableWith(&lease))
	var conns []net.PacketConn
	if err := netnstest.Do(srvNs, func() (err error) { conns, err = Listen(srvIf, cfg); return err }); err != nil {
		t.Fatal(err)
	}
	serve(t, s, conns...)

	t.Run("udhcpc", func(t *testing.T) {
		if _, err := exec.LookPath("busybox"); err != nil {
			t.Skip("SKIPPED, NOT PASSED: busybox is not installed (apt-get install -y busybox)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Option 93 = 0 (BIOS) and the PXE vendor class make it look like
		// a PXE ROM.
		env, b, err := netnstest.Udhcpc(ctx, cliNs, cliIf, netnstest.UdhcpcOptions{Timeout: 2,
			Args: []string{"-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x5d:0000"}})
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		for k, want := range map[string]string{
			"ip": "10.99.0.42", "subnet": "255.255.255.0", "router": "10.99.0.1", "dns": "10.99.0.53 10.99.0.54",
			"hostname": "node-42", "domain": "farm.test", "lease": "600", "serverid": "10.99.0.1",
			"siaddr": "10.99.0.1", "boot_file": "undionly.kpxe", "interface": cliIf,
		} {
			if got := strings.TrimSpace(env[k]); got != want {
				t.Errorf("udhcpc %s = %q, want %q", k, got, want)
			}
		}
	})

	t.Run("dhclient", func(t *testing.T) {
		if _, err := exec.LookPath("dhclient"); err != nil {
			t.Skip("SKIPPED, NOT PASSED: dhclient is not installed (apt-get install -y isc-dhcp-client)")
		}
		dir := t.TempDir()
		out := filepath.Join(dir, "env")
		script := writeScript(t, `[ "$reason" = BOUND ] && env > "`+out+`.tmp" && mv "`+out+`.tmp" "`+out+`"`)
		conf := filepath.Join(dir, "dhclient.conf")
		if err := os.WriteFile(conf, []byte("request subnet-mask, routers, domain-name-servers, host-name, domain-name;\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var log bytes.Buffer
		// -d keeps it in the foreground so this test owns the process and
		// stops it by its own handle.
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", cliNs, "dhclient", "-d", "-1", "-v",
			"-cf", conf, "-sf", script, "-lf", filepath.Join(dir, "leases"), "-pf", filepath.Join(dir, "pid"), cliIf)
		env := runUntilBound(ctx, t, cmd, &log, "dhclient", func() map[string]string {
			e, err := readEnv(out)
			if err != nil {
				return nil
			}
			return e
		})
		for k, want := range map[string]string{
			"new_ip_address": "10.99.0.42", "new_subnet_mask": "255.255.255.0", "new_routers": "10.99.0.1",
			"new_domain_name_servers": "10.99.0.53 10.99.0.54", "new_host_name": "node-42", "new_domain_name": "farm.test",
			"new_dhcp_server_identifier": "10.99.0.1", "new_dhcp_lease_time": "600",
		} {
			if got := env[k]; got != want {
				t.Errorf("dhclient %s = %q, want %q", k, got, want)
			}
		}
	})

	t.Run("systemd-networkd with the node image's network file", func(t *testing.T) {
		networkdLease(t, cliNs, cliIf, map[string]string{
			"ADDRESS": "10.99.0.42", "NETMASK": "255.255.255.0", "ROUTER": "10.99.0.1",
			"DNS": "10.99.0.53 10.99.0.54", "DOMAINNAME": "farm.test", "HOSTNAME": "node-42",
			"SERVER_ADDRESS": "10.99.0.1", "LIFETIME": "600",
		})
	})

	offered := testutil.ToFloat64(m.packets.WithLabelValues("DISCOVER", string(Offered)))
	acked := testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(Acked)))
	if !t.Skipped() && (offered < 1 || acked < 1) {
		t.Errorf("metrics: offered %v acked %v", offered, acked)
	}
}

// TestProxyDHCP runs proxyDHCP mode on loopback inside a fresh namespace: a
// relayed PXE DISCOVER gets a boot-only OFFER, and the boot server REQUEST
// to port 4011 gets an ACK unicast back to the client's address and port.
func TestProxyDHCP(t *testing.T) {
	ns := netnstest.New(t, "kfdhcp")
	// The relay's address is on the machine's subnet, as a real relay's giaddr is.
	srvIP, relay, client := net.IPv4(127, 0, 0, 1).To4(), relayIP, net.IPv4(127, 0, 0, 3).To4()
	netnstest.Run(t, "ip", "-n", ns, "addr", "add", relay.String()+"/32", "dev", "lo")
	var srv67, srv4011, relayConn, clientConn *net.UDPConn
	if err := netnstest.Do(ns, func() (err error) {
		if srv67, err = server4.NewIPv4UDPConn("", &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
			return err
		}
		if srv4011, err = server4.NewIPv4UDPConn("", &net.UDPAddr{IP: srvIP, Port: PXEProxyPort}); err != nil {
			return err
		}
		if relayConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: relay, Port: ServerPort}); err != nil {
			return err
		}
		clientConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: client, Port: ClientPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer relayConn.Close()
	defer clientConn.Close()

	cfg := Config{ServerID: srvIP, Boot: bootfile.Config{Server: srvIP}, ProxyDHCP: true}
	s, m := testServer(t, cfg, tableWith(testLease()))
	serve(t, s, srv67, srv4011)

	roundTrip := func(c *net.UDPConn, to *net.UDPAddr, req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, *net.UDPAddr) {
		t.Helper()
		if _, err := c.WriteTo(req.ToBytes(), to); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		resp, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return resp, from.(*net.UDPAddr)
	}
	pxe := []dhcpv4.Modifier{withArch(iana.EFI_X86_64), withVendor("PXEClient:Arch:00007:UNDI:003016")}

	offer, from := roundTrip(relayConn, &net.UDPAddr{IP: srvIP, Port: ServerPort},
		request(dhcpv4.MessageTypeDiscover, append(pxe, dhcpv4.WithRelay(relay))...))
	if from.Port != ServerPort || offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.IsUnspecified() ||
		offer.BootFileName != "ipxe.efi" || string(offer.Options[60]) != "PXEClient" || offer.Options.Has(dhcpv4.OptionIPAddressLeaseTime) {
		t.Fatalf("proxy offer from %s: %s", from, offer.Summary())
	}

	ack, from := roundTrip(clientConn, &net.UDPAddr{IP: srvIP, Port: PXEProxyPort},
		request(dhcpv4.MessageTypeRequest, append(pxe, dhcpv4.WithClientIP(client), withSID(srvIP))...))
	if !from.IP.Equal(srvIP) || from.Port != PXEProxyPort || ack.MessageType() != dhcpv4.MessageTypeAck ||
		!ack.ClientIPAddr.Equal(client) || !ack.YourIPAddr.IsUnspecified() || ack.BootFileName != "ipxe.efi" {
		t.Fatalf("proxy ack from %s: %s", from, ack.Summary())
	}
	// The worker counts after it sends, so the reply can arrive first.
	acked := func(context.Context) (bool, error) {
		return testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(Acked))) == 1, nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, acked); err != nil {
		t.Fatalf("acked = %v", testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(Acked))))
	}
}

// BenchmarkServeRelayed measures the whole socket path (read, queue, worker,
// reply, send) with a relay on loopback in a fresh namespace sending
// DISCOVERs for 20,000 known MACs, 64 in flight. It reports replies/s.
func BenchmarkServeRelayed(b *testing.B) {
	srvIP, relay, srvConn, relayConn := relayOnLoopback(b)
	tab, macs := benchTable(20000)
	s, m := testServer(b, Config{ServerID: srvIP, Boot: bootfile.Config{Server: srvIP}}, tab)
	serve(b, s, srvConn)

	pkts := make([][]byte, 1024)
	for i := range pkts {
		pkts[i] = request(dhcpv4.MessageTypeDiscover, dhcpv4.WithHwAddr(macs[(i*7919)%len(macs)]), dhcpv4.WithRelay(relay),
			withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000")).ToBytes()
	}
	const window = 64
	permits := make(chan struct{}, window)
	for i := 0; i < window; i++ {
		permits <- struct{}{}
	}
	dst := &net.UDPAddr{IP: srvIP, Port: ServerPort}
	received := make(chan int, 1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		buf := make([]byte, 2048)
		n := 0
		for n < b.N {
			_ = relayConn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := relayConn.ReadFrom(buf); err != nil {
				break // a lost reply ends the run; the count says how many arrived
			}
			n++
			permits <- struct{}{}
		}
		received <- n
	}()
	for i := 0; i < b.N; i++ {
		select {
		case <-permits:
		case <-time.After(5 * time.Second):
			b.Fatalf("no reply for 5s after %d sends", i)
		}
		if _, err := relayConn.WriteTo(pkts[i%len(pkts)], dst); err != nil {
			b.Fatal(err)
		}
	}
	got := <-received
	elapsed := time.Since(start)
	b.StopTimer()
	if got != b.N {
		b.Fatalf("%d of %d replies arrived (dropped in queue: %v)", got, b.N,
			testutil.ToFloat64(m.packets.WithLabelValues("unknown", string(DroppedQueueFull))))
	}
	b.ReportMetric(float64(got)/elapsed.Seconds(), "replies/s")
}

// relayOnLoopback makes a fresh namespace with the server's socket on
// 127.0.0.1:67 and a relay agent's socket on 10.28.200.1:67 (an address of
// the test leases' subnet, added to lo, as a real relay's giaddr is on the
// client's subnet), both closed when the test ends.
func relayOnLoopback(tb testing.TB) (srvIP, relay net.IP, srvConn, relayConn *net.UDPConn) {
	tb.Helper()
	ns := netnstest.New(tb, "kfdhcp")
	srvIP, relay = net.IPv4(127, 0, 0, 1).To4(), relayIP
	netnstest.Run(tb, "ip", "-n", ns, "addr", "add", relay.String()+"/32", "dev", "lo")
	if err := netnstest.Do(ns, func() (err error) {
		if srvConn, err = server4.NewIPv4UDPConn("", &net.UDPAddr{IP: srvIP, Port: ServerPort}); err != nil {
			return err
		}
		relayConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: relay, Port: ServerPort})
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { relayConn.Close() })
	return srvIP, relay, srvConn, relayConn
}

// TestPerfdhcpRelayed drives the server with Kea's perfdhcp acting as a
// relay agent: every DISCOVER and REQUEST carries giaddr (the relay's
// address on the machines' subnet) and every reply must come back to the
// relay, port 67. perfdhcp counts the exchanges it completed; the server's
// counters must agree.
func TestPerfdhcpRelayed(t *testing.T) {
	if _, err := exec.LookPath("perfdhcp"); err != nil {
		t.Fatal("perfdhcp is not installed (make deps installs the Debian package kea-admin)")
	}
	srvNs, cliNs := netnstest.New(t, "kfdhcp"), netnstest.New(t, "kfdhcp")
	srvIf, cliIf := veth(t, srvNs, cliNs, "52:54:00:99:00:fe")
	netnstest.Run(t, "ip", "-n", cliNs, "addr", "add", "10.99.0.2/24", "dev", cliIf)

	const machines, exchanges = 200, 300
	srvIP := net.IPv4(10, 99, 0, 1).To4()
	tab := leases.NewTable()
	var macs strings.Builder
	for i := 0; i < machines; i++ {
		mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x99, byte(i >> 8), byte(i)}
		fmt.Fprintln(&macs, mac.String())
		key := fmt.Sprintf("farm/m%d", i)
		tab.Upsert(key, []leases.Lease{{MAC: mac, IP: net.IPv4(10, 99, 1, byte(i)).To4(), Mask: net.CIDRMask(16, 32),
			Router: srvIP, LeaseTime: time.Hour, Machine: key, Pool: "p"}})
	}
	macFile := filepath.Join(t.TempDir(), "macs.txt")
	if err := os.WriteFile(macFile, []byte(macs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ServerID: srvIP, Boot: bootfile.Config{Server: srvIP}}
	s, m := testServer(t, cfg, tab)
	var conn net.PacketConn
	if err := netnstest.Do(srvNs, func() (err error) {
		conns, err := Listen(srvIf, cfg)
		if err == nil {
			conn = conns[0]
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	serve(t, s, conn)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// -l with a server address: perfdhcp relays from 10.99.0.2 (giaddr)
	// and listens on port 67 for the replies. -n bounds the exchanges; -W
	// (microseconds) lets it receive the last replies before it exits,
	// which without it counts the last exchange as dropped.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", cliNs, "perfdhcp", "-4", "-g", "single", "-r", "200", "-n", fmt.Sprint(exchanges),
		"-R", fmt.Sprint(machines), "-M", macFile, "-l", "10.99.0.2", "-d", "2", "-W", "500000", srvIP.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("perfdhcp: %v (exit status 3 means drops; server counted %v offers, %v queue drops, %v malformed)\n%s", err,
			testutil.ToFloat64(m.packets.WithLabelValues("DISCOVER", string(Offered))),
			testutil.ToFloat64(m.packets.WithLabelValues("unknown", string(DroppedQueueFull))),
			testutil.ToFloat64(m.packets.WithLabelValues("unknown", string(Malformed))), out)
	}
	// Two "sent packets" and two "received packets" lines: DISCOVER-OFFER,
	// then REQUEST-ACK. -n is where perfdhcp stops starting exchanges, and
	// at -r's pace it can start a few more in its last tick (303 of 300
	// once): every one sent must be answered, and at least -n were.
	sent, received := perfdhcpCounts(out, "sent packets:"), perfdhcpCounts(out, "received packets:")
	if len(sent) != 2 || len(received) != 2 || sent[0] < exchanges || sent[1] < exchanges ||
		received[0] != sent[0] || received[1] != sent[1] {
		t.Fatalf("perfdhcp sent %v DISCOVERs and REQUESTs and received %v OFFERs and ACKs, want at least %d sent and each answered:\n%s", sent, received, exchanges, out)
	}
	// The server counts a reply after its write returns, so perfdhcp can
	// have the last ACK first: wait for the counts.
	counts := func() (float64, float64) {
		return testutil.ToFloat64(m.packets.WithLabelValues("DISCOVER", string(Offered))),
			testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(Acked)))
	}
	wantO, wantA := float64(sent[0]), float64(sent[1])
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		o, a := counts()
		return o >= wantO && a >= wantA, nil
	})
	if o, a := counts(); o != wantO || a != wantA {
		t.Errorf("server counted %v offers and %v acks, want %v and %v, what perfdhcp sent (%v)", o, a, wantO, wantA, err)
	}
}

// perfdhcpCounts are the numbers of perfdhcp's report lines that start
// with label, in order (-1 for one that is not a number).
func perfdhcpCounts(out []byte, label string) []int {
	var n []int
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), label); ok {
			i, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				i = -1
			}
			n = append(n, i)
		}
	}
	return n
}

// TestProxyNextToAnotherServer runs proxyDHCP mode where it is meant to
// run: on a LAN whose addresses another DHCP server (busybox udhcpd) hands
// out. A PXE client's DISCOVER gets two OFFERs, the address from udhcpd and
// the boot file from kubefarm-pxe; the client's REQUEST names udhcpd, which
// ACKs it while kubefarm-pxe stays silent; with its address configured the
// client asks kubefarm-pxe's boot service (port 4011) and gets the boot
// file, and never an address.
func TestProxyNextToAnotherServer(t *testing.T) {
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Fatal("busybox is not installed (make deps installs busybox-static)")
	}
	lan, other, pxe, cli := netnstest.New(t, "kfdhcp"), netnstest.New(t, "kfdhcp"), netnstest.New(t, "kfdhcp"), netnstest.New(t, "kfdhcp")
	const clientMACs = "52:54:00:97:00:07"
	netnstest.Bridge(t, lan, "br0", "")
	netnstest.Attach(t, lan, "br0", "p-other", other, "eth0", "", "10.97.0.2/24")
	netnstest.Attach(t, lan, "br0", "p-pxe", pxe, "eth0", "", "10.97.0.3/24")
	netnstest.Attach(t, lan, "br0", "p-cli", cli, "eth0", clientMACs, "")
	otherIP, pxeIP := net.IPv4(10, 97, 0, 2).To4(), net.IPv4(10, 97, 0, 3).To4()

	// The other DHCP server.
	dir := t.TempDir()
	conf := filepath.Join(dir, "udhcpd.conf")
	if err := os.WriteFile(conf, []byte("start 10.97.0.100\nend 10.97.0.150\ninterface eth0\n"+
		"lease_file "+filepath.Join(dir, "leases")+"\npidfile "+filepath.Join(dir, "pid")+"\n"+
		"option subnet 255.255.255.0\noption router 10.97.0.1\noption lease 600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	udhcpd := exec.Command("ip", "netns", "exec", other, "busybox", "udhcpd", "-f", conf)
	var udhcpdLog netnstest.LockedBuffer
	udhcpd.Stdout, udhcpd.Stderr = &udhcpdLog, &udhcpdLog
	if err := udhcpd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = udhcpd.Process.Kill()
		_ = udhcpd.Wait()
		if t.Failed() {
			t.Logf("udhcpd:\n%s", udhcpdLog.String())
		}
	})

	// kubefarm-pxe in proxyDHCP mode, knowing the machine.
	hw, _ := net.ParseMAC(clientMACs)
	l := testLease()
	l.MAC, l.IP, l.Mask = hw, net.IPv4(10, 97, 0, 7).To4(), net.CIDRMask(24, 32)
	cfg := Config{ServerID: pxeIP, Boot: bootfile.Config{Server: pxeIP}, ProxyDHCP: true}
	s, m := testServer(t, cfg, tableWith(l))
	var conns []net.PacketConn
	if err := netnstest.Do(pxe, func() (err error) { conns, err = Listen("eth0", cfg); return err }); err != nil {
		t.Fatal(err)
	}
	serve(t, s, conns...)

	// The PXE client: a socket on port 68 bound to its interface.
	var conn net.PacketConn
	if err := netnstest.Do(cli, func() (err error) {
		conn, err = server4.NewIPv4UDPConn("eth0", &net.UDPAddr{Port: ClientPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	recv := func(xid dhcpv4.TransactionID, want func(map[string]*dhcpv4.DHCPv4) bool) map[string]*dhcpv4.DHCPv4 {
		t.Helper()
		got := map[string]*dhcpv4.DHCPv4{}
		buf := make([]byte, 2048)
		deadline := time.Now().Add(15 * time.Second)
		for !want(got) {
			_ = conn.SetReadDeadline(deadline)
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				t.Fatalf("waiting for replies (have %d): %v", len(got), err)
			}
			p, err := dhcpv4.FromBytes(buf[:n])
			if err == nil && p.OpCode == dhcpv4.OpcodeBootReply && p.TransactionID == xid {
				got[from.(*net.UDPAddr).IP.String()] = p
			}
		}
		return got
	}
	pxeOpts := []dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithBroadcast(true), withArch(iana.INTEL_X86PC),
		withVendor("PXEClient:Arch:00000:UNDI:002001")}
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: ServerPort}

	// udhcpd may take a moment to open its socket, and it ARP-probes an
	// address before offering it: DISCOVER until both servers have answered
	// one (a PXE ROM retransmits the same way).
	var offers map[string]*dhcpv4.DHCPv4
	var disc *dhcpv4.DHCPv4
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		disc = request(dhcpv4.MessageTypeDiscover, pxeOpts...)
		disc.TransactionID = dhcpv4.TransactionID{0x97, byte(time.Now().UnixNano()), byte(time.Now().UnixNano() >> 8), 1}
		if _, err := conn.WriteTo(disc.ToBytes(), bcast); err != nil {
			return false, err
		}
		got := map[string]*dhcpv4.DHCPv4{}
		buf := make([]byte, 2048)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		for len(got) < 2 {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return false, nil // retransmit
			}
			if p, err := dhcpv4.FromBytes(buf[:n]); err == nil && p.TransactionID == disc.TransactionID {
				got[from.(*net.UDPAddr).IP.String()] = p
			}
		}
		offers = got
		return true, nil
	})
	if err != nil {
		t.Fatalf("no OFFER from both servers: %v; udhcpd:\n%s", err, udhcpdLog.String())
	}
	addr, boot := offers[otherIP.String()], offers[pxeIP.String()]
	if addr == nil || boot == nil {
		t.Fatalf("offers from %v, want one from udhcpd %s and one from kubefarm-pxe %s", keys(offers), otherIP, pxeIP)
	}
	yiaddr := addr.YourIPAddr.To4()
	if addr.MessageType() != dhcpv4.MessageTypeOffer || yiaddr == nil || yiaddr[3] < 100 || yiaddr[3] > 150 {
		t.Fatalf("udhcpd's offer: %s", addr.Summary())
	}
	if boot.MessageType() != dhcpv4.MessageTypeOffer || !boot.YourIPAddr.IsUnspecified() || boot.BootFileName != bootfile.BinaryBIOS ||
		!boot.ServerIPAddr.Equal(pxeIP) || string(boot.Options.Get(dhcpv4.OptionClassIdentifier)) != "PXEClient" ||
		boot.Options.Has(dhcpv4.OptionIPAddressLeaseTime) || boot.Options.Has(dhcpv4.OptionSubnetMask) {
		t.Fatalf("kubefarm-pxe's proxy offer must carry the boot file and no address or lease: %s", boot.Summary())
	}

	// The client takes udhcpd's address: only udhcpd answers.
	before := testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(IgnoredOtherServer)))
	req := request(dhcpv4.MessageTypeRequest, append(pxeOpts, withSID(otherIP), withReqIP(yiaddr))...)
	req.TransactionID = disc.TransactionID
	if _, err := conn.WriteTo(req.ToBytes(), bcast); err != nil {
		t.Fatal(err)
	}
	acks := recv(req.TransactionID, func(g map[string]*dhcpv4.DHCPv4) bool { return g[otherIP.String()] != nil })
	if a := acks[otherIP.String()]; a.MessageType() != dhcpv4.MessageTypeAck || !a.YourIPAddr.Equal(yiaddr) {
		t.Fatalf("udhcpd's answer to the REQUEST: %s", a.Summary())
	}
	waitFor(t, "kubefarm-pxe to count the REQUEST as another server's", func() bool {
		return testutil.ToFloat64(m.packets.WithLabelValues("REQUEST", string(IgnoredOtherServer))) == before+1
	})
	if p := acks[pxeIP.String()]; p != nil {
		t.Fatalf("kubefarm-pxe answered a REQUEST for udhcpd's address: %s", p.Summary())
	}

	// Configured, the client asks the boot service on port 4011.
	netnstest.Run(t, "ip", "-n", cli, "addr", "add", yiaddr.String()+"/24", "dev", "eth0")
	bootReq := request(dhcpv4.MessageTypeRequest, append(pxeOpts[:1], withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000:UNDI:002001"),
		dhcpv4.WithClientIP(yiaddr), withSID(pxeIP))...)
	if _, err := conn.WriteTo(bootReq.ToBytes(), &net.UDPAddr{IP: pxeIP, Port: PXEProxyPort}); err != nil {
		t.Fatal(err)
	}
	got := recv(bootReq.TransactionID, func(g map[string]*dhcpv4.DHCPv4) bool { return g[pxeIP.String()] != nil })
	if a := got[pxeIP.String()]; a.MessageType() != dhcpv4.MessageTypeAck || a.BootFileName != bootfile.BinaryBIOS ||
		!a.YourIPAddr.IsUnspecified() || !a.ClientIPAddr.Equal(yiaddr) {
		t.Fatalf("boot service answer: %s", a.Summary())
	}
}

func keys(m map[string]*dhcpv4.DHCPv4) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// networkdBin is where Debian installs systemd-networkd, the node image's
// DHCP client after switch_root.
const networkdBin = "/lib/systemd/systemd-networkd"

// networkdLease runs the host's systemd-networkd (the same systemd as the
// node image's Debian) in the client namespace with the node image's own
// network file, its [Match] narrowed to ifName (the file matches every
// physical Ethernet NIC, which a veth is not), and checks the lease networkd
// records: the DNS servers there are what systemd-resolved writes into the
// node's resolv.conf, and so what the kubelet gives CoreDNS as its upstreams.
// networkd runs in a mount namespace of its own with /sys read-only (so it
// does not wait for a udev this test does not run) and a fresh /run/systemd.
func networkdLease(t *testing.T, ns, ifName string, want map[string]string) {
	t.Helper()
	if _, err := os.Stat(networkdBin); err != nil {
		t.Skipf("SKIPPED, NOT PASSED: %s is not installed (apt-get install -y systemd)", networkdBin)
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "images", "node", "rootfs", "etc", "systemd", "network", "10-kubefarm.network"))
	if err != nil {
		t.Fatal(err)
	}
	file, ok := narrowMatch(string(src), ifName)
	if !ok {
		t.Fatalf("the node image's 10-kubefarm.network has no [Match] section to narrow:\n%s", src)
	}
	run := t.TempDir()
	if err := os.WriteFile(filepath.Join(run, "10-kubefarm.network"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
mount -o remount,ro /sys
mount -t tmpfs -o mode=0755 tmpfs /run/systemd
mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/network
mkdir -p /run/systemd/network /run/systemd/netif "$1/netif/links" "$1/netif/leases" "$1/netif/lldp"
cp "$1/10-kubefarm.network" /run/systemd/network/
chown -R systemd-network:systemd-network "$1/netif"
mount --bind "$1/netif" /run/systemd/netif
exec ` + networkdBin
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var log bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sh", "-c", script, "sh", run)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=debug", "SYSTEMD_LOG_TARGET=console")
	lease := runUntilBound(ctx, t, cmd, &log, "systemd-networkd", func() map[string]string {
		return readLease(filepath.Join(run, "netif", "leases"))
	})
	for k, v := range want {
		if got := lease[k]; got != v {
			t.Errorf("systemd-networkd lease %s = %q, want %q", k, got, v)
		}
	}
	if t.Failed() {
		t.Logf("lease %v\nnetworkd:\n%s", lease, log.String())
	}
}

// narrowMatch replaces the [Match] section's lines with Name=ifName.
func narrowMatch(file, ifName string) (string, bool) {
	var out []string
	in, found := false, false
	for _, l := range strings.Split(file, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "[") {
			in = trimmed == "[Match]"
			out = append(out, l)
			if in {
				found = true
				out = append(out, "Name="+ifName)
			}
			continue
		}
		if in && trimmed != "" && !strings.HasPrefix(trimmed, "#") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n"), found
}

// readLease reads the one lease file networkd writes per link (KEY=value
// lines), or nil while there is none.
func readLease(dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil
	}
	env, err := readEnv(filepath.Join(dir, entries[0].Name()))
	if err != nil || env["ADDRESS"] == "" {
		return nil
	}
	return env
}

// runUntilBound starts a real DHCP client (cmd, its output going to log)
// and polls bound until it returns the client's record of its lease; it
// fails the test when the client exits first or ctx ends. The client is
// killed when the test ends.
func runUntilBound(ctx context.Context, t *testing.T, cmd *exec.Cmd, log *bytes.Buffer, name string, bound func() map[string]string) map[string]string {
	t.Helper()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited before binding: %v\n%s", name, err, log.String())
		case <-ctx.Done():
			t.Fatalf("%s did not bind: %s", name, log.String())
		case <-tick.C:
			if got := bound(); got != nil {
				return got
			}
		}
	}
}
