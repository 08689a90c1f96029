package tftp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv4"

	"github.com/kubefarm/kubefarm/pxe/bootpaths"
)

// DefaultDir is where Debian's ipxe package installs its binaries.
const DefaultDir = "/usr/lib/ipxe"

// MaxNameLen bounds a requested file name. The allow-listed names are short;
// the bound keeps the check cheap and log lines small whatever is sent.
const MaxNameLen = 128

// DefaultFiles are the names bootfile.Decide can send a TFTP client to:
// bootpaths' allow-list of iPXE binaries.
var DefaultFiles = bootpaths.Binaries()

// Errors returned by ValidateName. Their text goes to the client in the
// TFTP error packet, so it says what is wrong without naming server paths.
var (
	ErrEmptyName    = errors.New("empty file name")
	ErrNameTooLong  = errors.New("file name too long")
	ErrBadCharacter = errors.New("file name has a forbidden character")
	ErrNotAllowed   = errors.New("file not served")
)

// ValidateName checks a requested name against DefaultFiles.
func ValidateName(name string) error {
	return validateName(name, DefaultFiles)
}

// validateName is the pure check. The syntax checks come first and are
// stricter than the allow-list needs, so that a later, longer allow-list
// (or one read from configuration) can never open a path escape.
func validateName(name string, allowed []string) error {
	if name == "" {
		return ErrEmptyName
	}
	if len(name) > MaxNameLen {
		return ErrNameTooLong
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.' && i > 0:
			// A dot is fine inside a name but not first: that rules out
			// "." , ".." and hidden files in one go.
		default:
			// '/', '\\', NUL, control bytes, spaces and non-ASCII: none of
			// the served names has them, and each is a way to escape the
			// directory or to confuse a log reader.
			return ErrBadCharacter
		}
	}
	for _, a := range allowed {
		if name == a {
			return nil
		}
	}
	return ErrNotAllowed
}

// Config of the TFTP service.
type Config struct {
	// Dir holds the served files (DefaultDir when empty).
	Dir string
	// Files is the allow-list of names (DefaultFiles when empty). Each must
	// pass the syntax checks of ValidateName.
	Files []string
	// Timeout waits for each acknowledgement (default 2s: PXE ROMs on a
	// LAN answer in well under a millisecond, a lost packet should be
	// resent quickly).
	Timeout time.Duration
	// Retries of one packet before the transfer is abandoned (default 5).
	Retries int
	// MaxBlockSize caps the negotiated blksize (default 1468: fits a
	// 1500-byte Ethernet MTU after IP, UDP and TFTP headers, so blocks are
	// never fragmented).
	MaxBlockSize int
	// MaxTransfers bounds concurrent transfers (default 64).
	MaxTransfers int
	// MaxWindowSize caps the RFC 7440 window a client may ask for: blocks
	// sent before an ACK is awaited (default 16; EDK2 asks for 4). 1 turns
	// windowsize off: every transfer is lockstep.
	MaxWindowSize int
	// SpinWait is how long a transfer on a blocking socket polls for the
	// client's reply before it blocks, while replies come that fast
	// (default 50µs; negative: never, as zero is the default). Up to
	// GOMAXPROCS transfers at once can poll, each at most SpinWait a
	// block.
	SpinWait time.Duration
}

