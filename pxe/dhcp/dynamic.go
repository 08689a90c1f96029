package dhcp

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/kubefarm/kubefarm/pxe/leases"
)

// Dynamic hands out addresses of a NodePool's catch-all range to MACs no
// Machine has; *dynamic.Allocator implements it. Its leases live in the
// API, so every call may write there: it is kept off the static path (see
// Server.Serve) and bounded by DynamicTimeout.
type Dynamic interface {
	// Offer returns the lease to offer mac: its current one, or a new
	// claim. relay is giaddr (nil when not relayed), local this server's
	// address; they choose the pool.
	// hostname is the client's option 12, untrusted (the allocator
	// validates it before storing it).
	Offer(ctx context.Context, mac net.HardwareAddr, hostname string, relay, local net.IP) (*leases.Lease, error)
	// Ack confirms ip for mac, or fails with an error wrapping
	// ErrDynamicNotLeased.
	Ack(ctx context.Context, mac net.HardwareAddr, ip net.IP, hostname string, relay, local net.IP) (*leases.Lease, error)
	// Release gives mac's lease on ip back.
	Release(ctx context.Context, mac net.HardwareAddr, ip net.IP) error
	// Decline records that mac found ip in use by another host: the
	// address is withheld from everyone for a while.
	Decline(ctx context.Context, mac net.HardwareAddr, ip net.IP) error
}

// DynamicErrors are the allocator's sentinels the server tells apart; the
// caller sets them from package dynamic (which this package must not
// import: dynamic builds on leases, as this package does).
type DynamicErrors struct {
	// NoPool: no catch-all range serves the network (ignore the MAC).
	// RangeFull: no free address (ignore, counted). NotLeased: the
	// requested address is someone else's (NAK). NoRecord: the MAC holds
	// no lease on it (stay silent, RFC 2131 4.3.2).
	NoPool, RangeFull, NotLeased, NoRecord error
}

// Defaults of the dynamic path.
const (
	DefaultDynamicWorkers = 4
	DefaultDynamicQueue   = 64
	// DefaultDynamicTimeout is below a DHCP client's first retransmission
	// (4 s, RFC 2131 4.1): an answer later than that answers nobody.
	DefaultDynamicTimeout = 3 * time.Second
)

// dynamicJob is a packet for an unknown MAC waiting for the allocator. It
// owns a copy of the datagram: the reader's buffer is recycled at once.
type dynamicJob struct {
	pkt  []byte
	peer *net.UDPAddr
	conn net.PacketConn
	at   time.Time
}

// wantsDynamic says whether an unknown MAC's packet goes to the allocator.
// proxyDHCP never allocates: another server owns the addresses there.
func (s *Server) wantsDynamic(req *dhcpv4.DHCPv4) bool {
	if s.cfg.Dynamic == nil || s.cfg.ProxyDHCP {
		return false
	}
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeDecline:
		return true
	}
	return false
}

// allocate answers an unknown MAC from the dynamic range: the API side of
// handle, run by a dynamic worker (or inline by HandlePacket).
func (s *Server) allocate(ctx context.Context, a answer, peer *net.UDPAddr) answer {
	req := a.req
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DynamicTimeout)
	defer cancel()
	relay := req.GatewayIPAddr.To4()
	if isZero(relay) {
		relay = nil
	}
	mac := req.ClientHWAddr
	var (
		lease *leases.Lease
		err   error
	)
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		lease, err = s.cfg.Dynamic.Offer(ctx, mac, req.HostName(), relay, s.cfg.ServerID)
	case dhcpv4.MessageTypeRequest:
		if forOtherServer(req, s.cfg) {
			a.outcome = IgnoredOtherServer
			return a
		}
		want := req.RequestedIPAddress()
		if isZero(want) {
			want = req.ClientIPAddr
		}
		if isZero(want) {
			a.outcome = Malformed
			return a
		}
		lease, err = s.cfg.Dynamic.Ack(ctx, mac, want.To4(), req.HostName(), relay, s.cfg.ServerID)
		if err != nil && errors.Is(err, s.cfg.DynamicErrors.NotLeased) {
			resp := nak(req, s.cfg)
			a.resp, a.outcome = resp, Nak
			a.out, a.dst = resp.ToBytes(), Destination(req, resp, peer)
			return a
		}
	case dhcpv4.MessageTypeRelease:
		if forOtherServer(req, s.cfg) {
			a.outcome = IgnoredOtherServer
			return a
		}
		if err := s.cfg.Dynamic.Release(ctx, mac, req.ClientIPAddr.To4()); err != nil {
			s.log.Error(err, "releasing a dynamic lease", "mac", mac.String(), "ip", req.ClientIPAddr.String())
			a.outcome = Failed
			return a
		}
		a.outcome = Released
		return a
	case dhcpv4.MessageTypeDecline:
		if forOtherServer(req, s.cfg) {
			a.outcome = IgnoredOtherServer
			return a
		}
		// RFC 2131 4.4.4: the declined address is in option 50.
		ip := req.RequestedIPAddress().To4()
		if isZero(ip) {
			a.outcome = Malformed
			return a
		}
		if err := s.cfg.Dynamic.Decline(ctx, mac, ip); err != nil {
			s.log.Error(err, "recording a declined dynamic lease", "mac", mac.String(), "ip", ip.String())
			a.outcome = Failed
			return a
		}
		s.log.Info("client declined its dynamic address: another host uses it; withheld for one lease time", "mac", mac.String(), "ip", ip.String())
		a.outcome = Declined
		return a
	}
	switch {
	case err == nil:
	case errors.Is(err, s.cfg.DynamicErrors.NoPool), errors.Is(err, s.cfg.DynamicErrors.NoRecord):
		a.outcome = IgnoredUnknown
		return a
	case errors.Is(err, s.cfg.DynamicErrors.RangeFull):
		s.log.Info("dynamic range full; unknown MAC not answered", "mac", mac.String(), "reason", err.Error())
		a.outcome = IgnoredRangeFull
		return a
	default:
		s.log.Error(err, "dynamic lease", "mac", mac.String(), "type", a.typ)
		a.outcome = Failed
		return a
	}
	return s.reply(a, lease, peer)
}

// dynamicWork runs one queued job to its reply.
func (s *Server) dynamicWork(ctx context.Context, j dynamicJob) {
	a := s.handle(j.pkt, j.peer)
	if a.dynamic {
		a = s.allocate(ctx, a, j.peer)
	}
	s.finish(a, j.conn, j.at)
}
