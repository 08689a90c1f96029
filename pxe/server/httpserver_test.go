package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	conntest "github.com/kubefarm/kubefarm/internal/testing/conns"
	"github.com/kubefarm/kubefarm/pxe/httplimit"
)

// Moved from cmd/kubefarm-pxe with the functions they test; where they
// parsed flags they set the options the flags map onto.

func TestRouteDeadlines(t *testing.T) {
	o := DefaultOptions()
	o.HTTP.ReadTimeout, o.HTTP.WriteTimeout, o.ArtifactWait = 30*time.Second, time.Minute, 2*time.Minute
	api := httplimit.Deadlines{Read: 30 * time.Second, Write: time.Minute}
	for _, tc := range []struct {
		path string
		want httplimit.Deadlines
	}{
		{"/artifacts/sha256:" + strings.Repeat("0", 64), httplimit.Deadlines{}},
		{"/ipxe/ipxe.efi", httplimit.Deadlines{}},
		// /boot waits for the artifacts first.
		{"/boot/02:00:00:00:00:01.ipxe", httplimit.Deadlines{Read: 150 * time.Second, Write: 3 * time.Minute}},
		{"/config/02:00:00:00:00:01", api},
		{"/secret/02:00:00:00:00:01", api},
		{"/report", api},
		{"/heartbeat", api},
		{"/healthz", api},
		{"/", api},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		if got := o.routeDeadlines(r); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.path, got, tc.want)
		}
	}
}

// startBootServer serves h as Start does, on 127.0.0.1, with the default
// options as set changes them.
func startBootServer(t *testing.T, h http.Handler, set ...func(*Options)) (string, *prometheus.Registry) {
	t.Helper()
	o := DefaultOptions()
	for _, f := range set {
		f(&o)
	}
	if err := o.HTTP.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ln, err := o.bootListener(raw, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := o.bootHTTPServer(h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return raw.Addr().String(), reg
}

// get sends one GET on c and reads the status line: true for a 200.
func get(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: pxe\r\n\r\n"); err != nil {
		return false
	}
	buf := make([]byte, 12)
	_, err := io.ReadFull(c, buf)
	return err == nil && string(buf) == "HTTP/1.1 200"
}

// refused is kubefarm_pxe_http_connections_refused_total in reg.
func refused(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kubefarm_pxe_http_connections_refused_total" {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no kubefarm_pxe_http_connections_refused_total")
	return 0
}

// TestBootHTTPServerLimits runs the boot service's server as New builds it
// from its options, on 127.0.0.1, against a slow header, a large header and
// one connection too many.
func TestBootHTTPServerLimits(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

	t.Run("slow header", func(t *testing.T) { testSlowHeader(t, ok) })
	t.Run("header over 8 KiB", func(t *testing.T) { testLargeHeader(t, ok) })
	t.Run("connections per IP", func(t *testing.T) { testConnsPerIP(t, ok) })
}

func testSlowHeader(t *testing.T, ok http.Handler) {
	addr, _ := startBootServer(t, ok, func(o *Options) { o.HTTP.ReadHeaderTimeout = 150 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /report HTTP/1.1\r\nHost: pxe\r\n")
	n := 0
	conntest.WaitClosed(t, c, 5*time.Second, func() { n++; _, _ = fmt.Fprintf(c, "X-Slow-%d: y\r\n", n) })
	if n == 0 {
		t.Error("closed before any header line trickled in")
	}
}

func testLargeHeader(t *testing.T, ok http.Handler) {
	addr, _ := startBootServer(t, ok)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /boot/02:00:00:00:00:01.ipxe HTTP/1.1\r\nHost: pxe\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 16<<10))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "HTTP/1.1 431" {
		t.Errorf("status line %q (%v), want HTTP/1.1 431", buf, err)
	}
}

func testConnsPerIP(t *testing.T, ok http.Handler) {
	addr, reg := startBootServer(t, ok, func(o *Options) { o.HTTP.MaxConnsPerIP = 2 })
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if !get(c) {
			t.Fatalf("connection %d not answered", i+1)
		}
		conns = append(conns, c)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	conntest.WaitClosed(t, third, 5*time.Second, nil)
	if got := refused(t, reg); got != 1 {
		t.Errorf("kubefarm_pxe_http_connections_refused_total = %v, want 1", got)
	}
	conns[0].Close()
	// The server sees the close on its next read of that connection:
	// until then a new one may still be refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		answered := get(c)
		defer c.Close()
		if answered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one of two closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