func (c *Config) defaults() error {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if len(c.Files) == 0 {
		c.Files = DefaultFiles
	}
	for _, f := range c.Files {
		// Check syntax only: validate the name against itself.
		if err := validateName(f, []string{f}); err != nil {
			return fmt.Errorf("allow-listed name %q: %w", f, err)
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Retries <= 0 {
		c.Retries = 5
	}
	if c.MaxBlockSize <= 0 {
		c.MaxBlockSize = 1468
	}
	if c.MaxTransfers <= 0 {
		c.MaxTransfers = 64
	}
	switch {
	case c.SpinWait == 0:
		c.SpinWait = DefaultSpinWait
	case c.SpinWait < 0:
		c.SpinWait = 0
	case c.SpinWait > maxSpinWait:
		return fmt.Errorf("SpinWait %s: want at most %s", c.SpinWait, maxSpinWait)
	}
	if c.MaxWindowSize <= 0 {
		c.MaxWindowSize = DefaultMaxWindowSize
	}
	if c.MaxBlockSize < minBlockSize || c.MaxBlockSize > maxBlockSizeRFC {
		return fmt.Errorf("MaxBlockSize %d: want %d to %d", c.MaxBlockSize, minBlockSize, maxBlockSizeRFC)
	}
	if c.MaxWindowSize > maxWindowSizeRFC {
		return fmt.Errorf("MaxWindowSize %d: want 1 to %d", c.MaxWindowSize, maxWindowSizeRFC)
	}
	return nil
}

// Transfer results, the label values of the transfers metric.
const (
	ResultOK        = "ok"
	ResultRefused   = "refused"   // name failed ValidateName
	ResultNotFound  = "not_found" // allow-listed but absent from Dir
	ResultBusy      = "busy"      // over MaxTransfers
	ResultFailed    = "failed"    // started but did not complete
	ResultWrite     = "write_refused"
	ResultMalformed = "malformed" // not a request, or one that does not parse: dropped unanswered
	// ResultAborted: the client ended the transfer with an error packet.
	// EDK2 does so after the OACK of its first request, which asks only
	// for the size (tsize) before the real one.
	ResultAborted = "aborted"
)

// DefaultMaxWindowSize is Config.MaxWindowSize's default.
const DefaultMaxWindowSize = 16

// DefaultSpinWait is Config.SpinWait's default, and maxSpinWait its bound:
// longer polls stop paying for themselves (a LAN ACK takes tens of µs).
const (
	DefaultSpinWait = 50 * time.Microsecond
	maxSpinWait     = time.Millisecond
)

// Metrics of the TFTP service.
type Metrics struct {
	transfers *prometheus.CounterVec
	bytes     prometheus.Counter
}

// NewMetrics registers the TFTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_tftp", Name: "transfers_total",
			Help: "TFTP requests, by result.",
		}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kubefarm", Subsystem: "pxe_tftp", Name: "bytes_total",
			Help: "Bytes of file data sent over TFTP.",
		}),
	}
	for _, c := range []prometheus.Collector{m.transfers, m.bytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create every label so dashboards see zeros instead of gaps.
	for _, r := range []string{ResultOK, ResultRefused, ResultNotFound, ResultBusy, ResultFailed, ResultWrite, ResultMalformed, ResultAborted} {
		m.transfers.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) observe(result string, n int64) {
	if m == nil {
		return
	}
	m.transfers.WithLabelValues(result).Inc()
	if n > 0 {
		m.bytes.Add(float64(n))
	}
}

// Server is the read-only TFTP service.
type Server struct {
	cfg     Config
	metrics *Metrics
	log     logr.Logger
	slots   chan struct{}
	// blocking counts the transfers on blocking sockets, at most
	// blockingLimit() (dial).
	blocking      atomic.Int32
	blockingLimit func() int
	// busyLog spaces the log lines of busy refusals; only Serve's loop
	// uses it.
	busyLog intervalLog
}

// busyLogInterval is the least time between two log lines of busy
// refusals.
const busyLogInterval = 10 * time.Second

// intervalLog lets a line through at most once per busyLogInterval and
// counts the events in between.
type intervalLog struct {
	last  time.Time
	count int
}

// tick records one event at now and tells whether to log it, with the
// events since the last line (this one included).
func (l *intervalLog) tick(now time.Time) (int, bool) {
	l.count++
	if !l.last.IsZero() && now.Sub(l.last) < busyLogInterval {
		return 0, false
	}
	n := l.count
	l.last, l.count = now, 0
	return n, true
}

// NewServer checks cfg and fills its defaults. metrics may be nil.
func NewServer(cfg Config, m *Metrics, log logr.Logger) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, metrics: m, log: log, slots: make(chan struct{}, cfg.MaxTransfers),
		blockingLimit: func() int { return runtime.GOMAXPROCS(0) }}, nil
}

