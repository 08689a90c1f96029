package tftp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errTimeout is a receive that waited its whole timeout.
var errTimeout = errors.New("timed out waiting for the client")

// transferConn is a transfer's own UDP socket: bound to the address the
// request came to, connected to the client, and blocking. A lockstep
// transfer is a ping-pong of one DATA and one ACK; tftpd-hpa waits for each
// ACK in the kernel, and so does this socket (a plain blocking read with
// SO_RCVTIMEO). Going through Go's netpoller instead (net.UDPConn) parks
// the goroutine on every ACK, and its wake-up, scheduler round and the
// sysmon thread it rouses cost about 10 µs a block: 0.83x tftpd-hpa's
// speed for curl (docs/tftp.md). Connected, the kernel routes each packet
// once and drops packets from any other source, and an ICMP port
// unreachable from a client that went away ends the transfer at once.
// Each such transfer holds a thread while it waits, so the server uses it
// for as many transfers at once as there are Ps (GOMAXPROCS) and
// polledConn beyond.
type transferConn struct {
	fd int
	// rcvTimeout is the SO_RCVTIMEO in force, so that it is set only when
	// it changes (not once per block).
	rcvTimeout time.Duration
	// spin is how long a wait polls the socket before it blocks
	// (Config.SpinWait; 0: never), and spinning whether the last reply
	// came within it: a client slower than that is not polled for.
	spin     time.Duration
	spinning bool
}

// dialTransfer opens a transfer's socket from local (port chosen by the
// kernel; any local address when local is nil or not a unicast address)
// to peer.
func dialTransfer(local net.IP, peer *net.UDPAddr, spin time.Duration) (*transferConn, error) {
	p4 := peer.IP.To4()
	if p4 == nil {
		return nil, fmt.Errorf("tftp: peer %s is not IPv4", peer)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("tftp: socket: %w", err)
	}
	c := &transferConn{fd: fd, spin: spin, spinning: spin > 0}
	var sa unix.SockaddrInet4
	if l4 := answerFrom(local); l4 != nil {
		copy(sa.Addr[:], l4)
	}
	if err := unix.Bind(fd, &sa); err != nil {
		// The request's destination may be a (subnet) broadcast address,
		// which a socket cannot be bound to: answer from any address.
		sa = unix.SockaddrInet4{}
		if err := unix.Bind(fd, &sa); err != nil {
			c.close()
			return nil, fmt.Errorf("tftp: bind: %w", err)
		}
	}
	to := unix.SockaddrInet4{Port: peer.Port}
	copy(to.Addr[:], p4)
	if err := unix.Connect(fd, &to); err != nil {
		c.close()
		return nil, fmt.Errorf("tftp: connect to %s: %w", peer, err)
	}
	return c, nil
}

// send writes one packet.
func (c *transferConn) send(b []byte) error {
	for {
		_, err := unix.Write(c.fd, b)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// recv reads one packet into b, waiting at most timeout (at least a
// millisecond: SO_RCVTIMEO's zero means forever).
//
// It first polls the socket for up to spin, while the client's replies
// come that fast: a blocked thread whose core has gone idle pays for the
// core's wake-up on every block (in a VM, a halted vCPU's exit and entry),
// and polling a few tens of microseconds for an ACK that comes within them
// costs less CPU than that round (docs/tftp.md). A reply later than spin
// turns polling off until one comes within it again.
func (c *transferConn) recv(b []byte, timeout time.Duration) (int, error) {
	if c.spin <= 0 {
		return c.block(b, timeout)
	}
	start := time.Now()
	if c.spinning {
		for {
			n, err := recvNoWait(c.fd, b)
			if err == nil {
				return n, nil
			}
			if err != unix.EAGAIN && err != unix.EINTR {
				return 0, err
			}
			if time.Since(start) >= c.spin {
				break
			}
		}
	}
	n, err := c.block(b, timeout)
	c.spinning = time.Since(start) <= c.spin
	return n, err
}

// block reads one packet into b in a blocking read of at most timeout.
func (c *transferConn) block(b []byte, timeout time.Duration) (int, error) {
	timeout = max(timeout, time.Millisecond)
	if timeout != c.rcvTimeout {
		tv := unix.NsecToTimeval(timeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return 0, fmt.Errorf("tftp: SO_RCVTIMEO: %w", err)
		}
		c.rcvTimeout = timeout
	}
	for {
		n, err := unix.Read(c.fd, b)
		switch err {
		case nil:
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, errTimeout
		}
		return 0, err
	}
}

// recvNoWait reads one packet if one is queued, EAGAIN if none. It is
// recvfrom(2) without a source address: the socket is connected, and
// unix.Recvfrom would allocate one per packet.
func recvNoWait(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, unix.EINVAL
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (c *transferConn) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// polledConn is a transfer's socket on Go's netpoller: bound and connected
// as transferConn, but a wait for an ACK parks the goroutine, not a
// thread. It is slower per block and cheaper per transfer: with more
// transfers than Ps, thread hand-offs of blocked transferConns cost more
// than the netpoller's wake-ups (docs/tftp.md).
type polledConn struct {
	c *net.UDPConn
}

func dialPolled(local net.IP, peer *net.UDPAddr) (*polledConn, error) {
	var laddr *net.UDPAddr
	if l4 := answerFrom(local); l4 != nil {
		laddr = &net.UDPAddr{IP: l4}
	}
	c, err := net.DialUDP("udp4", laddr, peer)
	if err != nil && laddr != nil {
		// A (subnet) broadcast destination: answer from any address.
		c, err = net.DialUDP("udp4", nil, peer)
	}
	if err != nil {
		return nil, fmt.Errorf("tftp: %w", err)
	}
	return &polledConn{c: c}, nil
}

func (c *polledConn) send(b []byte) error {
	_, err := c.c.Write(b)
	return err
}

func (c *polledConn) recv(b []byte, timeout time.Duration) (int, error) {
	if err := c.c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	n, err := c.c.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, errTimeout
	}
	return n, err
}

func (c *polledConn) close() { c.c.Close() }

// answerFrom is the IPv4 address a transfer answers from: the request's
// destination when it is one a socket can be bound to (unicast or
// loopback), nil otherwise (a broadcast destination: the kernel picks).
func answerFrom(dst net.IP) net.IP {
	if d := dst.To4(); d != nil && (d.IsGlobalUnicast() || d.IsLoopback()) {
		return d
	}
	return nil
}
