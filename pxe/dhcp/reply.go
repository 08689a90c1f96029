package dhcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

// Ports of RFC 2131 and the PXE specification.
const (
	ServerPort   = 67
	ClientPort   = 68
	PXEProxyPort = 4011
)

// MaxPacket is the largest request accepted: one Ethernet MTU. Anything
// longer is not a DHCP packet a boot ROM sends and is dropped unparsed.
const MaxPacket = 1500

// minMaxMessageSize is the size every DHCP client must accept (RFC 2131).
const minMaxMessageSize = 576

// Config is what Reply and Server need to know about themselves.
type Config struct {
	// ServerID is this server's address on the boot network: option 54,
	// and the identifier REQUESTs are matched against.
	ServerID net.IP
	// Boot says where TFTP and HTTP boot are served.
	Boot bootfile.Config
	// ProxyDHCP: another server owns addresses; answer PXE clients with
	// boot options only (no yiaddr, no lease), also on port 4011.
	ProxyDHCP bool
	// Workers handle packets concurrently (default 2 x GOMAXPROCS).
	Workers int
	// QueueSize bounds the packets waiting for a worker (default 1024).
	QueueSize int
	// Events, when set, records offers, acks, declines and refused relays
	// as Events on the machines (throttled by the implementation).
	Events events.Sink
	// Boots, when set, is told of every offer or ack sent to an iPXE client
	// of a known machine: that machine is booting now, and nothing but the
	// machine can send its DHCP (a pod's packets are routed off its node,
	// never bridged onto the boot network). kubefarm-pxe's HTTP service
	// issues a boot's secret only after that (httpboot.BootWindows).
	Boots BootArmer
	// Dynamic, when set, answers unknown MACs from the catch-all ranges
	// of NodePools that have one (never in proxyDHCP mode), through
	// DynamicWorkers goroutines (default 4) fed by a queue of DynamicQueue
	// parsed requests (default 64). DynamicTimeout (default 3 s) is the
	// deadline of each allocator call's context, the only bound on it.
	Dynamic        Dynamic
	DynamicWorkers int
	DynamicQueue   int
	DynamicTimeout time.Duration
}

// BootArmer learns which machines are booting (see Config.Boots).
type BootArmer interface {
	// Arm: the machine with mac (lower-case colon form) is booting.
	Arm(mac string)
}

// Reply builds the answer to req for a client whose lease is lease (nil when
// the MAC is unknown). It returns a nil reply and one of the Err* sentinels
// when nothing must be sent.
func Reply(req *dhcpv4.DHCPv4, lease *leases.Lease, cfg Config) (*dhcpv4.DHCPv4, error) {
	resp, _, err := decide(context.Background(), req, source{lease: lease}, cfg)
	return resp, err
}

// decide is the answer path's one decision: req, where its lease comes from
// (src: the table's lease of a known machine, or the allocator for an
// unknown MAC) and Config -> the reply, the lease it answers with (for
// events), or an error naming the outcome when nothing is sent.
func decide(ctx context.Context, req *dhcpv4.DHCPv4, src source, cfg Config) (*dhcpv4.DHCPv4, *leases.Lease, error) {
	lease := src.lease
	if err := validate(req); err != nil {
		return nil, lease, err
	}
	if lease == nil && (src.dyn == nil || cfg.ProxyDHCP) {
		return nil, nil, ErrUnknown
	}
	if cfg.ServerID.To4() == nil {
		return nil, lease, fmt.Errorf("server identifier %v is not IPv4", cfg.ServerID)
	}
	// A known machine's lease is checked before anything else; an
	// allocated one as soon as the allocator returns it (src.offer, src.ack).
	if lease != nil {
		if err := usable(req, lease); err != nil {
			return nil, lease, err
		}
	}
	var (
		resp *dhcpv4.DHCPv4
		err  error
	)
	if cfg.ProxyDHCP {
		resp, err = proxyReply(req, lease, cfg)
	} else {
		resp, lease, err = authoritativeReply(ctx, req, src, cfg)
	}
	if err != nil || resp == nil {
		return nil, lease, err
	}
	resp, err = fit(req, resp, lease)
	return resp, lease, err
}

