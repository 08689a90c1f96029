package server

// The sockets. New opens every one before anything serves, so that a bad
// address fails the start instead of leaving a half-working replica.

import (
	"fmt"
	"net"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/tftp"
)

// listen opens the HTTP boot service's socket, the probes', TFTP's, and
// DHCP's with the router solicitation responder's.
func (s *Server) listen() error {
	if err := s.opts.HTTP.Validate(); err != nil {
		return err
	}
	rawHTTPLn, err := net.Listen("tcp", s.opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	if s.httpLn, err = s.opts.bootListener(rawHTTPLn, s.reg); err != nil {
		rawHTTPLn.Close()
		return err
	}
	// Boot clients send tiny requests and download large files: the
	// limits (a slow header is an attack or a dead client) are by route.
	s.httpSrv = s.opts.bootHTTPServer(s.handler)
	// /healthz and /metrics, on a listener of their own (never the boot
	// network's).
	if s.probeLn, err = s.opts.listenProbes(); err != nil {
		return err
	}
	s.probes = probeServer(s.handler.Probes())
	if err := s.listenTFTP(); err != nil {
		return err
	}
	if s.opts.Interface == "" {
		s.log.Info("no --interface: DHCP disabled")
		return nil
	}
	return s.listenDHCP()
}

// listenTFTP opens --tftp-addr, if set, for the TFTP service.
func (s *Server) listenTFTP() error {
	if s.opts.TFTPAddr == "" {
		return nil
	}
	tm, err := tftp.NewMetrics(s.reg)
	if err != nil {
		return err
	}
	if s.tftpSrv, err = tftp.NewServer(s.opts.tftpConfig(), tm, s.log.WithName("tftp")); err != nil {
		return err
	}
	if s.tftpConn, err = tftp.Listen(s.opts.TFTPAddr); err != nil {
		return fmt.Errorf("tftp: %w", err)
	}
	return nil
}

// listenDHCP opens the DHCP sockets on --interface and, with
// --answer-router-solicitations, the router solicitation responder.
func (s *Server) listenDHCP() error {
	dcfg := dhcp.Config{
		ServerID:  s.boot.ip,
		Boot:      bootfile.Config{Server: s.boot.ip, HTTPPort: s.boot.httpPort, UEFIx64Binary: s.opts.UEFIBinary},
		ProxyDHCP: s.opts.ProxyDHCP,
		Workers:   s.opts.Workers,
		QueueSize: s.opts.Queue,
		Events:    s.eventSink,
		Boots:     s.windows,
	}
	if s.allocator != nil {
		dcfg.Dynamic = s.allocator
		dcfg.DynamicWorkers = s.opts.DynamicWorkers
	}
	dm, err := dhcp.NewMetrics(s.reg)
	if err != nil {
		return err
	}
	if s.dhcpSrv, err = dhcp.NewServer(dcfg, s.inv, dm, s.log.WithName("dhcp")); err != nil {
		return err
	}
	if s.dhcpConns, err = dhcp.Listen(s.opts.Interface, dcfg); err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	if s.opts.AnswerRouterSolicitations {
		if s.ra, err = listenRouterSolicitations(s.opts.Interface, s.reg, s.log); err != nil {
			return err
		}
	}
	return nil
}
