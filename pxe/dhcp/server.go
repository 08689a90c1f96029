package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/kubefarm/kubefarm/pxe/leases"
)

// Leases is the lookup the server needs: pxe/inventory in kubefarm-pxe,
// a *leases.Table in tests and the in-process benchmark.
type Leases interface {
	Lookup(mac net.HardwareAddr) (*leases.Lease, bool)
}

// readSize is larger than MaxPacket so that an oversized datagram shows up
// as n > MaxPacket instead of being silently truncated to a valid length.
const readSize = MaxPacket + 1

// Server answers DHCPv4 from a lease table with a fixed pool of workers.
type Server struct {
	cfg     Config
	leases  Leases
	metrics *Metrics
	log     logr.Logger
}

// NewServer checks cfg and fills its defaults. metrics may be nil.
func NewServer(cfg Config, l Leases, m *Metrics, log logr.Logger) (*Server, error) {
	if cfg.ServerID.To4() == nil {
		return nil, fmt.Errorf("server identifier %v is not an IPv4 address", cfg.ServerID)
	}
	if l == nil {
		return nil, errors.New("a lease table is required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2 * runtime.GOMAXPROCS(0)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1024
	}
	if cfg.DynamicWorkers <= 0 {
		cfg.DynamicWorkers = DefaultDynamicWorkers
	}
	if cfg.DynamicQueue <= 0 {
		cfg.DynamicQueue = DefaultDynamicQueue
	}
	if cfg.DynamicTimeout <= 0 {
		cfg.DynamicTimeout = DefaultDynamicTimeout
	}
	return &Server{cfg: cfg, leases: l, metrics: m, log: log}, nil
}

// Listen opens the sockets the configuration needs on iface: port 67, and
// port 4011 in proxyDHCP mode. Binding to the interface keeps the server
// off every other network of a multi-homed node.
func Listen(iface string, cfg Config) ([]net.PacketConn, error) {
	ports := []int{ServerPort}
	if cfg.ProxyDHCP {
		ports = append(ports, PXEProxyPort)
	}
	var conns []net.PacketConn
	for _, p := range ports {
		c, err := server4.NewIPv4UDPConn(iface, &net.UDPAddr{Port: p})
		if err != nil {
			for _, o := range conns {
				o.Close()
			}
			return nil, fmt.Errorf("listening on %s port %d: %w", iface, p, err)
		}
		setReadBuffer(c, ReadBufferBytes)
		conns = append(conns, c)
	}
	return conns, nil
}

// HandlePacket turns one datagram into the reply to send (nil for none),
// its destination and the outcome. It never panics on any input; that is
// what FuzzHandlePacket checks.
//
// A packet for an unknown MAC that a dynamic range may serve is answered
// inline here, with the allocator's API calls; Serve instead hands it to
// the dynamic workers so that the static path never waits for the API.
func (s *Server) HandlePacket(pkt []byte, peer *net.UDPAddr) (out []byte, dst *net.UDPAddr, typ string, o Outcome) {
	a := s.handle(pkt, peer)
	if a.dynamic {
		a = s.allocate(context.Background(), a, peer)
	}
	return a.out, a.dst, a.typ, a.outcome
}

// answer is one packet on its way through the answer path: parsed by
// handle, then completed by reply with the lease from the table or (for an
// unknown MAC, on a dynamic worker) from the allocator.
type answer struct {
	out     []byte
	dst     *net.UDPAddr
	typ     string
	outcome Outcome
	// req, resp and lease are kept for the machine's events; nil when
	// the packet was malformed or the MAC unknown.
	req, resp *dhcpv4.DHCPv4
	lease     *leases.Lease
	// dynamic: the MAC is unknown and the allocator must be asked; no
	// outcome yet. req is parsed and valid.
	dynamic bool
}

// handle is the static hot path: one parse, one lookup in the lease table,
// and the reply, unless the MAC is unknown and the allocator must be asked.
func (s *Server) handle(pkt []byte, peer *net.UDPAddr) answer {
	if len(pkt) > MaxPacket {
		return answer{typ: "unknown", outcome: Malformed}
	}
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		return answer{typ: "unknown", outcome: Malformed}
	}
	a := answer{typ: typeLabel(req), req: req}
	if err := validate(req); err != nil {
		a.outcome = Malformed
		return a
	}
	lease, known := s.leases.Lookup(req.ClientHWAddr)
	if !known && s.wantsDynamic(req) {
		a.dynamic = true
		return a
	}
	return s.reply(context.Background(), a, source{lease: lease}, peer)
}

// reply completes a with the answer to its request, the lease taken from
// src: the packet, where it goes, and the outcome.
func (s *Server) reply(ctx context.Context, a answer, src source, peer *net.UDPAddr) answer {
	req := a.req
	resp, lease, err := decide(ctx, req, src, s.cfg)
	a.lease, a.resp, a.outcome = lease, resp, outcomeOf(req, resp, err)
	if resp == nil {
		s.logOutcome(a, err)
		return a
	}
	a.out, a.dst = resp.ToBytes(), Destination(req, resp, peer)
	return a
}

// logOutcome logs the outcomes of a request without a reply that an
// operator acts on: failures, declines, a full catch-all range.
func (s *Server) logOutcome(a answer, err error) {
	mac := a.req.ClientHWAddr.String()
	switch a.outcome {
	case Failed:
		s.log.Error(err, "answering a DHCP request", "mac", mac, "type", a.typ)
	case Declined:
		if a.lease != nil {
			s.log.Info("client declined its address: another host uses it", "mac", mac, "ip", a.lease.IP.String())
		} else {
			s.log.Info("client declined its dynamic address: another host uses it; withheld for one lease time",
				"mac", mac, "ip", a.req.RequestedIPAddress().String())
		}
	case IgnoredRangeFull:
		s.log.Info("dynamic range full; unknown MAC not answered", "mac", mac, "reason", err.Error())
	}
}