// usable checks a lease before it is answered with: an IPv4 address, and a
// relay (if any) on its subnet.
func usable(req *dhcpv4.DHCPv4, lease *leases.Lease) error {
	if len(lease.IP.To4()) != net.IPv4len {
		return fmt.Errorf("lease of %s has no IPv4 address", req.ClientHWAddr)
	}
	if !relayOnClientSubnet(req, lease) {
		return ErrBadRelay
	}
	return nil
}

// authoritativeReply is the one message-type switch, for known machines
// and unknown MACs alike: src says where the lease comes from and what a
// RELEASE or DECLINE changes.
func authoritativeReply(ctx context.Context, req *dhcpv4.DHCPv4, src source, cfg Config) (*dhcpv4.DHCPv4, *leases.Lease, error) {
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		lease, err := src.offer(ctx, req, cfg.ServerID)
		if err != nil {
			return nil, lease, err
		}
		return withLease(base(req, cfg, dhcpv4.MessageTypeOffer), req, lease, cfg), lease, nil
	case dhcpv4.MessageTypeRequest:
		if forOtherServer(req, cfg) {
			return nil, src.lease, ErrOtherServer
		}
		lease, err := src.ack(ctx, req, requestedIP(req), cfg.ServerID)
		if err != nil {
			if errOutcome(err) == Nak {
				return nak(req, cfg), lease, nil
			}
			return nil, lease, err
		}
		resp := base(req, cfg, dhcpv4.MessageTypeAck)
		resp.ClientIPAddr = req.ClientIPAddr
		return withLease(resp, req, lease, cfg), lease, nil
	case dhcpv4.MessageTypeInform:
		lease := src.lease
		if lease == nil {
			// The allocator keeps no configuration for an address it did
			// not hand out in this exchange.
			return nil, nil, ErrUnknown
		}
		// RFC 2131 4.3.5: configuration only, no yiaddr and no lease time.
		resp := base(req, cfg, dhcpv4.MessageTypeAck)
		resp.ClientIPAddr = req.ClientIPAddr
		addLeaseOptions(resp, lease, false)
		addTagOptions(resp, lease)
		return resp, lease, nil
	case dhcpv4.MessageTypeRelease:
		if forOtherServer(req, cfg) {
			return nil, src.lease, ErrOtherServer
		}
		return nil, src.lease, src.release(ctx, req)
	case dhcpv4.MessageTypeDecline:
		if forOtherServer(req, cfg) {
			return nil, src.lease, ErrOtherServer
		}
		return nil, src.lease, src.decline(ctx, req)
	default:
		return nil, src.lease, ErrNotAnswered
	}
}

// withLease completes an OFFER or ACK with the lease: yiaddr, network
// options and lease time, boot file, tag options.
func withLease(resp, req *dhcpv4.DHCPv4, lease *leases.Lease, cfg Config) *dhcpv4.DHCPv4 {
	resp.YourIPAddr = lease.IP.To4()
	addLeaseOptions(resp, lease, true)
	addBootOptions(req, resp, cfg, true)
	addTagOptions(resp, lease)
	return resp
}

// requestedIP is the address a REQUEST asks for: SELECTING and INIT-REBOOT
// name it in option 50; RENEWING and REBINDING carry it in ciaddr (RFC 2131
// 4.3.2). nil when it names none.
func requestedIP(req *dhcpv4.DHCPv4) net.IP {
	want := req.RequestedIPAddress()
	if isZero(want) {
		want = req.ClientIPAddr
	}
	if isZero(want) {
		return nil
	}
	return want.To4()
}

