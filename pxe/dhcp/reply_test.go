package dhcp

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

var (
	serverID  = net.IPv4(10, 28, 0, 2).To4()
	otherID   = net.IPv4(10, 28, 0, 250).To4()
	clientMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	leaseIP   = net.IPv4(10, 28, 0, 11).To4()
	relayIP   = net.IPv4(10, 28, 200, 1).To4() // a relay on the machines' subnet (10.28.0.0/16)
	foreignIP = net.IPv4(192, 0, 2, 7).To4()   // an address no relay of the subnet has
)

func testConfig() Config {
	return Config{ServerID: serverID, Boot: bootfile.Config{Server: serverID, HTTPPort: 8080}}
}

func proxyConfig() Config { c := testConfig(); c.ProxyDHCP = true; return c }

func testLease() *leases.Lease {
	return &leases.Lease{
		MAC: clientMAC, IP: leaseIP, Mask: net.CIDRMask(16, 32), Router: net.IPv4(10, 28, 0, 1).To4(),
		DNS: []net.IP{net.IPv4(10, 28, 0, 53).To4(), net.IPv4(1, 1, 1, 1).To4()}, Domain: "farm.example",
		Hostname: "m1", LeaseTime: 30 * time.Minute, Pool: "rack1", Machine: "farm/rack1-m1",
		ExtraOptions: []leases.Option{{Code: 42, Value: []byte{10, 28, 0, 1}}},
	}
}

// request builds a client packet with a fixed xid so replies are comparable.
func request(mt dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	p, err := dhcpv4.New(append([]dhcpv4.Modifier{
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{1, 2, 3, 4}),
		dhcpv4.WithHwAddr(clientMAC), dhcpv4.WithMessageType(mt),
	}, mods...)...)
	if err != nil {
		panic(err)
	}
	return p
}

func withArch(a ...iana.Arch) dhcpv4.Modifier { return dhcpv4.WithOption(dhcpv4.OptClientArch(a...)) }
func withVendor(v string) dhcpv4.Modifier     { return dhcpv4.WithOption(dhcpv4.OptClassIdentifier(v)) }
func withSID(ip net.IP) dhcpv4.Modifier       { return dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ip)) }
func withReqIP(ip net.IP) dhcpv4.Modifier     { return dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)) }
func withUUID(id []byte) dhcpv4.Modifier {
	return dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, id))
}

// clientUUID is an option 97 value: type 0, then the 16-byte UUID.
var clientUUID = []byte{0, 0x8e, 0x1d, 0x3b, 0x44, 0x52, 0x10, 0x4c, 0x3a, 0x9e, 0x0f, 0x51, 0x63, 0x77, 0x00, 0x12, 0x01}

// ipxeNoProxyWait is iPXE's option 175 with sub-option 0xb0 (no-pxedhcp)
// = 1: do not wait for ProxyDHCP offers.
var ipxeNoProxyWait = []byte{0xb0, 1, 1}

// pxeNoDiscovery is option 43 with PXE_DISCOVERY_CONTROL (sub-option 6)
// = 8: boot the file in this reply, no boot server discovery.
var pxeNoDiscovery = []byte{6, 1, 8, 255}

// check is an assertion on a reply.
type check func(t *testing.T, r *dhcpv4.DHCPv4)

func msgType(mt dhcpv4.MessageType) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if r.MessageType() != mt {
			t.Errorf("message type %s, want %s", r.MessageType(), mt)
		}
	}
}

func yiaddr(ip net.IP) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if !r.YourIPAddr.Equal(ip) {
			t.Errorf("yiaddr %s, want %s", r.YourIPAddr, ip)
		}
	}
}

func ciaddr(ip net.IP) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if !r.ClientIPAddr.Equal(ip) {
			t.Errorf("ciaddr %s, want %s", r.ClientIPAddr, ip)
		}
	}
}

func siaddr(ip net.IP) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if !r.ServerIPAddr.Equal(ip) {
			t.Errorf("siaddr %s, want %s", r.ServerIPAddr, ip)
		}
	}
}

func opt(code uint8, want []byte) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		got, ok := r.Options[code]
		if want == nil {
			if ok {
				t.Errorf("option %d present (%q), want absent", code, got)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Errorf("option %d = %q, want %q", code, got, want)
		}
	}
}

func file(f string) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if r.BootFileName != f {
			t.Errorf("file %q, want %q", r.BootFileName, f)
		}
		if f != "" && string(r.Options[67]) != f {
			t.Errorf("option 67 %q, want %q", r.Options[67], f)
		}
	}
}

