package dhcp

import (
	"errors"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Outcome is what happened to one packet; it is the "result" label of the
// packet counter, so the set is fixed.
type Outcome string

const (
	Offered            Outcome = "offered"
	Acked              Outcome = "acked"
	Informed           Outcome = "informed"
	Nak                Outcome = "nak"
	Released           Outcome = "released"
	Declined           Outcome = "declined"
	IgnoredUnknown     Outcome = "ignored_unknown"
	IgnoredOtherServer Outcome = "ignored_other_server"
	IgnoredNotPXE      Outcome = "ignored_not_pxe"
	IgnoredBadRelay    Outcome = "ignored_bad_relay"
	IgnoredRangeFull   Outcome = "ignored_range_full"
	Ignored            Outcome = "ignored"
	DroppedQueueFull   Outcome = "dropped_queue_full"
	DroppedOverload    Outcome = "dropped_overload"
	Malformed          Outcome = "malformed"
	Failed             Outcome = "error"
)

// Reasons Reply sends nothing. Callers tell them apart with errors.Is.
var (
	ErrMalformed    = errors.New("malformed request")
	ErrUnknown      = errors.New("unknown client")
	ErrOtherServer  = errors.New("request is for another server")
	ErrNotPXE       = errors.New("proxyDHCP: not a PXE client or no boot file for it")
	ErrBadRelay     = errors.New("relayed through an address outside the machine's subnet")
	ErrReleased     = errors.New("client released its lease")
	ErrDeclined     = errors.New("client declined its address")
	ErrNotAnswered  = errors.New("message type not answered")
	ErrReplyTooLong = errors.New("reply does not fit the client's maximum message size")
)

// outcomeOf maps Reply's result to the metric outcome.
func outcomeOf(req, resp *dhcpv4.DHCPv4, err error) Outcome {
	switch {
	case err == nil && resp != nil:
		switch resp.MessageType() {
		case dhcpv4.MessageTypeOffer:
			return Offered
		case dhcpv4.MessageTypeNak:
			return Nak
		case dhcpv4.MessageTypeAck:
			if req.MessageType() == dhcpv4.MessageTypeInform {
				return Informed
			}
			return Acked
		}
		return Failed
	case errors.Is(err, ErrMalformed):
		return Malformed
	case errors.Is(err, ErrUnknown):
		return IgnoredUnknown
	case errors.Is(err, ErrOtherServer):
		return IgnoredOtherServer
	case errors.Is(err, ErrNotPXE):
		return IgnoredNotPXE
	case errors.Is(err, ErrBadRelay):
		return IgnoredBadRelay
	case errors.Is(err, ErrReleased):
		return Released
	case errors.Is(err, ErrDeclined):
		return Declined
	case errors.Is(err, ErrNotAnswered):
		return Ignored
	default:
		return Failed
	}
}

// typeLabel bounds the "type" label to the eight DHCP message types.
func typeLabel(req *dhcpv4.DHCPv4) string {
	if req == nil {
		return "unknown"
	}
	return messageTypeLabel(req.MessageType())
}

// messageTypeLabel bounds the label set to the types DHCPv4 defines.
func messageTypeLabel(t dhcpv4.MessageType) string {
	switch t {
	case dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeDecline,
		dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak, dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeInform:
		return t.String()
	default:
		return "unknown"
	}
}