// proxyReply answers as a proxyDHCP server (PXE specification 2.1, 2.2.5):
// boot options only, because another server owns the addresses.
func proxyReply(req *dhcpv4.DHCPv4, lease *leases.Lease, cfg Config) (*dhcpv4.DHCPv4, error) {
	vc := req.ClassIdentifier()
	if !strings.HasPrefix(vc, "PXEClient") && !strings.HasPrefix(vc, bootfile.VendorHTTPClient) {
		return nil, ErrNotPXE
	}
	var mt dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		mt = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if forOtherServer(req, cfg) {
			return nil, ErrOtherServer
		}
		// The boot server REQUEST (port 4011) comes from a client that got
		// its address elsewhere; one without ciaddr is an address request
		// for the other server.
		if isZero(req.ClientIPAddr) {
			return nil, ErrNotAnswered
		}
		mt = dhcpv4.MessageTypeAck
	default:
		return nil, ErrNotAnswered
	}
	if bootfile.Decide(bootRequest(req), cfg.Boot).Protocol == bootfile.None {
		return nil, ErrNotPXE
	}
	resp := base(req, cfg, mt)
	if mt == dhcpv4.MessageTypeAck {
		resp.ClientIPAddr = req.ClientIPAddr
	}
	// PXE discovery control (vendor option 43, sub-option 6, bit 3): the
	// boot file is in this reply, do not multicast for boot servers.
	resp.Options[dhcpv4.OptionVendorSpecificInformation.Code()] = pxeDiscoveryControl()
	// addBootOptions echoes the client machine identifier (option 97).
	addBootOptions(req, resp, cfg, false)
	if resp.Options.Get(dhcpv4.OptionClassIdentifier) == nil {
		resp.Options[dhcpv4.OptionClassIdentifier.Code()] = []byte("PXEClient")
	}
	return resp, nil
}

func validate(req *dhcpv4.DHCPv4) error {
	switch {
	case req == nil:
		return fmt.Errorf("%w: no packet", ErrMalformed)
	case req.OpCode != dhcpv4.OpcodeBootRequest:
		return fmt.Errorf("%w: op %d is not BOOTREQUEST", ErrMalformed, req.OpCode)
	case req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6:
		return fmt.Errorf("%w: not an Ethernet client", ErrMalformed)
	case req.MessageType() == dhcpv4.MessageTypeNone:
		return fmt.Errorf("%w: no DHCP message type (BOOTP is not served)", ErrMalformed)
	case len(req.ClientIPAddr.To4()) != 4 || len(req.GatewayIPAddr.To4()) != 4:
		return fmt.Errorf("%w: bad ciaddr or giaddr", ErrMalformed)
	}
	return nil
}

// base is the reply skeleton of RFC 2131 table 3: op, htype, xid, flags,
// giaddr and chaddr from the request; message type and server identifier;
// client identifier (RFC 6842) and relay agent information (RFC 3046)
// echoed.
func base(req *dhcpv4.DHCPv4, cfg Config, mt dhcpv4.MessageType) *dhcpv4.DHCPv4 {
	resp := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootReply,
		HWType:        req.HWType,
		TransactionID: req.TransactionID,
		Flags:         req.Flags,
		ClientIPAddr:  net.IPv4zero.To4(),
		YourIPAddr:    net.IPv4zero.To4(),
		ServerIPAddr:  net.IPv4zero.To4(),
		GatewayIPAddr: req.GatewayIPAddr.To4(),
		ClientHWAddr:  req.ClientHWAddr,
		Options:       make(dhcpv4.Options, 16),
	}
	resp.Options[dhcpv4.OptionDHCPMessageType.Code()] = []byte{byte(mt)}
	resp.Options[dhcpv4.OptionServerIdentifier.Code()] = cfg.ServerID.To4()
	for _, c := range []dhcpv4.OptionCode{dhcpv4.OptionClientIdentifier, dhcpv4.OptionRelayAgentInformation} {
		if v := req.Options.Get(c); v != nil {
			resp.Options[c.Code()] = v
		}
	}
	return resp
}

