package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// TestServer builds replicas from Options against a real API server, as
// cmd/kubefarm-pxe does from its flags: one serves until Shutdown, one
// until its context ends, one is shut down without ever serving, one fails
// in New on a taken address.
// Every one must leave no socket open behind it.
func TestServer(t *testing.T) {
	env := testenv.StartT(t, testenv.Options{})
	options := func(t *testing.T) Options {
		o := DefaultOptions()
		o.Config = env.Config
		o.ServerIP = "127.0.0.1"
		o.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		o.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		o.TFTPAddr = "" // port 69 is the host's; tftp has its own tests
		o.CacheDir = t.TempDir()
		return o
	}

	t.Run("serves until Shutdown", func(t *testing.T) { testServesUntilShutdown(t, options(t)) })
	t.Run("Start returns when its context ends", func(t *testing.T) { testStopsWithContext(t, options(t)) })
	t.Run("Shutdown without Start", func(t *testing.T) { testShutdownWithoutStart(t, options(t)) })
	t.Run("New closes what it opened when it fails", func(t *testing.T) { testNewFailsClosed(t, options(t)) })
}

// testServesUntilShutdown: ready once synced, Start refused twice, Shutdown
// ends Start with nil and frees the sockets; no Start after Shutdown.
func testServesUntilShutdown(t *testing.T, o Options) {
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- s.Start(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return status(t, "http://"+o.MetricsAddr+"/healthz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/healthz never 200: %v", err)
	}
	// The boot service answers on its own address, and not /healthz.
	if code := status(t, "http://"+o.HTTPAddr+"/healthz"); code != http.StatusNotFound {
		t.Errorf("boot service /healthz: %d, want 404", code)
	}
	if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "started twice") {
		t.Errorf("second Start: %v, want refused", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Errorf("Start after Shutdown returned %v, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("Start did not return after Shutdown")
	}
	assertFree(t, o.HTTPAddr, o.MetricsAddr)
	if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "after Shutdown") {
		t.Errorf("Start after Shutdown: %v, want refused", err)
	}
}

// testStopsWithContext: Start returns nil once its context ends.
func testStopsWithContext(t *testing.T, o Options) {
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- s.Start(ctx) }()
	cancel()
	select {
	case err := <-started:
		if err != nil {
			t.Errorf("Start: %v, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Start did not return once its context ended")
	}
	assertFree(t, o.HTTPAddr, o.MetricsAddr)
}

// testShutdownWithoutStart: Shutdown closes the sockets New opened.
func testShutdownWithoutStart(t *testing.T, o Options) {
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	assertFree(t, o.HTTPAddr, o.MetricsAddr)
}

// testNewFailsClosed: New failing on a taken --metrics-addr names it and
// closes the sockets it had opened.
func testNewFailsClosed(t *testing.T, o Options) {
	taken, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if s, err := New(o); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("New with --metrics-addr taken: %v, %v; want the error naming it", s, err)
	}
	assertFree(t, o.HTTPAddr)
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// status is url's HTTP status, 0 when it does not answer.
func status(t *testing.T, url string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// assertFree fails unless every addr can be listened on again.
func assertFree(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s still taken: %v", a, err)
			continue
		}
		ln.Close()
	}
}