func broadcastFlag(want bool) check {
	return func(t *testing.T, r *dhcpv4.DHCPv4) {
		if r.IsBroadcast() != want {
			t.Errorf("broadcast flag %v, want %v", r.IsBroadcast(), want)
		}
	}
}

// fullLease checks the authoritative network options of testLease.
var fullLease = []check{
	opt(1, []byte{255, 255, 0, 0}), opt(3, []byte{10, 28, 0, 1}), opt(6, []byte{10, 28, 0, 53, 1, 1, 1, 1}),
	opt(15, []byte("farm.example")), opt(12, []byte("m1")), opt(51, []byte{0, 0, 0x07, 0x08}), opt(54, serverID),
	opt(42, []byte{10, 28, 0, 1}),
}

func TestReply(t *testing.T) {
	pxeBIOS := []dhcpv4.Modifier{withArch(iana.INTEL_X86PC), withVendor("PXEClient:Arch:00000:UNDI:002001")}
	bigLease := testLease()
	bigLease.ExtraOptions = []leases.Option{{Code: 200, Value: bytes.Repeat([]byte{'x'}, 255)}, {Code: 201, Value: bytes.Repeat([]byte{'y'}, 255)}}

	tests := []struct {
		name    string
		req     *dhcpv4.DHCPv4
		lease   *leases.Lease
		cfg     Config
		wantErr error
		checks  []check
	}{
		// Authoritative mode.
		{name: "discover bios pxe -> offer with tftp boot", req: request(dhcpv4.MessageTypeDiscover, pxeBIOS...), lease: testLease(), cfg: testConfig(),
			checks: append([]check{msgType(dhcpv4.MessageTypeOffer), yiaddr(leaseIP), ciaddr(net.IPv4zero), siaddr(serverID),
				file("undionly.kpxe"), opt(66, []byte("10.28.0.2")), opt(60, []byte("PXEClient")), opt(43, pxeNoDiscovery), opt(97, nil)}, fullLease...)},
		// EDK2 (OVMF) files a PXEClient offer without option 43 as a BINL
		// offer and asks port 4011 for the boot file; sub-option 6 = 8
		// makes it a PXE offer whose boot file is used as is.
		{name: "discover x86-64 uefi pxe -> tftp with pxe discovery control and uuid echoed", req: request(dhcpv4.MessageTypeDiscover,
			withArch(iana.EFI_BC), withVendor("PXEClient:Arch:00007:UNDI:003000"), withUUID(clientUUID)), lease: testLease(), cfg: testConfig(),
			checks: append([]check{msgType(dhcpv4.MessageTypeOffer), yiaddr(leaseIP), file("ipxe.efi"), siaddr(serverID), opt(60, []byte("PXEClient")),
				opt(43, pxeNoDiscovery), opt(97, clientUUID)}, fullLease...)},
		{name: "discover x86-64 uefi", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.EFI_X86_64), withVendor("PXEClient:Arch:00007")), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), file("ipxe.efi"), siaddr(serverID), opt(43, pxeNoDiscovery), opt(175, nil)}},
		{name: "discover pxe arch without PXEClient vendor class -> no option 60 or 43", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.EFI_BC)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), file("ipxe.efi"), siaddr(serverID), opt(60, nil), opt(43, nil)}},
		{name: "discover uefi http boot", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.EFI_X86_64_HTTP), withVendor("HTTPClient:Arch:00016:UNDI:003001"), withUUID(clientUUID)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), yiaddr(leaseIP), file("http://10.28.0.2:8080/ipxe/ipxe.efi"), opt(60, []byte("HTTPClient")), opt(66, nil), siaddr(net.IPv4zero),
				opt(43, nil), opt(97, clientUUID)}},
		// iPXE sends PXEClient too, but takes a PXEClient offer without
		// siaddr for a ProxyDHCP offer and asks port 4011 before booting:
		// its script URL comes without option 60 and 43.
		{name: "discover from iPXE -> script url, not a PXE offer", req: request(dhcpv4.MessageTypeDiscover, append(pxeBIOS, dhcpv4.WithUserClass("iPXE", false), withUUID(clientUUID))...), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), file("http://10.28.0.2:8080/boot/52:54:00:12:34:56.ipxe"), siaddr(net.IPv4zero), opt(60, nil), opt(43, nil), opt(97, clientUUID),
				opt(175, ipxeNoProxyWait)}},
		{name: "request from iPXE -> ack with script url, not a PXE ack", req: request(dhcpv4.MessageTypeRequest, append(pxeBIOS, dhcpv4.WithUserClass("iPXE", false), withSID(serverID), withReqIP(leaseIP))...),
			lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(leaseIP), file("http://10.28.0.2:8080/boot/52:54:00:12:34:56.ipxe"), opt(60, nil), opt(43, nil), opt(175, ipxeNoProxyWait)}},
		{name: "discover from iPXE, rfc 3004 user class", req: request(dhcpv4.MessageTypeDiscover, dhcpv4.WithUserClass("iPXE", true)), lease: testLease(), cfg: testConfig(),
			checks: []check{file("http://10.28.0.2:8080/boot/52:54:00:12:34:56.ipxe")}},
		{name: "discover without arch -> address only", req: request(dhcpv4.MessageTypeDiscover), lease: testLease(), cfg: testConfig(),
			checks: append([]check{msgType(dhcpv4.MessageTypeOffer), yiaddr(leaseIP), file(""), opt(67, nil), opt(66, nil), opt(60, nil), opt(43, nil)}, fullLease...)},
		{name: "discover unknown arch -> address only", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.Arch(2))), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), yiaddr(leaseIP), file(""), opt(67, nil)}},
		{name: "discover unknown mac", req: request(dhcpv4.MessageTypeDiscover, pxeBIOS...), cfg: testConfig(), wantErr: ErrUnknown},
		{name: "discover echoes client id and relay info, keeps giaddr and flags", req: request(dhcpv4.MessageTypeDiscover,
			dhcpv4.WithRelay(relayIP), dhcpv4.WithBroadcast(true), dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{1, 0x52, 0x54, 0, 0x12, 0x34, 0x56})),
			dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 3, 'p', 'o', 'r'}))), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), opt(61, []byte{1, 0x52, 0x54, 0, 0x12, 0x34, 0x56}), opt(82, []byte{1, 3, 'p', 'o', 'r'}),
				broadcastFlag(true), func(t *testing.T, r *dhcpv4.DHCPv4) {
					if !r.GatewayIPAddr.Equal(relayIP) || r.TransactionID != (dhcpv4.TransactionID{1, 2, 3, 4}) || r.OpCode != dhcpv4.OpcodeBootReply {
						t.Errorf("giaddr %s xid %s op %s", r.GatewayIPAddr, r.TransactionID, r.OpCode)
					}
				}}},
		{name: "request selecting -> ack", req: request(dhcpv4.MessageTypeRequest, append(pxeBIOS, withSID(serverID), withReqIP(leaseIP))...), lease: testLease(), cfg: testConfig(),
			checks: append([]check{msgType(dhcpv4.MessageTypeAck), yiaddr(leaseIP), file("undionly.kpxe"), opt(60, []byte("PXEClient")), opt(43, pxeNoDiscovery)}, fullLease...)},
		{name: "request selecting uefi pxe -> ack with pxe discovery control", req: request(dhcpv4.MessageTypeRequest,
			withArch(iana.EFI_BC), withVendor("PXEClient:Arch:00007:UNDI:003000"), withUUID(clientUUID), withSID(serverID), withReqIP(leaseIP)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(leaseIP), file("ipxe.efi"), opt(60, []byte("PXEClient")), opt(43, pxeNoDiscovery), opt(97, clientUUID)}},
		{name: "request init-reboot without server id -> ack", req: request(dhcpv4.MessageTypeRequest, withReqIP(leaseIP)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(leaseIP)}},
		{name: "request renewing by ciaddr -> ack", req: request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(leaseIP)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(leaseIP), ciaddr(leaseIP)}},
		{name: "discover relayed from outside the machine's subnet is ignored", req: request(dhcpv4.MessageTypeDiscover,
			append(pxeBIOS, dhcpv4.WithRelay(foreignIP))...), lease: testLease(), cfg: testConfig(), wantErr: ErrBadRelay},
		{name: "request relayed from outside the machine's subnet is ignored", req: request(dhcpv4.MessageTypeRequest,
			withSID(serverID), withReqIP(leaseIP), dhcpv4.WithRelay(foreignIP)), lease: testLease(), cfg: testConfig(), wantErr: ErrBadRelay},
		{name: "proxyDHCP relayed from outside the machine's subnet is ignored", req: request(dhcpv4.MessageTypeDiscover,
			append(pxeBIOS, dhcpv4.WithRelay(foreignIP))...), lease: testLease(), cfg: proxyConfig(), wantErr: ErrBadRelay},
		{name: "relayed lease without a mask cannot be checked and is ignored", req: request(dhcpv4.MessageTypeDiscover,
			append(pxeBIOS, dhcpv4.WithRelay(relayIP))...), lease: func() *leases.Lease { l := testLease(); l.Mask = nil; return l }(),
			cfg: testConfig(), wantErr: ErrBadRelay},
		{name: "request for another server is ignored", req: request(dhcpv4.MessageTypeRequest, withSID(otherID), withReqIP(leaseIP)), lease: testLease(), cfg: testConfig(), wantErr: ErrOtherServer},
		{name: "request wrong address -> nak", req: request(dhcpv4.MessageTypeRequest, withSID(serverID), withReqIP(net.IPv4(10, 28, 0, 99))), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeNak), yiaddr(net.IPv4zero), opt(51, nil), opt(1, nil), opt(67, nil), opt(54, serverID), broadcastFlag(false)}},
		{name: "request wrong ciaddr -> nak", req: request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(net.IPv4(10, 28, 0, 99))), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeNak)}},
		{name: "request naming no address -> nak", req: request(dhcpv4.MessageTypeRequest), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeNak)}},
		{name: "relayed nak sets broadcast", req: request(dhcpv4.MessageTypeRequest, dhcpv4.WithRelay(relayIP), withReqIP(net.IPv4(10, 28, 0, 99))), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeNak), broadcastFlag(true)}},
		{name: "request unknown mac", req: request(dhcpv4.MessageTypeRequest, withReqIP(leaseIP)), cfg: testConfig(), wantErr: ErrUnknown},
		{name: "inform -> ack without address or lease time", req: request(dhcpv4.MessageTypeInform, dhcpv4.WithClientIP(leaseIP)), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(net.IPv4zero), ciaddr(leaseIP), opt(51, nil), opt(1, []byte{255, 255, 0, 0}), opt(12, []byte("m1")), opt(67, nil)}},
		{name: "inform from a pxe client -> no pxe options", req: request(dhcpv4.MessageTypeInform, append(pxeBIOS, dhcpv4.WithClientIP(leaseIP), withUUID(clientUUID))...), lease: testLease(), cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), opt(67, nil), opt(60, nil), opt(43, nil), opt(97, nil)}},
		{name: "release", req: request(dhcpv4.MessageTypeRelease, dhcpv4.WithClientIP(leaseIP), withSID(serverID)), lease: testLease(), cfg: testConfig(), wantErr: ErrReleased},
		{name: "release for another server", req: request(dhcpv4.MessageTypeRelease, withSID(otherID)), lease: testLease(), cfg: testConfig(), wantErr: ErrOtherServer},
		{name: "decline", req: request(dhcpv4.MessageTypeDecline, withSID(serverID), withReqIP(leaseIP)), lease: testLease(), cfg: testConfig(), wantErr: ErrDeclined},
		{name: "decline for another server", req: request(dhcpv4.MessageTypeDecline, withSID(otherID)), lease: testLease(), cfg: testConfig(), wantErr: ErrOtherServer},
		{name: "server message types are not answered", req: request(dhcpv4.MessageTypeOffer), lease: testLease(), cfg: testConfig(), wantErr: ErrNotAnswered},
		{name: "bootreply op is malformed", req: func() *dhcpv4.DHCPv4 {
			r := request(dhcpv4.MessageTypeDiscover)
			r.OpCode = dhcpv4.OpcodeBootReply
			return r
		}(), lease: testLease(), cfg: testConfig(), wantErr: ErrMalformed},
		{name: "no message type (bootp) is malformed", req: func() *dhcpv4.DHCPv4 {
			r := request(dhcpv4.MessageTypeDiscover)
			r.Options.Del(dhcpv4.OptionDHCPMessageType)
			return r
		}(), lease: testLease(), cfg: testConfig(), wantErr: ErrMalformed},
		{name: "non-ethernet is malformed", req: request(dhcpv4.MessageTypeDiscover, dhcpv4.WithHwAddr(net.HardwareAddr{1, 2, 3})), lease: testLease(), cfg: testConfig(), wantErr: ErrMalformed},
		{name: "nil request is malformed", req: nil, lease: testLease(), cfg: testConfig(), wantErr: ErrMalformed},
		{name: "tag options dropped when the reply would not fit 576 bytes", req: request(dhcpv4.MessageTypeDiscover, pxeBIOS...), lease: bigLease, cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), opt(200, nil), opt(201, nil), file("undionly.kpxe"), opt(12, []byte("m1"))}},
		{name: "tag options kept when the client accepts large replies", req: request(dhcpv4.MessageTypeDiscover, append(pxeBIOS, dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(1500)))...), lease: bigLease, cfg: testConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), opt(200, bytes.Repeat([]byte{'x'}, 255)), opt(201, bytes.Repeat([]byte{'y'}, 255))}},
		{name: "tag options never override server options", req: request(dhcpv4.MessageTypeDiscover), lease: func() *leases.Lease {
			l := testLease()
			l.ExtraOptions = []leases.Option{{Code: 12, Value: []byte("evil")}}
			return l
		}(), cfg: testConfig(), checks: []check{opt(12, []byte("m1"))}},
		{name: "bad server id", req: request(dhcpv4.MessageTypeDiscover), lease: testLease(), cfg: Config{}, wantErr: errAny},

		// proxyDHCP mode.
		{name: "proxy discover pxe -> boot-only offer", req: request(dhcpv4.MessageTypeDiscover, append(pxeBIOS,
			dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})))...),
			lease: testLease(), cfg: proxyConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), yiaddr(net.IPv4zero), siaddr(serverID), file("undionly.kpxe"), opt(60, []byte("PXEClient")),
				opt(43, pxeNoDiscovery), opt(97, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), opt(54, serverID),
				opt(51, nil), opt(1, nil), opt(3, nil), opt(6, nil), opt(12, nil)}},
		{name: "proxy discover http boot", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.EFI_ARM64_HTTP), withVendor("HTTPClient:Arch:00019")), lease: testLease(), cfg: proxyConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), yiaddr(net.IPv4zero), file("http://10.28.0.2:8080/ipxe/ipxe-arm64.efi"), opt(60, []byte("HTTPClient"))}},
		// In proxy mode the address server's offer decides whether iPXE
		// waits for ProxyDHCP: never tell it not to.
		{name: "proxy discover from iPXE -> script url, PXEClient, no iPXE options", req: request(dhcpv4.MessageTypeDiscover, append(pxeBIOS, dhcpv4.WithUserClass("iPXE", false))...), lease: testLease(), cfg: proxyConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeOffer), yiaddr(net.IPv4zero), file("http://10.28.0.2:8080/boot/52:54:00:12:34:56.ipxe"), opt(60, []byte("PXEClient")), opt(43, pxeNoDiscovery), opt(175, nil)}},
		{name: "proxy ignores non-pxe clients", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.INTEL_X86PC)), lease: testLease(), cfg: proxyConfig(), wantErr: ErrNotPXE},
		{name: "proxy ignores pxe clients it has no boot file for", req: request(dhcpv4.MessageTypeDiscover, withArch(iana.Arch(2)), withVendor("PXEClient:Arch:00002")), lease: testLease(), cfg: proxyConfig(), wantErr: ErrNotPXE},
		{name: "proxy ignores unknown macs", req: request(dhcpv4.MessageTypeDiscover, pxeBIOS...), cfg: proxyConfig(), wantErr: ErrUnknown},
		{name: "proxy port 4011 request -> ack with boot file", req: request(dhcpv4.MessageTypeRequest, append(pxeBIOS, dhcpv4.WithClientIP(net.IPv4(192, 168, 1, 50)), withSID(serverID))...),
			lease: testLease(), cfg: proxyConfig(),
			checks: []check{msgType(dhcpv4.MessageTypeAck), yiaddr(net.IPv4zero), ciaddr(net.IPv4(192, 168, 1, 50)), file("undionly.kpxe"), opt(51, nil)}},
		{name: "proxy ignores requests to the address server", req: request(dhcpv4.MessageTypeRequest, append(pxeBIOS, withSID(otherID), withReqIP(leaseIP))...), lease: testLease(), cfg: proxyConfig(), wantErr: ErrOtherServer},
		{name: "proxy ignores init-reboot requests", req: request(dhcpv4.MessageTypeRequest, append(pxeBIOS, withReqIP(leaseIP))...), lease: testLease(), cfg: proxyConfig(), wantErr: ErrNotAnswered},
		{name: "proxy ignores release", req: request(dhcpv4.MessageTypeRelease, pxeBIOS...), lease: testLease(), cfg: proxyConfig(), wantErr: ErrNotAnswered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := Reply(tt.req, tt.lease, tt.cfg)
			if tt.wantErr != nil {
				if resp != nil {
					t.Fatalf("got a reply %s, want none", resp.Summary())
				}
				if tt.wantErr == errAny {
					if err == nil {
						t.Fatal("want an error")
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.checks {
				c(t, resp)
			}
			// Every reply must survive the wire: serialize, parse, compare.
			wire := resp.ToBytes()
			if len(wire) > maxMessageSize(tt.req) {
				t.Errorf("reply is %d bytes, more than the client's %d", len(wire), maxMessageSize(tt.req))
			}
			if wireSize(resp) != len(wire) {
				t.Errorf("wireSize %d, serialized %d", wireSize(resp), len(wire))
			}
			back, err := dhcpv4.FromBytes(wire)
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
			for _, c := range tt.checks {
				c(t, back)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestOutcomeOf(t *testing.T) {
	inform := request(dhcpv4.MessageTypeInform)
	disc := request(dhcpv4.MessageTypeDiscover)
	mk := func(mt dhcpv4.MessageType) *dhcpv4.DHCPv4 { return request(mt) }
	tests := []struct {
		req, resp *dhcpv4.DHCPv4
		err       error
		want      Outcome
	}{
		{disc, mk(dhcpv4.MessageTypeOffer), nil, Offered},
		{disc, mk(dhcpv4.MessageTypeAck), nil, Acked},
		{inform, mk(dhcpv4.MessageTypeAck), nil, Informed},
		{disc, mk(dhcpv4.MessageTypeNak), nil, Nak},
		{disc, mk(dhcpv4.MessageTypeDiscover), nil, Failed},
		{disc, nil, ErrUnknown, IgnoredUnknown},
		{disc, nil, ErrOtherServer, IgnoredOtherServer},
		{disc, nil, ErrNotPXE, IgnoredNotPXE},
		{disc, nil, ErrReleased, Released},
		{disc, nil, ErrDeclined, Declined},
		{disc, nil, ErrNotAnswered, Ignored},
		{disc, nil, ErrMalformed, Malformed},
		{disc, nil, errors.New("boom"), Failed},
	}
	for _, tt := range tests {
		if got := outcomeOf(tt.req, tt.resp, tt.err); got != tt.want {
			t.Errorf("%v/%v: got %s want %s", tt.resp, tt.err, got, tt.want)
		}
	}
	if typeLabel(nil) != "unknown" || typeLabel(request(dhcpv4.MessageType(99))) != "unknown" || typeLabel(disc) != "DISCOVER" {
		t.Error("typeLabel does not bound the label set")
	}
}

func TestDestination(t *testing.T) {
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: 68}
	offer := request(dhcpv4.MessageTypeOffer)
	nakResp := request(dhcpv4.MessageTypeNak)
	clientIP := net.IPv4(10, 28, 0, 11)
	tests := []struct {
		name      string
		req, resp *dhcpv4.DHCPv4
		peer      *net.UDPAddr
		want      *net.UDPAddr
	}{
		{"relayed goes to giaddr:67", request(dhcpv4.MessageTypeDiscover, dhcpv4.WithRelay(relayIP)), offer, nil, &net.UDPAddr{IP: relayIP, Port: 67}},
		{"relayed nak goes to giaddr:67", request(dhcpv4.MessageTypeRequest, dhcpv4.WithRelay(relayIP)), nakResp, nil, &net.UDPAddr{IP: relayIP, Port: 67}},
		{"nak is broadcast", request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(clientIP)), nakResp, nil, bcast},
		{"ciaddr is unicast to 68", request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(clientIP)), offer, nil, &net.UDPAddr{IP: clientIP, Port: 68}},
		{"ciaddr answers the client's source port", request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(clientIP)), offer,
			&net.UDPAddr{IP: clientIP, Port: 4011}, &net.UDPAddr{IP: clientIP, Port: 4011}},
		{"peer port ignored when peer is not ciaddr", request(dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(clientIP)), offer,
			&net.UDPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 999}, &net.UDPAddr{IP: clientIP, Port: 68}},
		{"broadcast flag", request(dhcpv4.MessageTypeDiscover, dhcpv4.WithBroadcast(true)), offer, nil, bcast},
		{"no address, no flag: broadcast", request(dhcpv4.MessageTypeDiscover), offer, nil, bcast},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Destination(tt.req, tt.resp, tt.peer)
			if !got.IP.Equal(tt.want.IP) || got.Port != tt.want.Port {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}