func nak(req *dhcpv4.DHCPv4, cfg Config) *dhcpv4.DHCPv4 {
	resp := base(req, cfg, dhcpv4.MessageTypeNak)
	resp.Options[dhcpv4.OptionMessage.Code()] = []byte("requested address is not this machine's")
	if !isZero(req.GatewayIPAddr) {
		// RFC 2131 4.1: through a relay, a NAK is broadcast on the
		// client's segment because the client's address is wrong.
		resp.SetBroadcast()
	}
	return resp
}

// forOtherServer: a REQUEST (or RELEASE/DECLINE) naming another server in
// option 54 means the client chose that server's offer.
func forOtherServer(req *dhcpv4.DHCPv4, cfg Config) bool {
	sid := req.Options.Get(dhcpv4.OptionServerIdentifier)
	return sid != nil && !net.IP(sid).Equal(cfg.ServerID)
}

// addLeaseOptions adds the network configuration of the lease.
func addLeaseOptions(resp *dhcpv4.DHCPv4, l *leases.Lease, withLeaseTime bool) {
	o := resp.Options
	if len(l.Mask) == net.IPv4len {
		o[dhcpv4.OptionSubnetMask.Code()] = []byte(l.Mask)
	}
	if len(l.Router.To4()) == net.IPv4len {
		o[dhcpv4.OptionRouter.Code()] = l.Router.To4()
	}
	if len(l.DNS) > 0 {
		dns := make([]byte, 0, 4*len(l.DNS))
		for _, d := range l.DNS {
			if d4 := d.To4(); d4 != nil {
				dns = append(dns, d4...)
			}
		}
		if len(dns) > 0 {
			o[dhcpv4.OptionDomainNameServer.Code()] = dns
		}
	}
	if l.Domain != "" {
		o[dhcpv4.OptionDomainName.Code()] = []byte(l.Domain)
	}
	if l.Hostname != "" {
		o[dhcpv4.OptionHostName.Code()] = []byte(l.Hostname)
	}
	if withLeaseTime {
		secs := l.LeaseTime / time.Second
		if secs <= 0 {
			secs = leases.DefaultLeaseTime / time.Second
		}
		if secs > 0xfffffffe { // 0xffffffff would mean "infinite"
			secs = 0xfffffffe
		}
		o[dhcpv4.OptionIPAddressLeaseTime.Code()] = binary.BigEndian.AppendUint32(nil, uint32(secs))
	}
}

// addTagOptions adds the options of the machine's tags. They never replace
// an option this server set: the API forbids those codes, and this guards
// against a lease built some other way.
func addTagOptions(resp *dhcpv4.DHCPv4, l *leases.Lease) {
	for _, o := range l.ExtraOptions {
		if o.Code == 0 || o.Code == 255 || len(o.Value) == 0 {
			continue
		}
		if _, taken := resp.Options[o.Code]; !taken {
			resp.Options[o.Code] = o.Value
		}
	}
}

