package server

import (
	"context"
	"errors"
	"fmt"
)

// Shutdown stops the services: the HTTP servers stop accepting and their
// in-flight requests may finish, then every service stops, all within
// ctx. It closes the sockets, the artifact store and the Events'
// broadcaster. On a Server never started it only closes what New opened.
// Its errors are logged too; calls after the first return the first's.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	s.mu.Lock()
	s.shutDown = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel == nil {
		s.release(false)
		return nil
	}
	cancel()
	var errs []error
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		s.log.Error(err, "http shutdown")
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	if err := s.probes.Shutdown(ctx); err != nil {
		s.log.Error(err, "metrics shutdown")
		errs = append(errs, fmt.Errorf("metrics: %w", err))
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err := fmt.Errorf("services still stopping: %w", ctx.Err())
		s.log.Error(err, "shutdown")
		errs = append(errs, err)
	}
	s.release(true)
	return errors.Join(errs...)
}

// release closes what New opened. Served sockets were closed by their
// services already, but the probes' (which http.Server.Shutdown closes
// only once it served); sockets never served are closed here.
func (s *Server) release(served bool) {
	if s.probeLn != nil {
		s.probeLn.Close()
	}
	if !served {
		s.closeUnserved()
	}
	if s.stopEvents != nil {
		s.stopEvents()
	}
	if s.store != nil {
		s.store.Close()
	}
}

// closeUnserved closes the sockets of services that never ran.
func (s *Server) closeUnserved() {
	if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.tftpConn != nil {
		s.tftpConn.Close()
	}
	for _, c := range s.dhcpConns {
		c.Close()
	}
	if s.ra != nil {
		// The responder closes its socket when Serve returns, at once
		// with a context that has ended.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.ra.Serve(ctx)
	}
}
