package tftp

import "strconv"

// RFC limits of the negotiated options.
const (
	defaultBlockSize = 512   // RFC 1350, when blksize is not negotiated
	minBlockSize     = 8     // RFC 2348
	maxBlockSizeRFC  = 65464 // RFC 2348
	maxWindowSizeRFC = 65535 // RFC 7440
)

// terms are what a transfer runs with once options are negotiated.
type terms struct {
	blockSize  int
	windowSize int
	// oack is the option acknowledgement to send first, in the order the
	// client asked; nil when no option was granted (RFC 1350 transfer: the
	// first packet is DATA 1).
	oack []option
}

// limits are the server's caps on what a client may ask.
type limits struct {
	// maxBlockSize: Config.MaxBlockSize, lowered to what fits the
	// receiving interface's MTU.
	maxBlockSize int
	// maxWindowSize: Config.MaxWindowSize; 1 turns windowsize off.
	maxWindowSize int
}

// negotiate is the pure decision on a request's options for a file of size
// bytes. Options the server does not know (timeout among them: the server
// keeps its own retransmission timeout) or whose value is out of the RFC's
// range are left out of the OACK, which RFC 2347 lets a server do; the
// client then runs without them.
func negotiate(opts []option, size int64, lim limits) terms {
	t := terms{blockSize: defaultBlockSize, windowSize: 1}
	for _, o := range opts {
		switch o.name {
		case "blksize":
			v, err := strconv.Atoi(o.value)
			if err != nil || v < minBlockSize || v > maxBlockSizeRFC {
				continue
			}
			t.blockSize = min(v, lim.maxBlockSize)
			t.oack = append(t.oack, option{o.name, strconv.Itoa(t.blockSize)})
		case "tsize":
			// A reading client sends 0 (RFC 2349); the server answers with
			// the size. A value that is not a number is not the option.
			if _, err := strconv.ParseUint(o.value, 10, 63); err != nil {
				continue
			}
			t.oack = append(t.oack, option{o.name, strconv.FormatInt(size, 10)})
		case "windowsize":
			v, err := strconv.Atoi(o.value)
			if err != nil || v < 1 || v > maxWindowSizeRFC || lim.maxWindowSize <= 1 {
				// With windowsize off the option is left out, which RFC
				// 7440 reads as a window of one.
				continue
			}
			t.windowSize = min(v, lim.maxWindowSize)
			t.oack = append(t.oack, option{o.name, strconv.Itoa(t.windowSize)})
		}
	}
	return t
}

// mtuBlockSize is the largest block that fits an IPv4 packet of mtu bytes
// unfragmented: IP (20), UDP (8) and TFTP (4) headers before the data.
func mtuBlockSize(mtu int) int {
	return mtu - 20 - 8 - 4
}
