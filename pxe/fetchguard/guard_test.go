package fetchguard

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
)

// countingListener counts the connections the server accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// server is an HTTP server on ip (a loopback address) that counts the
// connections it accepts.
type server struct {
	*httptest.Server
	ln     *countingListener
	probes int64
}

func newServer(t *testing.T, ip string, h http.Handler) *server {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Server: httptest.NewUnstartedServer(h), ln: &countingListener{Listener: l}}
	s.Listener = s.ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// accepted is how many connections s accepted before now, the probes'
// excluded. The probe is a connection of an unguarded client answered by
// the server: the kernel's accept queue is first in, first out, so any
// connection made before it has been accepted by the time it is
// answered. No waiting on time.
func (s *server) accepted(t *testing.T) int64 {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(s.URL + "/probe")
	if err != nil {
		t.Fatalf("probing %s: %v", s.URL, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.probes++
	return s.ln.n.Load() - s.probes
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "content") }

func refusal(t *testing.T, err error) *RefusedError {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) {
		t.Fatalf("error %v is not a refusal", err)
	}
	return r
}

// TestGuardRefusesBeforeConnecting: the guarded client's request to a
// server on 127.0.0.1 fails with a loopback refusal and the server never
// sees a connection; once 127.0.0.1 is allowed the same request succeeds
// (so the listener does count the client's connections).
func TestGuardRefusesBeforeConnecting(t *testing.T) {
	srv := newServer(t, "127.0.0.1", http.HandlerFunc(ok))

	c := Client(New(Options{}).Transport())
	_, err := c.Get(srv.URL + "/kernel")
	if r := refusal(t, err); r.Rule.Class != ClassLoopback || r.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("refusal %+v, want 127.0.0.1 as loopback", r.Decision)
	}
	if n := srv.accepted(t); n != 0 {
		t.Fatalf("the server accepted %d connections from a refused client", n)
	}

	// The API server's address stays refused when its range is allowed.
	g := New(Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, APIServer: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	_, err = Client(g.Transport()).Get(srv.URL + "/kernel")
	if r := refusal(t, err); r.Rule.Class != ClassAPIServer {
		t.Errorf("refusal %+v, want the API server", r.Decision)
	}
	if n := srv.accepted(t); n != 0 {
		t.Fatalf("the server accepted %d connections from a refused client", n)
	}

	allowed := Client(New(Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}).Transport())
	resp, err := allowed.Get(srv.URL + "/kernel")
	if err != nil {
		t.Fatalf("allowed fetch: %v", err)
	}
	resp.Body.Close()
	if n := srv.accepted(t); n != 1 {
		t.Fatalf("the server accepted %d connections, want the allowed client's 1", n)
	}
}

// TestGuardRefusesRedirects: 127.0.0.1 is allowed and redirects to
// 127.0.0.2, which is not; the fetch fails with 127.0.0.2's refusal and
// the second server never sees a connection. A redirect to an allowed
// address is followed, and redirects are bounded.
func TestGuardRefusesRedirects(t *testing.T) {
	denied := newServer(t, "127.0.0.2", http.HandlerFunc(ok))
	target := newServer(t, "127.0.0.3", http.HandlerFunc(ok))
	var loops atomic.Int64
	first := newServer(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-denied":
			http.Redirect(w, r, denied.URL+"/kernel", http.StatusFound)
		case "/to-allowed":
			http.Redirect(w, r, target.URL+"/kernel", http.StatusMovedPermanently)
		case "/loop":
			loops.Add(1)
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			ok(w, r)
		}
	}))
	g := New(Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.0.3/32")}})
	c := Client(g.Transport())

	_, err := c.Get(first.URL + "/to-denied")
	if r := refusal(t, err); r.Rule.Class != ClassLoopback || r.Addr != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("refusal %+v, want 127.0.0.2 as loopback", r.Decision)
	}
	if n := denied.accepted(t); n != 0 {
		t.Fatalf("the redirect's target accepted %d connections", n)
	}

	resp, err := c.Get(first.URL + "/to-allowed")
	if err != nil {
		t.Fatalf("redirect to an allowed address: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "content" || target.accepted(t) != 1 {
		t.Errorf("redirect to an allowed address: body %q, target accepted %d", body, target.accepted(t))
	}

	_, err = c.Get(first.URL + "/loop")
	if !errors.Is(err, ErrTooManyRedirects) {
		t.Errorf("redirect loop: %v, want ErrTooManyRedirects", err)
	}
	if n := loops.Load(); n != MaxRedirects+1 {
		t.Errorf("redirect loop: %d requests, want %d (the first and %d redirects)", n, MaxRedirects+1, MaxRedirects)
	}
	if n := denied.accepted(t); n != 0 {
		t.Fatalf("127.0.0.2 accepted %d connections", n)
	}
}

// TestTransportIgnoresProxyEnvironment: a proxy from the environment
// would be the only connection checked; the transport has none.
func TestTransportIgnoresProxyEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://192.0.2.1:3128")
	t.Setenv("HTTPS_PROXY", "http://192.0.2.1:3128")
	tr := New(Options{}).Transport()
	if tr.Proxy != nil {
		req, _ := http.NewRequest(http.MethodGet, "http://registry.example.com/v2/", nil)
		u, _ := tr.Proxy(req)
		t.Errorf("transport proxies through %v", u)
	}
	if tr.DialContext == nil || tr.DialTLSContext != nil {
		t.Error("transport does not dial through the guarded dialer")
	}
}

func ExampleDecision_Reason() {
	g := New(Options{Denied: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}})
	for _, a := range []string{"169.254.169.254", "10.96.0.10", "203.0.113.5"} {
		err := g.Check(netip.MustParseAddr(a))
		fmt.Println(a, err)
	}
	// Output:
	// 169.254.169.254 refused to connect: 169.254.169.254 is a link-local address (169.254.0.0/16)
	// 10.96.0.10 refused to connect: 10.96.0.10 is in a denied range (10.96.0.0/12)
	// 203.0.113.5 <nil>
}