// addBootOptions adds the boot file bootfile.Decide picks. In authoritative
// mode a client without a boot file still gets its address (it may be an
// OS-level DHCP client on a booted machine), so this adds nothing then.
func addBootOptions(req, resp *dhcpv4.DHCPv4, cfg Config, echoPXEClient bool) {
	r := bootfile.Decide(bootRequest(req), cfg.Boot)
	o := resp.Options
	switch r.Protocol {
	case bootfile.TFTP:
		resp.ServerIPAddr = r.NextServer.To4()
		o[dhcpv4.OptionTFTPServerName.Code()] = []byte(r.NextServer.String())
	case bootfile.HTTP:
	default:
		return
	}
	// The header's file field holds 127 bytes and a NUL; longer URLs
	// travel in option 67 only rather than truncated.
	if len(r.File) < 128 {
		resp.BootFileName = r.File
	}
	o[dhcpv4.OptionBootfileName.Code()] = []byte(r.File)
	if uuid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); uuid != nil {
		// PXE 2.1 table 2-1: firmware checks that the client machine
		// identifier comes back.
		o[dhcpv4.OptionClientMachineIdentifier.Code()] = uuid
	}
	switch {
	case r.VendorClass != "":
		o[dhcpv4.OptionClassIdentifier.Code()] = []byte(r.VendorClass)
	case echoPXEClient && r.Protocol == bootfile.TFTP && strings.HasPrefix(req.ClassIdentifier(), "PXEClient"):
		// Some PXE ROMs ignore offers that do not say PXEClient. Saying
		// it makes this a PXE server's reply (PXE 2.1, 2.2.4), which
		// then also needs option 43: without it EDK2 files the reply as
		// a BINL offer and asks port 4011 for the boot file, where an
		// authoritative server does not listen.
		o[dhcpv4.OptionClassIdentifier.Code()] = []byte("PXEClient")
		o[dhcpv4.OptionVendorSpecificInformation.Code()] = pxeDiscoveryControl()
	}
	// A client already running iPXE gets no "PXEClient": iPXE takes a
	// PXEClient offer without siaddr for a ProxyDHCP offer and sends a
	// ProxyDHCPREQUEST to port 4011 first. As the authoritative server
	// tells it not to wait for ProxyDHCP offers either (iPXE waits 2 s
	// for them after an offer without PXEClient): its boot file is here.
	if echoPXEClient && r.Protocol == bootfile.HTTP && r.VendorClass == "" && isIPXE(req) {
		o[optionIPXEEncap] = ipxeNoPXEDHCP()
	}
}

// pxeDiscoveryControl is vendor option 43 of a PXE reply: sub-option 6
// (PXE_DISCOVERY_CONTROL) = 8, bit 3: use the boot file in this reply, no
// boot server discovery and no boot menu (PXE 2.1, table 2-1).
func pxeDiscoveryControl() []byte { return []byte{6, 1, 8, 255} }

// optionIPXEEncap is iPXE's encapsulated option block (175); its
// sub-option 0xb0 (no-pxedhcp) = 1 makes iPXE skip waiting for ProxyDHCP
// offers and ignore PXE options (iPXE's include/ipxe/dhcp.h).
const optionIPXEEncap = 175

func ipxeNoPXEDHCP() []byte { return []byte{0xb0, 1, 1} }

// isIPXE reports whether req's user class (option 77) names iPXE, read as
// bootRequest reads it but without the rest of the request: the DHCP
// server asks this of every offer and ack it sends (Server.armBoot).
func isIPXE(req *dhcpv4.DHCPv4) bool {
	raw := req.Options.Get(dhcpv4.OptionUserClassInformation)
	if raw == nil {
		return false
	}
	if string(raw) == bootfile.UserClassIPXE {
		return true
	}
	for _, c := range req.UserClass() {
		if c == bootfile.UserClassIPXE {
			return true
		}
	}
	return false
}

// bootRequest extracts the facts bootfile.Decide needs.
func bootRequest(req *dhcpv4.DHCPv4) bootfile.Request {
	br := bootfile.Request{MAC: req.ClientHWAddr, VendorClass: req.ClassIdentifier()}
	if raw := req.Options.Get(dhcpv4.OptionClientSystemArchitectureType); raw != nil {
		// A list of 16-bit types; an odd length is malformed and ignored.
		if len(raw) >= 2 && len(raw)%2 == 0 {
			br.HasArch = true
			br.Arches = make([]uint16, 0, len(raw)/2)
			for i := 0; i+1 < len(raw); i += 2 {
				br.Arches = append(br.Arches, binary.BigEndian.Uint16(raw[i:]))
			}
		}
	}
	if raw := req.Options.Get(dhcpv4.OptionUserClassInformation); raw != nil {
		// iPXE sends a bare string, RFC 3004 clients length-prefixed ones;
		// accept both.
		br.UserClasses = append(req.UserClass(), string(raw))
	}
	return br
}

