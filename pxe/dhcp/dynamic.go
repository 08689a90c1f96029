package dhcp

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/kubefarm/kubefarm/pxe/leases"
)

// Dynamic hands out addresses of a NodePool's catch-all range to MACs no
// Machine has; *dynamic.Allocator implements it. Its leases live in the
// API, so every call may write there: it is kept off the static path (see
// Server.Serve) and each call's context ends after DynamicTimeout.
//
// An error that says what to do with the packet is an *OutcomeError (or
// wraps one): package dynamic's ErrNotLeased names Nak (the server answers
// DHCPNAK), ErrNoPool and ErrNoRecord IgnoredUnknown, ErrRangeFull
// IgnoredRangeFull. Any other error is a failure (counted as "error").
type Dynamic interface {
	// Offer returns the lease to offer mac: its current one, or a new
	// claim. relay is giaddr (nil when not relayed), local this server's
	// address; they choose the pool.
	// hostname is the client's option 12, untrusted (the allocator
	// validates it before storing it).
	Offer(ctx context.Context, mac net.HardwareAddr, hostname string, relay, local net.IP) (*leases.Lease, error)
	// Ack confirms ip for mac; an address that is not mac's fails with an
	// error of outcome Nak.
	Ack(ctx context.Context, mac net.HardwareAddr, ip net.IP, hostname string, relay, local net.IP) (*leases.Lease, error)
	// Release gives mac's lease on ip back.
	Release(ctx context.Context, mac net.HardwareAddr, ip net.IP) error
	// Decline records that mac found ip in use by another host: the
	// address is withheld from everyone for a while.
	Decline(ctx context.Context, mac net.HardwareAddr, ip net.IP) error
}

// Defaults of the dynamic path.
const (
	DefaultDynamicWorkers = 4
	DefaultDynamicQueue   = 64
	// DefaultDynamicTimeout is the deadline of each allocator call's
	// context, and the only bound on it (the allocator adds none). It is
	// below a DHCP client's first retransmission (4 s, RFC 2131 4.1): an
	// answer later than that answers nobody.
	DefaultDynamicTimeout = 3 * time.Second
)

// source is where the answer path takes a client's lease from: the lease
// table's entry of a known machine (lease), or for an unknown MAC the
// allocator (dyn). It is what differs between the two; authoritativeReply's
// one switch does the rest.
type source struct {
	lease *leases.Lease
	dyn   Dynamic
}

// offer is the lease a DISCOVER is offered. local is this server's
// address (ServerID): without a relay, it chooses the allocator's pool.
func (s source) offer(ctx context.Context, req *dhcpv4.DHCPv4, local net.IP) (*leases.Lease, error) {
	if s.lease != nil {
		return s.lease, nil
	}
	l, err := s.dyn.Offer(ctx, req.ClientHWAddr, req.HostName(), relayOf(req), local)
	return allocated(req, l, err)
}

// ack is the lease a REQUEST for want is acknowledged with; an error of
// outcome Nak when want is not the client's.
func (s source) ack(ctx context.Context, req *dhcpv4.DHCPv4, want, local net.IP) (*leases.Lease, error) {
	if s.lease != nil {
		if want == nil || !want.Equal(s.lease.IP) {
			return s.lease, errNak
		}
		return s.lease, nil
	}
	if want == nil {
		return nil, fmt.Errorf("%w: REQUEST names no address", ErrMalformed)
	}
	l, err := s.dyn.Ack(ctx, req.ClientHWAddr, want, req.HostName(), relayOf(req), local)
	return allocated(req, l, err)
}

// release frees the lease a RELEASE gives back (ciaddr) and returns
// ErrReleased, or why it could not. A known machine's lease is static:
// nothing to free, but the release is counted.
func (s source) release(ctx context.Context, req *dhcpv4.DHCPv4) error {
	if s.lease == nil {
		if err := s.dyn.Release(ctx, req.ClientHWAddr, req.ClientIPAddr.To4()); err != nil {
			return err
		}
	}
	return ErrReleased
}

// decline records a DECLINE of the address in option 50 (RFC 2131 4.4.4)
// and returns ErrDeclined, or why it could not. A known machine keeps its
// address: offering it a different one would break its identity, so the
// operator must remove the host that squats on it, which the declined
// counter and the machine's event surface. An allocated address is withheld
// from everyone for a lease time.
func (s source) decline(ctx context.Context, req *dhcpv4.DHCPv4) error {
	if s.lease != nil {
		return ErrDeclined
	}
	ip := req.RequestedIPAddress().To4()
	if isZero(ip) {
		return fmt.Errorf("%w: DECLINE names no address", ErrMalformed)
	}
	if err := s.dyn.Decline(ctx, req.ClientHWAddr, ip); err != nil {
		return err
	}
	return ErrDeclined
}

// allocated checks a lease the allocator returned as a table's is checked.
func allocated(req *dhcpv4.DHCPv4, l *leases.Lease, err error) (*leases.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l, usable(req, l)
}

// relayOf is giaddr, nil when the request was not relayed.
func relayOf(req *dhcpv4.DHCPv4) net.IP {
	if r := req.GatewayIPAddr.To4(); !isZero(r) {
		return r
	}
	return nil
}

// wantsDynamic says whether an unknown MAC's request goes to the allocator.
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

// allocate answers an unknown MAC's request with the allocator as its lease
// source, within DynamicTimeout: run by a dynamic worker (or inline by
// HandlePacket).
func (s *Server) allocate(ctx context.Context, a answer, peer *net.UDPAddr) answer {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DynamicTimeout)
	defer cancel()
	return s.reply(ctx, a, source{dyn: s.cfg.Dynamic}, peer)
}
