// Package httplimit bounds what one client of kubefarm-pxe's HTTP boot
// service can hold: a listener that caps the connections open at once from
// each remote IP, and a handler wrapper that sets each request's read and
// write deadlines from its route, so that the small API-like routes are cut
// when a client stalls while large downloads are not.
//
// The boot network is untrusted: any host on it can open connections. The
// server's own timeouts (ReadHeaderTimeout, IdleTimeout, MaxHeaderBytes) bound
// one connection; the cap bounds how many one host can have.
package httplimit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Listener accepts connections from its inner listener and closes, at once,
// each one whose remote IP already has Max connections open. The count of an
// IP drops when one of its connections is closed (by either side: net/http
// closes a connection whose peer went away).
type Listener struct {
	net.Listener
	max int

	mu      sync.Mutex
	open    map[netip.Addr]int
	refused atomic.Uint64
}

// NewListener wraps ln with a cap of max open connections per remote IP;
// max <= 0 means no cap (the counts are still kept).
func NewListener(ln net.Listener, max int) *Listener {
	return &Listener{Listener: ln, max: max, open: map[netip.Addr]int{}}
}

// Accept returns the next connection within its IP's cap. Connections over
// the cap are closed without a byte sent and counted (Refused); Accept goes
// on to the next one rather than returning an error, which would stop
// http.Server.Serve.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if !l.take(ip) {
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

// Open is the number of connections from ip open now.
func (l *Listener) Open(ip netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip]
}

// Refused is the number of connections closed for being over the cap.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

func (l *Listener) take(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open[ip] >= l.max {
		return false
	}
	l.open[ip]++
	return true
}

func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip] <= 1 {
		// Deleted, not kept at zero: the map holds only the IPs with
		// connections open now, however many hosts came and went.
		delete(l.open, ip)
		return
	}
	l.open[ip]--
}

// remoteIP is c's peer address without the port, IPv4-mapped IPv6 unmapped,
// so that one host counts once whichever way its address is spelled.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	// Not an IP transport (a test's pipe): one shared bucket.
	return netip.Addr{}
}

// conn gives its IP's place back once, on the first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// ReadFrom keeps the inner connection's io.ReaderFrom reachable: net/http
// sends a file with sendfile(2) only through it, and the artifacts (a
// rootfs of hundreds of MiB) are sent that way.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// CloseWrite keeps the inner TCP connection's half-close reachable:
// net/http half-closes before it closes a connection after an error
// response, so the client reads the response instead of a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