// maxMessageSize is what the client accepts: option 57 when larger than
// 576, capped at one Ethernet MTU.
func maxMessageSize(req *dhcpv4.DHCPv4) int {
	size := minMaxMessageSize
	if v, err := req.MaxMessageSize(); err == nil && int(v) > size {
		size = int(v)
	}
	return min(size, MaxPacket)
}

// fit drops tag options when the reply would exceed the client's maximum
// message size: the address and boot file matter more than extras.
func fit(req, resp *dhcpv4.DHCPv4, l *leases.Lease) (*dhcpv4.DHCPv4, error) {
	limit := maxMessageSize(req)
	if wireSize(resp) <= limit {
		return resp, nil
	}
	for _, o := range l.ExtraOptions {
		// Only remove what addTagOptions put there (it stores the lease's own
		// slice), never an option of the same code the server set itself.
		if v, ok := resp.Options[o.Code]; ok && len(v) > 0 && len(v) == len(o.Value) && &v[0] == &o.Value[0] {
			delete(resp.Options, o.Code)
		}
	}
	if wireSize(resp) <= limit {
		return resp, nil
	}
	return nil, ErrReplyTooLong
}

// wireSize is the serialized length of a packet without serializing it:
// the 240-byte header and cookie, each option split into 255-byte pieces
// (RFC 3396), and the end option.
func wireSize(p *dhcpv4.DHCPv4) int {
	n := 240 + 1
	for _, v := range p.Options {
		if len(v) == 0 {
			n += 2
			continue
		}
		n += len(v) + 2*((len(v)+254)/255)
	}
	return max(n, 300) // BOOTP minimum, padded by ToBytes
}

// Destination is where a reply goes (RFC 2131 section 4.1). peer is the
// request's source; it matters only for unicast to a configured client,
// whose source port is answered.
func Destination(req, resp *dhcpv4.DHCPv4, peer *net.UDPAddr) *net.UDPAddr {
	if !isZero(req.GatewayIPAddr) {
		return &net.UDPAddr{IP: req.GatewayIPAddr.To4(), Port: ServerPort}
	}
	if resp.MessageType() == dhcpv4.MessageTypeNak {
		return &net.UDPAddr{IP: net.IPv4bcast.To4(), Port: ClientPort}
	}
	if !isZero(req.ClientIPAddr) {
		port := ClientPort
		if peer != nil && peer.IP.Equal(req.ClientIPAddr) && peer.Port > 0 {
			port = peer.Port
		}
		return &net.UDPAddr{IP: req.ClientIPAddr.To4(), Port: port}
	}
	// Broadcast flag set, or a client without an address: sending unicast
	// to yiaddr would need an ARP entry for an address not yet configured;
	// RFC 2131 allows broadcasting instead.
	return &net.UDPAddr{IP: net.IPv4bcast.To4(), Port: ClientPort}
}

// relayOnClientSubnet checks giaddr against the machine's subnet. A relay
// agent puts in giaddr its own address on the interface the client's
// broadcast arrived on (RFC 2131 4.1, RFC 1542), so a genuine relayed
// request for a machine carries an address of the machine's subnet.
// Replies go to giaddr, port 67: without this check anyone could spoof
// giaddr and make every replica send replies to an arbitrary host, a
// reflector for the price of one small packet per known MAC. A lease with
// no mask (not built from a pool) cannot be checked and is not relayed.
func relayOnClientSubnet(req *dhcpv4.DHCPv4, lease *leases.Lease) bool {
	g := req.GatewayIPAddr.To4()
	if isZero(g) {
		return true
	}
	if len(lease.Mask) != net.IPv4len {
		return false
	}
	return g.Mask(lease.Mask).Equal(lease.IP.To4().Mask(lease.Mask))
}

func isZero(ip net.IP) bool { return ip == nil || ip.IsUnspecified() }
