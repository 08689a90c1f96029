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

// OutcomeError is a reason a request gets no reply, or a NAK: it names its
// outcome itself. Reply's sentinels below are OutcomeErrors, and so are the
// errors of the catch-all allocator (package pxe/dynamic), so the server
// tells every reason apart by its outcome and imports no allocator. An
// error that is not one (or wraps none) is a failure.
type OutcomeError struct {
	Outcome Outcome
	Msg     string
}

func (e *OutcomeError) Error() string { return e.Msg }

// Reasons Reply sends nothing. Callers tell them apart with errors.Is.
var (
	ErrMalformed   error = &OutcomeError{Malformed, "malformed request"}
	ErrUnknown     error = &OutcomeError{IgnoredUnknown, "unknown client"}
	ErrOtherServer error = &OutcomeError{IgnoredOtherServer, "request is for another server"}
	ErrNotPXE      error = &OutcomeError{IgnoredNotPXE, "proxyDHCP: not a PXE client or no boot file for it"}
	ErrBadRelay    error = &OutcomeError{IgnoredBadRelay, "relayed through an address outside the machine's subnet"}
	ErrReleased    error = &OutcomeError{Released, "client released its lease"}
	ErrDeclined    error = &OutcomeError{Declined, "client declined its address"}
	ErrNotAnswered error = &OutcomeError{Ignored, "message type not answered"}
	// errNak: the address a REQUEST names is not the client's (Nak).
	errNak          error = &OutcomeError{Nak, "requested address is not this client's"}
	ErrReplyTooLong       = errors.New("reply does not fit the client's maximum message size")
)

// outcomeOf maps Reply's result to the metric outcome.
func outcomeOf(req, resp *dhcpv4.DHCPv4, err error) Outcome {
	if err == nil && resp != nil {
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
	}
	return errOutcome(err)
}

// errOutcome is the outcome err names; Failed when it names none.
func errOutcome(err error) Outcome {
	var oe *OutcomeError
	if errors.As(err, &oe) {
		return oe.Outcome
	}
	return Failed
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
