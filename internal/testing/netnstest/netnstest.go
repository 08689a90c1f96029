// Package netnstest helps tests run real network programs in Linux network
// namespaces: create and delete namespaces, join them with veth pairs and
// bridges, open sockets and run commands inside them, reach a loopback-only
// service of the test's own namespace from inside, and build and start the
// real kubefarm-pxe binary in a namespace.
//
// It is a non-test package so that several test packages share it
// (internal/testing/bootchain, pxe/dhcp and internal/testing/pxereplicas). Everything here needs root;
// New skips, loudly, when the test is not root or namespaces cannot be
// created at all.
package netnstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var seq atomic.Int32

// RequireRoot skips, loudly, when the test is not root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, NOT PASSED: this test needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIPPED, NOT PASSED: iproute2 `ip` is not installed, this test needs network namespaces")
	}
}

// Run runs a command and fails the test if it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// New creates a network namespace named <prefix>-<pid>-<n>, with lo up,
// deleted when the test ends. It skips, loudly, only when namespaces cannot
// be made here.
func New(t testing.TB, prefix string) string {
	t.Helper()
	RequireRoot(t)
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT PASSED: cannot create network namespaces here (ip netns add: %v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("deleting namespace %s: %v %s", name, err, out)
		}
	})
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Bridge adds bridge br to namespace ns, with address cidr ("" for none),
// and sets it up. Forwarding starts at once (no STP, no forward delay).
func Bridge(t testing.TB, ns, br, cidr string) {
	t.Helper()
	Run(t, "ip", "-n", ns, "link", "add", br, "type", "bridge", "forward_delay", "0", "stp_state", "0")
	if cidr != "" {
		Run(t, "ip", "-n", ns, "addr", "add", cidr, "dev", br)
	}
	Run(t, "ip", "-n", ns, "link", "set", br, "up")
}

// Attach joins namespace ns to bridge br of namespace brNs with a veth
// pair: port (in brNs) is enslaved to br, ifname is its peer in ns. mac
// ("" keeps the random one) and cidr ("" for no address) apply to ifname.
func Attach(t testing.TB, brNs, br, port, ns, ifname, mac, cidr string) {
	t.Helper()
	Run(t, "ip", "-n", brNs, "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", ns)
	Run(t, "ip", "-n", brNs, "link", "set", port, "master", br)
	Run(t, "ip", "-n", brNs, "link", "set", port, "up")
	if mac != "" {
		Run(t, "ip", "-n", ns, "link", "set", ifname, "address", mac)
	}
	if cidr != "" {
		Run(t, "ip", "-n", ns, "addr", "add", cidr, "dev", ifname)
	}
	Run(t, "ip", "-n", ns, "link", "set", ifname, "up")
}

// Do runs fn on an OS thread switched into namespace ns. Sockets fn opens
// stay in ns after the thread switches back. It runs on its own goroutine
// so that, if the thread cannot be switched back, it stays locked and the
// runtime discards it instead of reusing it in the wrong namespace.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("restoring the thread's namespace: %w", err))
			return // thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Listen opens a TCP listener inside ns, closed when the test ends.
func Listen(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := Do(ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Forward accepts connections on ln (inside a namespace) and joins each to
// a new connection to target, dialled from the test's own namespace: it
// lets a process in the namespace reach a loopback-only service outside.
func Forward(t testing.TB, ln net.Listener, target string) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			wg.Add(2)
			// Each direction ends by closing both ends, which ends the other.
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
}

// HTTPClient is an HTTP client whose connections are made inside ns.
func HTTPClient(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := Do(ns, func() (err error) {
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// LockedBuffer collects a process's output while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ServeBlobs serves blobs, keyed by URL path, over HTTP on ln (a Listen
// listener, typically) until the test ends; any other path is 404. It
// answers HEAD and Range requests as http.ServeContent does.
func ServeBlobs(t testing.TB, ln net.Listener, blobs map[string][]byte) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := blobs[r.URL.Path]; ok {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
			return
		}
		http.NotFound(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
}
