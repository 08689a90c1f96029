package tftp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	pintftp "github.com/pin/tftp/v3"
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
	return nil
}

// Transfer results, the label values of the transfers metric.
const (
	ResultOK       = "ok"
	ResultRefused  = "refused"   // name failed ValidateName
	ResultNotFound = "not_found" // allow-listed but absent from Dir
	ResultBusy     = "busy"      // over MaxTransfers
	ResultFailed   = "failed"    // started but did not complete
	ResultWrite    = "write_refused"
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
	for _, r := range []string{ResultOK, ResultRefused, ResultNotFound, ResultBusy, ResultFailed, ResultWrite} {
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
	srv     *pintftp.Server
}

// NewServer checks cfg and fills its defaults. metrics may be nil.
func NewServer(cfg Config, m *Metrics, log logr.Logger) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, metrics: m, log: log, slots: make(chan struct{}, cfg.MaxTransfers)}
	s.srv = pintftp.NewServer(s.read, s.write)
	s.srv.SetTimeout(cfg.Timeout)
	s.srv.SetRetries(cfg.Retries)
	s.srv.SetBlockSize(cfg.MaxBlockSize)
	return s, nil
}

// Listen opens the UDP socket for Serve on addr (IPv4), with the
// destination address and interface of each packet (IP_PKTINFO) reported
// from the start. pin/tftp turns that on only when Serve begins, and a read
// request that reached the socket before (kubefarm-pxe opens its sockets
// before it serves; a client may be retrying meanwhile) carries neither:
// pin/tftp then caps the transfer's blksize at 512, whatever the client
// asked, and answers from the default source address.
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
// waits for the transfers under way (each bounded by Timeout x Retries).
// conn should come from Listen.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			// Shutdown closes conn, which ends pin/tftp's Serve at once,
			// then waits for the transfers.
			s.srv.Shutdown()
		case <-done:
		}
	}()
	err := s.srv.Serve(conn)
	close(done)
	<-stopped
	return err
}

// read is pin/tftp's read handler. It runs on its own goroutine per
// request; an error it returns is sent to the client as an error packet.
func (s *Server) read(name string, rf io.ReaderFrom) error {
	peer := ""
	if ot, ok := rf.(pintftp.OutgoingTransfer); ok {
		a := ot.RemoteAddr()
		peer = a.String()
	}
	if err := validateName(name, s.cfg.Files); err != nil {
		s.metrics.observe(ResultRefused, 0)
		// %q: the name is attacker-controlled and may hold control bytes.
		s.log.V(1).Info("tftp request refused", "peer", peer, "file", fmt.Sprintf("%q", truncate(name)), "reason", err.Error())
		return err
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.metrics.observe(ResultBusy, 0)
		s.log.Info("tftp request refused: too many transfers", "peer", peer, "file", name)
		return errors.New("server busy")
	}
	// The name passed validateName, so it is one path element.
	f, err := os.Open(filepath.Join(s.cfg.Dir, name))
	if err != nil {
		s.metrics.observe(ResultNotFound, 0)
		s.log.Info("tftp file unavailable", "peer", peer, "file", name, "error", err.Error())
		return errors.New("file not found")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		s.metrics.observe(ResultNotFound, 0)
		return errors.New("file not found")
	}
	if ot, ok := rf.(pintftp.OutgoingTransfer); ok {
		// Set tsize explicitly from the open file rather than relying on
		// pin/tftp's seek probe, so that it is right for any reader.
		ot.SetSize(fi.Size())
	}
	start := time.Now()
	n, err := rf.ReadFrom(f)
	if err != nil {
		s.metrics.observe(ResultFailed, n)
		s.log.Info("tftp transfer failed", "peer", peer, "file", name, "bytes", n, "error", err.Error())
		// pin/tftp has already aborted the transfer; returning nil avoids a
		// second error packet.
		return nil
	}
	s.metrics.observe(ResultOK, n)
	s.log.V(1).Info("tftp transfer done", "peer", peer, "file", name, "bytes", n, "duration", time.Since(start).String())
	return nil
}

// write refuses every write request: the service is read-only.
func (s *Server) write(name string, _ io.WriterTo) error {
	s.metrics.observe(ResultWrite, 0)
	s.log.V(1).Info("tftp write refused", "file", fmt.Sprintf("%q", truncate(name)))
	return errors.New("access violation: read-only server")
}

func truncate(s string) string {
	if len(s) > MaxNameLen {
		return s[:MaxNameLen]
	}
	return s
}
