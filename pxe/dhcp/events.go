package dhcp

import (
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/kubefarm/kubefarm/pxe/events"
)

// recordEvent turns the answer to a known machine's packet into an event:
// offers and acks (Normal), declines and relays from outside the machine's
// subnet (Warning). Everything else is only counted.
func (s *Server) recordEvent(a answer) {
	e := s.cfg.Events
	if e == nil || a.lease == nil || a.lease.Machine == "" {
		return
	}
	m := a.lease.Machine
	switch a.outcome {
	case Offered:
		if e.Due(m, events.ReasonOffered, "") {
			e.Normal(m, events.ReasonOffered, "", fmt.Sprintf("offered %s to %s%s%s", a.lease.IP, a.lease.MAC, bootFileNote(a.resp), relayNote(a.req)))
		}
	case Acked:
		if e.Due(m, events.ReasonAcked, "") {
			e.Normal(m, events.ReasonAcked, "", fmt.Sprintf("acked %s to %s for %s%s%s", a.lease.IP, a.lease.MAC, a.lease.LeaseTime, bootFileNote(a.resp), relayNote(a.req)))
		}
	case Declined:
		if e.Due(m, events.ReasonDeclined, "") {
			e.Warning(m, events.ReasonDeclined, "", fmt.Sprintf("%s declined %s (DHCPDECLINE): another host answers ARP for it; the machine cannot get its address until that host is removed",
				a.lease.MAC, a.lease.IP))
		}
	case IgnoredBadRelay:
		if e.Due(m, events.ReasonRefused, "dhcp-relay") {
			e.Warning(m, events.ReasonRefused, "dhcp-relay", fmt.Sprintf("ignored a %s for %s relayed through %s, which is outside the machine's subnet %s/%d",
				a.typ, a.lease.MAC, a.req.GatewayIPAddr, a.lease.IP.Mask(a.lease.Mask), maskBits(a.lease.Mask)))
		}
	}
}

func bootFileNote(resp *dhcpv4.DHCPv4) string {
	if resp == nil {
		return ""
	}
	if f := resp.Options.Get(dhcpv4.OptionBootfileName); len(f) > 0 {
		return fmt.Sprintf(", boot file %q", string(f))
	}
	return ""
}

func relayNote(req *dhcpv4.DHCPv4) string {
	if req == nil || isZero(req.GatewayIPAddr) {
		return ""
	}
	return " via relay " + req.GatewayIPAddr.String()
}

func maskBits(m net.IPMask) int { ones, _ := m.Size(); return ones }