// Listen opens the UDP socket for Serve on addr (IPv4), with the
// destination address and interface of each packet (IP_PKTINFO) reported
// from the start: a transfer answers from the address its request came to,
// and caps blksize at what fits the interface's MTU. The kernel records
// the packet info only for packets that arrive after the option is on, so
// it is on before the socket is handed out (kubefarm-pxe opens its sockets
// before it serves; a client may be retrying meanwhile).
func Listen(addr string) (net.PacketConn, error) {
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, err
	}
	if err := ipv4.NewPacketConn(c).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
		c.Close()
		return nil, fmt.Errorf("tftp: packet info on %s: %w", addr, err)
	}
	return c, nil
}

// Serve answers on conn until ctx ends, then stops taking requests and
// waits for the transfers under way (each bounded by Timeout x (Retries+1)
// per block, or window, without progress).
// conn should come from Listen; Serve closes it.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	defer conn.Close()
	pc := ipv4.NewPacketConn(conn)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var transfers sync.WaitGroup
	defer transfers.Wait()
	buf := make([]byte, requestReadSize)
	for {
		n, cm, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// An unconnected UDP socket reports no ICMP errors, so an
			// error here is the socket's own: the service stops (and
			// kubefarm-pxe with it) rather than spin on it.
			return fmt.Errorf("tftp: read: %w", err)
		}
		peer, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		var dst net.IP
		ifIndex := 0
		if cm != nil {
			dst, ifIndex = cm.Dst, cm.IfIndex
		}
		if t, ok := s.accept(pc, buf[:n], peer, dst); ok {
			transfers.Go(func() {
				defer func() { <-s.slots }()
				s.send(pc, t, peer, dst, ifIndex)
			})
		}
	}
}

// accept decides on one packet read on the service's port: a read request
// that passes every check and gets a transfer slot is returned; anything
// else is answered with an error packet (a well-formed request refused) or
// dropped (not a request: answering garbage would make the service a
// reflector for forged sources).
func (s *Server) accept(pc *ipv4.PacketConn, p []byte, peer *net.UDPAddr, dst net.IP) (request, bool) {
	req, err := parseRequest(p)
	if err != nil {
		s.metrics.observe(ResultMalformed, 0)
		s.log.V(1).Info("tftp packet dropped", "peer", peer.String(), "bytes", len(p), "reason", err.Error())
		return req, false
	}
	if req.write {
		s.metrics.observe(ResultWrite, 0)
		s.log.V(1).Info("tftp write refused", "peer", peer.String(), "file", fmt.Sprintf("%q", truncate(req.name)))
		s.refuse(pc, peer, dst, errCodeAccessViolation, "access violation: read-only server")
		return req, false
	}
	if req.mode != "octet" {
		// netascii would rewrite line ends in a binary; "mail" is gone
		// since RFC 1350. Every firmware asks for octet.
		s.metrics.observe(ResultRefused, 0)
		s.log.V(1).Info("tftp request refused", "peer", peer.String(), "file", fmt.Sprintf("%q", truncate(req.name)), "reason", "mode "+fmt.Sprintf("%q", truncate(req.mode)))
		s.refuse(pc, peer, dst, errCodeIllegalOp, "only octet mode is served")
		return req, false
	}
	if err := validateName(req.name, s.cfg.Files); err != nil {
		s.metrics.observe(ResultRefused, 0)
		// %q: the name is attacker-controlled and may hold control bytes.
		s.log.V(1).Info("tftp request refused", "peer", peer.String(), "file", fmt.Sprintf("%q", truncate(req.name)), "reason", err.Error())
		s.refuse(pc, peer, dst, errCodeAccessViolation, err.Error())
		return req, false
	}
	select {
	case s.slots <- struct{}{}:
		return req, true
	default:
		s.metrics.observe(ResultBusy, 0)
		if n, ok := s.busyLog.tick(time.Now()); ok {
			// In a boot storm every machine past the limit is refused:
			// one line per interval, with the count, not one per request.
			s.log.Info("tftp requests refused: too many transfers", "peer", peer.String(), "file", req.name,
				"refusedSinceLastLine", n, "maxTransfers", s.cfg.MaxTransfers)
		}
		s.refuse(pc, peer, dst, errCodeUndefined, "server busy")
		return req, false
	}
}

