package dhcp

import "github.com/insomniacslk/dhcp/dhcpv4"

// Overload policy. A DISCOVER starts an exchange; a REQUEST finishes one.
// When workers fall behind, answering new DISCOVERs only creates offers whose
// REQUESTs will be dropped in turn, and completed leases per second fall as
// the offered rate rises. So past half the queue, new DISCOVERs are shed at
// the socket (before any parsing) and the rest of the queue is kept for
// REQUESTs: under overload the server completes the exchanges it started.
const discoverShare = 2 // DISCOVERs may fill 1/discoverShare of the queue

// shed says whether a packet of type mt is dropped before it reaches a queue
// holding queued of capacity packets. Only DISCOVERs are shed; everything
// else may fill the queue, past which the reader drops it as queue-full.
func shed(mt dhcpv4.MessageType, queued, capacity int) bool {
	// A queue of one still takes a DISCOVER when it is empty.
	return mt == dhcpv4.MessageTypeDiscover && queued >= max(1, capacity/discoverShare)
}

// peekMessageType finds option 53 in a raw BOOTP packet without decoding
// it: a bounded walk over the options, for the socket reader's shedding
// decision. Anything it cannot read is reported as not found and left to
// the full parser.
func peekMessageType(pkt []byte) (dhcpv4.MessageType, bool) {
	const optionsStart = 240 // fixed BOOTP header + magic cookie
	if len(pkt) <= optionsStart || pkt[236] != 99 || pkt[237] != 130 || pkt[238] != 83 || pkt[239] != 99 {
		return 0, false
	}
	for i := optionsStart; i < len(pkt); {
		code := pkt[i]
		switch code {
		case 0: // pad
			i++
			continue
		case 255: // end
			return 0, false
		}
		if i+1 >= len(pkt) {
			return 0, false
		}
		length := int(pkt[i+1])
		if i+2+length > len(pkt) {
			return 0, false
		}
		if code == 53 && length == 1 {
			return dhcpv4.MessageType(pkt[i+2]), true
		}
		i += 2 + length
	}
	return 0, false
}
