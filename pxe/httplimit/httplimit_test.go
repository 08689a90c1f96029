package httplimit_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/conns"
	"github.com/kubefarm/kubefarm/pxe/httplimit"
)

// serve runs srv on a fresh 127.0.0.1 listener capped at max connections
// per IP, and stops it when the test ends.
func serve(t *testing.T, srv *http.Server, max int) (*httplimit.Listener, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httplimit.NewListener(inner, max)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln, inner.Addr().String()
}

// poll calls cond until it holds, failing the test after d.
func poll(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// roundTrip sends one keep-alive GET on c and reads the response's status.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, path string) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: pxe\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

func TestSlowHeaderIsCut(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(ok), ReadHeaderTimeout: 150 * time.Millisecond}
	_, addr := serve(t, srv, 0)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: pxe\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Slowloris: a header line now and then, never the blank line. The
	// deadline is the whole header's, so the trickle does not extend it.
	n := 0
	conns.WaitClosed(t, c, 5*time.Second, func() {
		n++
		_, _ = fmt.Fprintf(c, "X-Slow-%d: y\r\n", n)
	})
	if n == 0 {
		t.Error("closed before the client trickled any header line: the test did not exercise a slow header")
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("closed after %s, before the header timeout", took)
	}
}

func TestLargeHeaderIs431(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(ok), MaxHeaderBytes: 8 << 10}
	_, addr := serve(t, srv, 0)
	for _, tc := range []struct {
		name string
		size int
		want int
	}{
		{"small", 1 << 10, http.StatusOK},
		// net/http allows 4 KiB over MaxHeaderBytes before it refuses.
		{"64 KiB", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			req.Header.Set("X-Big", strings.Repeat("a", tc.size))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestConnectionCapPerIP(t *testing.T) {
	const max = 3
	ln, addr := serve(t, &http.Server{Handler: http.HandlerFunc(ok)}, max)
	lo := netip.MustParseAddr("127.0.0.1")

	// max connections, each shown accepted by a request answered on it.
	var open []net.Conn
	for i := 0; i < max; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code := roundTrip(t, c, bufio.NewReader(c), "/"); code != http.StatusOK {
			t.Fatalf("connection %d: status %d", i+1, code)
		}
		open = append(open, c)
	}
	if got := ln.Open(lo); got != max {
		t.Fatalf("open connections from %s = %d, want %d", lo, got, max)
	}

	// One more from the same IP is closed at once, unanswered.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_, _ = io.WriteString(extra, "GET / HTTP/1.1\r\nHost: pxe\r\n\r\n")
	conns.WaitClosed(t, extra, 5*time.Second, nil)
	if ln.Refused() != 1 {
		t.Errorf("refused = %d, want 1", ln.Refused())
	}

	// Another IP has a cap of its own (127.0.0.2 is loopback on Linux).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if code := roundTrip(t, other, bufio.NewReader(other), "/"); code != http.StatusOK {
		t.Fatalf("from 127.0.0.2: status %d", code)
	}

	// Once one closes, the server notices and a new one is accepted.
	open[0].Close()
	poll(t, "the closed connection's place given back", 5*time.Second, func() bool { return ln.Open(lo) == max-1 })
	again, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if code := roundTrip(t, again, bufio.NewReader(again), "/"); code != http.StatusOK {
		t.Fatalf("after a close: status %d", code)
	}
	if ln.Refused() != 1 {
		t.Errorf("refused = %d, want still 1", ln.Refused())
	}
}

// TestConnKeepsSendfile: the wrapped connection still offers net/http the
// io.ReaderFrom (sendfile) and half-close of the TCP connection under it.
func TestConnKeepsSendfile(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httplimit.NewListener(inner, 1)
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(io.ReaderFrom); !ok {
		t.Error("the accepted connection is no io.ReaderFrom: net/http would not use sendfile")
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the accepted connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Errorf("CloseWrite: %v", err)
	}
}

func TestDeadlinesByRoute(t *testing.T) {
	const short = 150 * time.Millisecond
	release := make(chan struct{})
	mux := http.NewServeMux()
	// A handler that overruns: it waits for its context, which net/http
	// cancels when the read deadline passes, then tries to answer.
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		_, _ = io.WriteString(w, "late\n")
	})
	// A slow download: one chunk, then another after the short deadline.
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "chunk 1\n")
		http.NewResponseController(w).Flush()
		time.Sleep(3 * short) // the slowness under test, not synchronisation
		_, _ = io.WriteString(w, "chunk 2\n")
	})
	deadlines := func(r *http.Request) httplimit.Deadlines {
		if r.URL.Path == "/download" {
			return httplimit.Deadlines{}
		}
		return httplimit.Deadlines{Read: short, Write: short}
	}
	srv := &http.Server{Handler: httplimit.Handler(mux, deadlines)}
	_, addr := serve(t, srv, 0)
	defer close(release)

	t.Run("an overrunning API request is cut", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /api HTTP/1.1\r\nHost: pxe\r\n\r\n")
		start := time.Now()
		// No response: the context ends at the read deadline and the
		// write after it fails, closing the connection.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if len(b) > 0 && strings.Contains(string(b), "late") {
			t.Errorf("the overrunning handler's answer went out: %q", b)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection was not closed within 5s")
		}
		if took := time.Since(start); took < short/2 {
			t.Errorf("cut after %s, before the deadline", took)
		}
	})

	t.Run("a slow download outlives the API deadlines on the same connection", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		// An API request first, which sets deadlines on the connection:
		// the download after it on the same connection must clear them.
		go func() { release <- struct{}{} }()
		if code := roundTrip(t, c, r, "/api"); code != http.StatusOK {
			t.Fatalf("/api: %d", code)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET /download HTTP/1.1\r\nHost: pxe\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "chunk 1\nchunk 2\n" {
			t.Errorf("download body %q, err %v: cut by a deadline", body, err)
		}
	})
}