// refuse answers a request with an error packet from the service's port,
// from the address the request came to.
func (s *Server) refuse(pc *ipv4.PacketConn, peer *net.UDPAddr, dst net.IP, code uint16, msg string) {
	var cm *ipv4.ControlMessage
	if d := answerFrom(dst); d != nil {
		cm = &ipv4.ControlMessage{Src: d}
	}
	if _, err := pc.WriteTo(appendError(nil, code, msg), cm, peer); err != nil {
		s.log.V(1).Info("tftp error packet not sent", "peer", peer.String(), "error", err.Error())
	}
}

// transferSocket is a transfer's own socket.
type transferSocket interface {
	packetConn
	close()
}

// dial opens a transfer's socket: a blocking one (transferConn, the
// fastest turn-around per block) while transfers on such sockets are no
// more than the Ps that can run them, a netpoller one (polledConn) beyond,
// where one thread per waiting transfer would cost more in hand-offs than
// it saves (50 transfers at once: 0.75x tftpd-hpa's fetches per second
// with blocking sockets only, docs/tftp.md).
func (s *Server) dial(dst net.IP, peer *net.UDPAddr) (transferSocket, error) {
	if s.blocking.Add(1) <= int32(s.blockingLimit()) {
		c, err := dialTransfer(dst, peer, s.cfg.SpinWait)
		if err != nil {
			s.blocking.Add(-1)
			return nil, err
		}
		return &countedConn{transferConn: c, n: &s.blocking}, nil
	}
	s.blocking.Add(-1)
	return dialPolled(dst, peer)
}

// countedConn gives its place among the blocking transfers back on close.
type countedConn struct {
	*transferConn
	n *atomic.Int32
}

func (c *countedConn) close() {
	c.transferConn.close()
	c.n.Add(-1)
}

// send runs one accepted read request on a socket of its own.
func (s *Server) send(pc *ipv4.PacketConn, req request, peer *net.UDPAddr, dst net.IP, ifIndex int) {
	// The name passed validateName, so it is one path element.
	f, err := os.Open(filepath.Join(s.cfg.Dir, req.name))
	if err != nil {
		s.metrics.observe(ResultNotFound, 0)
		s.log.Info("tftp file unavailable", "peer", peer.String(), "file", req.name, "error", err.Error())
		s.refuse(pc, peer, dst, errCodeNotFound, "file not found")
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		s.metrics.observe(ResultNotFound, 0)
		s.refuse(pc, peer, dst, errCodeNotFound, "file not found")
		return
	}
	conn, err := s.dial(dst, peer)
	if err != nil {
		s.metrics.observe(ResultFailed, 0)
		s.log.Info("tftp transfer failed", "peer", peer.String(), "file", req.name, "error", err.Error())
		return
	}
	defer conn.close()
	lim := limits{maxBlockSize: s.cfg.MaxBlockSize, maxWindowSize: s.cfg.MaxWindowSize}
	if ifIndex > 0 {
		if ifi, err := net.InterfaceByIndex(ifIndex); err == nil && ifi.MTU > 0 {
			lim.maxBlockSize = min(lim.maxBlockSize, mtuBlockSize(ifi.MTU))
		}
	}
	t := negotiate(req.options, fi.Size(), lim)
	start := time.Now()
	n, err := newTransfer(conn, f, fi.Size(), t, s.cfg.Timeout, s.cfg.Retries).run()
	switch {
	case errors.Is(err, errClientAbort):
		s.metrics.observe(ResultAborted, n)
		s.log.V(1).Info("tftp transfer ended by the client", "peer", peer.String(), "file", req.name, "bytes", n, "error", err.Error())
		return
	case err != nil:
		s.metrics.observe(ResultFailed, n)
		s.log.Info("tftp transfer failed", "peer", peer.String(), "file", req.name, "bytes", n, "error", err.Error())
		// Tell the client, so that it need not wait out its own timeouts.
		// Best effort: the client may be gone.
		_ = conn.send(appendError(nil, errCodeUndefined, "transfer abandoned"))
		return
	}
	s.metrics.observe(ResultOK, n)
	s.log.V(1).Info("tftp transfer done", "peer", peer.String(), "file", req.name, "bytes", n,
		"blksize", t.blockSize, "windowsize", t.windowSize, "duration", time.Since(start).String())
}

func truncate(s string) string {
	if len(s) > MaxNameLen {
		return s[:MaxNameLen]
	}
	return s
}
