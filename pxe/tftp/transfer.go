package tftp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Transfer failures, as the log and the error packet name them.
var (
	errClientAbort = errors.New("client ended the transfer")
	errGaveUp      = errors.New("no acknowledgement after every retry")
	errFileChanged = errors.New("file changed during the transfer")
)

// packetConn is what a transfer sends and receives on: transferConn, or a
// test's lossy double.
type packetConn interface {
	send(b []byte) error
	recv(b []byte, timeout time.Duration) (int, error)
}

// transfer sends one file to one client. It owns no goroutine and no
// socket: run drives it on the caller's goroutine over conn.
type transfer struct {
	conn    packetConn
	file    io.ReaderAt
	size    int64
	terms   terms
	timeout time.Duration
	retries int
	now     func() time.Time // time.Now; a test's clock

	out []byte // one DATA packet: 4 header bytes and a block
	in  []byte // one reply
	// ahead holds the DATA packet of block aheadBlock (0: none), read
	// from the file while the client still had the window before it: when
	// the window's ACK comes, the next block goes out without a file read
	// on the way (a lockstep transfer waits that turn-around per block).
	ahead      []byte
	aheadBlock int64
}

func newTransfer(conn packetConn, file io.ReaderAt, size int64, t terms, timeout time.Duration, retries int) *transfer {
	return &transfer{
		conn: conn, file: file, size: size, terms: t, timeout: timeout, retries: retries, now: time.Now,
		out:   make([]byte, 4+t.blockSize),
		ahead: make([]byte, 4+t.blockSize),
		// An ACK or an ERROR; a longer packet is read truncated and
		// ignored by parseReply unless it starts as one of them.
		in: make([]byte, 4+maxOptionLen*4+1),
	}
}

// blocks is how many DATA packets the file takes: the last one is shorter
// than a block, empty when the size is a multiple of the block size.
func (x *transfer) blocks() int64 {
	return x.size/int64(x.terms.blockSize) + 1
}

// run sends the OACK (if any options were granted) and then every block,
// a window at a time (RFC 7440; a window of one is RFC 1350's lockstep),
// and returns the bytes the client acknowledged.
//
// After sending a window it waits for an ACK:
//   - an ACK of a block of the window moves the window's start past it and
//     the next
//     window is sent from there: the blocks after the acknowledged one are
//     sent again, which is how RFC 7440 recovers a block lost inside a
//     window (the client acknowledges the last block it holds in order);
//   - a repeated ACK of the block before the window is not answered. It
//     is what a client sends for every block it did not expect: a
//     duplicate of a block it holds (after a resend, or a DATA delayed) or
//     a block past a gap. Answering it sends a window that the client
//     mostly holds already, whose blocks draw more repeated ACKs, and every
//     later window goes out twice (the Sorcerer's Apprentice of RFC 1350,
//     with windows). So the loss of a window's first block costs a
//     timeout, as a lost packet does in lockstep; a block lost later in
//     the window is recovered at once by the ACK of the one before it;
//   - nothing within the timeout resends the window, up to retries times
//     in a row;
//   - an ERROR from the client ends the transfer; any other packet is
//     ignored without extending the wait.
func (x *transfer) run() (int64, error) {
	if x.terms.oack != nil {
		if err := x.negotiate(); err != nil {
			return 0, err
		}
	}
	total := x.blocks()
	base := int64(1) // first block not yet acknowledged
	for base <= total {
		end := min(base+int64(x.terms.windowSize)-1, total)
		if err := x.sendWindow(base, end); err != nil {
			return x.acked(base), err
		}
		if end < total {
			if err := x.readAhead(end + 1); err != nil {
				return x.acked(base), err
			}
		}
		acked, err := x.await(base, end)
		if err != nil {
			return x.acked(base), err
		}
		base = acked + 1
	}
	return x.size, nil
}

// acked is the bytes acknowledged when base is the first block not yet
// acknowledged.
func (x *transfer) acked(base int64) int64 {
	return min((base-1)*int64(x.terms.blockSize), x.size)
}

