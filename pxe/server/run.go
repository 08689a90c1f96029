package server

// Start, Shutdown and the services' goroutines.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"

	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kubefarm/kubefarm/pxe/events"
	"github.com/kubefarm/kubefarm/pxe/inventory"
)

// Start serves until ctx ends, Shutdown is called or a service fails, then
// shuts the services down, giving in-flight requests and transfers
// ShutdownTimeout to finish. It returns the failed service's error, nil
// after a clean stop. A Server starts once.
func (s *Server) Start(ctx context.Context) error {
	ctx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	s.startSync(ctx)
	s.startServing(ctx)
	s.log.Info("serving", "serverIP", s.boot.ip.String(), "http", s.httpLn.Addr().String(), "metrics", s.opts.MetricsAddr,
		"baseURL", s.boot.base.String(), "tftp", s.opts.TFTPAddr, "dhcpInterface", s.opts.Interface, "proxyDHCP", s.opts.ProxyDHCP,
		"answerRouterSolicitations", s.ra != nil, "ipxeDir", s.opts.IPXEDir, "cacheDir", s.opts.CacheDir)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
	case runErr = <-s.errs:
		s.log.Error(runErr, "a service failed; shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	// Shutdown logs its own errors; what Start returns is the services'.
	_ = s.Shutdown(sctx)
	return runErr
}

// begin marks the server started and returns the services' context, which
// Shutdown cancels.
func (s *Server) begin(ctx context.Context) (context.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.shutDown:
		return nil, errors.New("kubefarm-pxe: started after Shutdown")
	case s.cancel != nil:
		return nil, errors.New("kubefarm-pxe: started twice")
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.errs = make(chan error, 16) // more than the services, so no sender ever blocks
	return ctx, nil
}

// start runs f as the service what until ctx ends; an error it returns
// before then stops Start.
func (s *Server) start(ctx context.Context, what string, f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil && ctx.Err() == nil {
			s.errs <- fmt.Errorf("%s: %w", what, err)
		}
	}()
}

// startSync starts the cache, the inventory's reflector and the wait for
// both, which makes the replica ready.
func (s *Server) startSync(ctx context.Context) {
	s.start(ctx, "cache", func() error { return s.cache.Start(ctx) })
	if r, ok := s.eventSink.(*events.Recorder); ok {
		// The Events' per-machine throttle forgets a storm's machines
		// an interval later, also on a replica gone quiet.
		s.start(ctx, "events throttle", func() error { r.Run(ctx); return nil })
	}
	s.start(ctx, "machines", func() error {
		s.inv.Run(ctx, inventory.ListWatch(s.watcher, s.opts.Namespace))
		return nil
	})
	s.start(ctx, "cache sync", func() error {
		if !s.cache.WaitForCacheSync(ctx) {
			return errors.New("cache did not sync")
		}
		// Ready only once the inventory holds every Machine known at start
		// with its lease, not merely once the cache has the pools.
		if !toolscache.WaitForCacheSync(ctx.Done(), s.inv.HasSynced) {
			return errors.New("the inventory of Machines did not sync")
		}
		// The first list's decoded Machines are garbage once compacted:
		// give their pages back now rather than over the scavenger's
		// minutes, so the replica's resident memory is what it keeps.
		debug.FreeOSMemory()
		s.synced.Do(func() { close(s.ready) })
		s.log.Info("cache synced", "machines", s.inv.Machines(), "leases", s.inv.Len())
		return nil
	})
}

// startServing starts the services on the sockets New opened.
func (s *Server) startServing(ctx context.Context) {
	s.start(ctx, "http", func() error { return serveHTTP(s.httpSrv, s.httpLn) })
	if s.probeLn != nil {
		s.start(ctx, "metrics", func() error { return serveHTTP(s.probes, s.probeLn) })
	}
	if s.tftpSrv != nil {
		s.start(ctx, "tftp", func() error { return s.tftpSrv.Serve(ctx, s.tftpConn) })
	}
	if s.dhcpSrv != nil {
		s.start(ctx, "dhcp", func() error {
			// Not before the inventory holds every machine known at start:
			// read earlier, a known machine's DISCOVER would be taken for an
			// unknown MAC and ignored (or leased a dynamic address). The
			// sockets are open already, so what arrives meanwhile waits in
			// their receive buffers (bounded by the kernel, like any burst)
			// and is answered once the inventory is whole.
			select {
			case <-s.ready:
			case <-ctx.Done():
				for _, c := range s.dhcpConns {
					c.Close()
				}
				return nil
			}
			return s.dhcpSrv.Serve(ctx, s.dhcpConns...)
		})
	}
	if s.ra != nil {
		s.start(ctx, "router solicitations", func() error { return s.ra.Serve(ctx) })
	}
	if s.imageCheck != nil {
		s.start(ctx, "bootimage check", func() error {
			// After the sync, so its watch starts from a synced cache
			// instead of timing out while the API server is away.
			select {
			case <-s.ready:
			case <-ctx.Done():
				return nil
			}
			return s.imageCheck.Start(ctx)
		})
	}
}

// serveHTTP serves srv on ln until srv is shut down.
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
