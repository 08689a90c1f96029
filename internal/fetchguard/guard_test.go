package fetchguard

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/kubefarm/kubefarm/internal/testing/accepts"
)

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
	srv := accepts.NewServer(t, "127.0.0.1", http.HandlerFunc(ok))

	c := Client(New(Options{}).Transport())
	_, err := c.Get(srv.URL + "/kernel")
	if r := refusal(t, err); r.Rule.Class != ClassLoopback || r.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("refusal %+v, want 127.0.0.1 as loopback", r.Decision)
	}
	if n := srv.Accepted(t); n != 0 {
		t.Fatalf("the server accepted %d connections from a refused client", n)
	}

	// The API server's address stays refused when its range is allowed.
	g := New(Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, APIServer: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	_, err = Client(g.Transport()).Get(srv.URL + "/kernel")
	if r := refusal(t, err); r.Rule.Class != ClassAPIServer {
		t.Errorf("refusal %+v, want the API server", r.Decision)
	}
	if n := srv.Accepted(t); n != 0 {
		t.Fatalf("the server accepted %d connections from a refused client", n)
	}

	allowed := Client(New(Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}).Transport())
	resp, err := allowed.Get(srv.URL + "/kernel")
	if err != nil {
		t.Fatalf("allowed fetch: %v", err)
	}
	resp.Body.Close()
	if n := srv.Accepted(t); n != 1 {
		t.Fatalf("the server accepted %d connections, want the allowed client's 1", n)
	}
}

// TestGuardRefusesRedirects: 127.0.0.1 is allowed and redirects to
// 127.0.0.2, which is not; the fetch fails with 127.0.0.2's refusal and
// the second server never sees a connection. A redirect to an allowed
// address is followed, and redirects are bounded.
func TestGuardRefusesRedirects(t *testing.T) {
	denied := accepts.NewServer(t, "127.0.0.2", http.HandlerFunc(ok))
	target := accepts.NewServer(t, "127.0.0.3", http.HandlerFunc(ok))
	var loops atomic.Int64
	first := accepts.NewServer(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	if n := denied.Accepted(t); n != 0 {
		t.Fatalf("the redirect's target accepted %d connections", n)
	}

	resp, err := c.Get(first.URL + "/to-allowed")
	if err != nil {
		t.Fatalf("redirect to an allowed address: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "content" || target.Accepted(t) != 1 {
		t.Errorf("redirect to an allowed address: body %q, target accepted %d", body, target.Accepted(t))
	}

	_, err = c.Get(first.URL + "/loop")
	if !errors.Is(err, ErrTooManyRedirects) {
		t.Errorf("redirect loop: %v, want ErrTooManyRedirects", err)
	}
	if n := loops.Load(); n != MaxRedirects+1 {
		t.Errorf("redirect loop: %d requests, want %d (the first and %d redirects)", n, MaxRedirects+1, MaxRedirects)
	}
	if n := denied.Accepted(t); n != 0 {
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