// negotiate sends the OACK until the client acknowledges it with ACK 0.
func (x *transfer) negotiate() error {
	oack := appendOACK(make([]byte, 0, 64), x.terms.oack)
	for try := 0; ; try++ {
		if err := x.conn.send(oack); err != nil {
			return err
		}
		deadline := x.now().Add(x.timeout)
		for {
			r, err := x.receive(deadline)
			if errors.Is(err, errTimeout) {
				break
			}
			if err != nil {
				return err
			}
			if r.abort {
				return fmt.Errorf("%w: %q", errClientAbort, r.msg)
			}
			if r.ack && r.block == 0 {
				return nil
			}
		}
		if try == x.retries {
			return errGaveUp
		}
	}
}

// sendWindow sends blocks first to last.
func (x *transfer) sendWindow(first, last int64) error {
	for b := first; b <= last; b++ {
		if err := x.sendBlock(b); err != nil {
			return err
		}
	}
	return nil
}

// sendBlock sends block b (numbered from 1), read ahead or from the file.
func (x *transfer) sendBlock(b int64) error {
	if b == x.aheadBlock {
		x.out, x.ahead = x.ahead, x.out
		x.aheadBlock = 0
	} else if err := x.read(x.out, b); err != nil {
		return err
	}
	return x.conn.send(x.out[:4+x.blockLen(b)])
}

// readAhead reads block b into the read-ahead buffer.
func (x *transfer) readAhead(b int64) error {
	x.aheadBlock = 0
	if err := x.read(x.ahead, b); err != nil {
		return err
	}
	x.aheadBlock = b
	return nil
}

// blockLen is the data length of block b.
func (x *transfer) blockLen(b int64) int64 {
	bs := int64(x.terms.blockSize)
	return min(bs, x.size-(b-1)*bs)
}

// read fills pkt with the DATA packet of block b. Its number on the wire
// wraps to 0 after 65535, as tftpd-hpa's and most clients' do, so files of
// any size go through.
func (x *transfer) read(pkt []byte, b int64) error {
	want := x.blockLen(b)
	n, err := x.file.ReadAt(pkt[4:4+want], (b-1)*int64(x.terms.blockSize))
	if int64(n) != want {
		if err == nil || err == io.EOF {
			err = errFileChanged
		}
		return err
	}
	binary.BigEndian.PutUint16(pkt, opDATA)
	binary.BigEndian.PutUint16(pkt[2:], uint16(b))
	return nil
}

// await waits for the acknowledgement of a block of the window first..last
// and returns it.
func (x *transfer) await(first, last int64) (int64, error) {
	deadline := x.now().Add(x.timeout)
	timeouts := 0
	for {
		r, err := x.receive(deadline)
		if errors.Is(err, errTimeout) {
			if timeouts == x.retries {
				return 0, errGaveUp
			}
			timeouts++
			if err := x.sendWindow(first, last); err != nil {
				return 0, err
			}
			deadline = x.now().Add(x.timeout)
			continue
		}
		if err != nil {
			return 0, err
		}
		if r.abort {
			return 0, fmt.Errorf("%w: %q", errClientAbort, r.msg)
		}
		if !r.ack {
			continue
		}
		// The block number as it would be on the wire: the ACK names a
		// block from first-1 to last, counted modulo 65536.
		k := int64(uint16(r.block - uint16(first-1)))
		if k >= 1 && k <= last-first+1 {
			return first - 1 + k, nil
		}
		// A repeated ACK of the block before the window, or a stray one:
		// wait on, for the time left.
	}
}

// receive reads the client's next packet, waiting until deadline at most.
func (x *transfer) receive(deadline time.Time) (reply, error) {
	left := deadline.Sub(x.now())
	if left <= 0 {
		return reply{}, errTimeout
	}
	n, err := x.conn.recv(x.in, left)
	if err != nil {
		return reply{}, err
	}
	return parseReply(x.in[:n]), nil
}
