// Package accepts is a test HTTP server that counts the connections it
// accepts, so that a test can show a client never connected (a refused
// address, a redirect not followed) without waiting on time.
package accepts

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Server is an httptest server listening on one address of the test's
// choosing (127.0.0.2 is not 127.0.0.1 to a guard).
type Server struct {
	*httptest.Server
	accepts atomic.Int64
	probes  int64
}

// NewServer serves h on ip, on a free port, until the test ends. h answers
// GET /probe too (any status will do).
func NewServer(t testing.TB, ip string, h http.Handler) *Server {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Server: httptest.NewUnstartedServer(h)}
	s.Listener = listener{Listener: l, n: &s.accepts}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

type listener struct {
	net.Listener
	n *atomic.Int64
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Accepted is how many connections s accepted before now, the probes not
// counted. A probe is a request of an unguarded client that s answers: the
// kernel's accept queue is first in, first out, so any connection made
// before it has been accepted by the time it is answered.
func (s *Server) Accepted(t testing.TB) int64 {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := c.Get(s.URL + "/probe")
	if err != nil {
		t.Fatalf("probing %s: %v", s.URL, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.probes++
	return s.accepts.Load() - s.probes
}