// buffer carries one datagram from a reader to a worker. Buffers are
// recycled through a free list so the steady state allocates none for I/O.
type buffer struct {
	data [readSize]byte
	n    int
	peer *net.UDPAddr
	conn net.PacketConn
	at   time.Time
}

// Serve reads conns until ctx ends, then closes them and returns once every
// worker has finished. Serve owns conns.
func (s *Server) Serve(ctx context.Context, conns ...net.PacketConn) error {
	if len(conns) == 0 {
		return errors.New("no sockets to serve")
	}
	// Enough buffers that a reader never waits for one: at most QueueSize
	// wait in the queue, Workers are being handled, one per reader is
	// being filled.
	nbuf := s.cfg.QueueSize + s.cfg.Workers + len(conns)
	free := make(chan *buffer, nbuf)
	for i := 0; i < nbuf; i++ {
		free <- new(buffer)
	}
	queue := make(chan *buffer, s.cfg.QueueSize)
	// Unknown MACs' parsed requests wait here for the allocator's API
	// calls, so that those never hold up the static workers.
	var dynq chan dynamicJob
	var workers, dynWorkers sync.WaitGroup
	if s.cfg.Dynamic != nil {
		dynq = make(chan dynamicJob, s.cfg.DynamicQueue)
		for i := 0; i < s.cfg.DynamicWorkers; i++ {
			dynWorkers.Add(1)
			go func() {
				defer dynWorkers.Done()
				for j := range dynq {
					s.finish(s.allocate(ctx, j.a, j.peer), j.conn, j.at)
				}
			}()
		}
	}
	for i := 0; i < s.cfg.Workers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for b := range queue {
				s.work(b, dynq)
				free <- b
			}
		}()
	}

	// A socket that fails stops the whole server: serving on some
	// interfaces and silently not on others is worse than a restart.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close() // unblocks ReadFrom
		}
	})
	defer stop()

	var readers sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			if errs[i] = s.read(ctx, c, free, queue); errs[i] != nil {
				cancel()
			}
		}()
	}
	readers.Wait()
	close(queue)
	workers.Wait()
	// Static workers hand jobs over until they have drained queue: close
	// dynq only after them.
	if dynq != nil {
		close(dynq)
		dynWorkers.Wait()
	}
	return errors.Join(errs...)
}

func (s *Server) read(ctx context.Context, c net.PacketConn, free, queue chan *buffer) error {
	b := <-free
	for {
		n, addr, err := c.ReadFrom(b.data[:])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// An unconnected UDP socket reports no ICMP errors, so a failed
			// read means the socket itself is broken.
			return fmt.Errorf("reading %s: %w", c.LocalAddr(), err)
		}
		b.n, b.conn, b.at = n, c, time.Now()
		b.peer, _ = addr.(*net.UDPAddr)
		mt, known := peekMessageType(b.data[:n])
		if known && shed(mt, len(queue), cap(queue)) {
			// Reuse b for the next read: the shed packet costs nothing.
			s.metrics.count(messageTypeLabel(mt), DroppedOverload)
			continue
		}
		select {
		case queue <- b:
			b = <-free
		default:
			s.metrics.count("unknown", DroppedQueueFull)
		}
	}
}

// dynamicJob is an unknown MAC's parsed request waiting for the allocator.
// The parsed request shares nothing with the reader's buffer, which is
// recycled at once.
type dynamicJob struct {
	a    answer
	peer *net.UDPAddr
	conn net.PacketConn
	at   time.Time
}

func (s *Server) work(b *buffer, dynq chan<- dynamicJob) {
	a := s.handle(b.data[:b.n], b.peer)
	if a.dynamic {
		j := dynamicJob{a: a, peer: b.peer, conn: b.conn, at: b.at}
		select {
		case dynq <- j:
		default:
			s.metrics.count(a.typ, DroppedQueueFull)
		}
		return
	}
	s.finish(a, b.conn, b.at)
}

// finish sends the answer, counts it and records the machine's event.
func (s *Server) finish(a answer, conn net.PacketConn, at time.Time) {
	if a.out != nil {
		if _, err := conn.WriteTo(a.out, a.dst); err != nil {
			s.log.Error(err, "sending DHCP reply", "to", a.dst.String(), "result", string(a.outcome))
			a.outcome = Failed
		}
	}
	s.metrics.count(a.typ, a.outcome)
	s.metrics.observe(at)
	s.recordEvent(a)
	s.armBoot(a)
}

// armBoot tells Config.Boots of an answer sent to a known machine's iPXE.
func (s *Server) armBoot(a answer) {
	if s.cfg.Boots == nil || a.lease == nil || a.lease.Machine == "" || (a.outcome != Offered && a.outcome != Acked) || !isIPXE(a.req) {
		return
	}
	s.cfg.Boots.Arm(a.req.ClientHWAddr.String())
}

// ReadBufferBytes is the socket receive buffer the server asks for,
// explicitly, so that the host's net.core.rmem_default does not decide it.
// It is kept modest on purpose: packets waiting in the kernel are invisible
// to the reader's overload policy (which sheds DISCOVERs and keeps
// REQUESTs), so a deep kernel buffer only adds latency (measured: 4 MiB took
// p99 OFFER latency at 10,000/s from about 1 ms to 158 ms). The kernel
// doubles the value for its bookkeeping.
const ReadBufferBytes = 256 << 10

// setReadBuffer sets the receive buffer; best effort, as the default also works.
func setReadBuffer(c *net.UDPConn, n int) { _ = c.SetReadBuffer(n) }
