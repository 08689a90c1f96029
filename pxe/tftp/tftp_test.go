package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	pintftp "github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want error
	}{
		{"undionly.kpxe", nil},
		{"ipxe.efi", nil},
		{"snponly.efi", nil},
		{"ipxe-arm64.efi", nil},
		{"", ErrEmptyName},
		{"../../etc/passwd", ErrBadCharacter},
		{"..", ErrBadCharacter},
		{".", ErrBadCharacter},
		{".hidden", ErrBadCharacter},
		{"/undionly.kpxe", ErrBadCharacter},
		{"/etc/passwd", ErrBadCharacter},
		{"ipxe/undionly.kpxe", ErrBadCharacter},
		{`..\undionly.kpxe`, ErrBadCharacter},
		{"undionly.kpxe\x00.txt", ErrBadCharacter},
		{"undionly.kpxe\n", ErrBadCharacter},
		{"undionly .kpxe", ErrBadCharacter},
		{"undionly.kpxé", ErrBadCharacter},
		{strings.Repeat("a", MaxNameLen+1), ErrNameTooLong},
		{strings.Repeat("a", MaxNameLen), ErrNotAllowed},
		{"UNDIONLY.KPXE", ErrNotAllowed}, // names are case-sensitive on disk
		{"ipxe.pxe", ErrNotAllowed},      // present in /usr/lib/ipxe but not allow-listed
		{"undionly.kpxe.", ErrNotAllowed},
	} {
		if got := ValidateName(tc.name); !errors.Is(got, tc.want) {
			t.Errorf("ValidateName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "../../etc/passwd", "/ipxe.efi", "a\x00b", ".", "..", "ipxe.efi/..", "snponly.efi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		// Whatever passes must be a single, allow-listed path element:
		// joining it to a directory cannot leave that directory.
		if filepath.Base(name) != name || filepath.Clean(name) != name || filepath.IsAbs(name) {
			t.Fatalf("accepted %q, which is not one clean path element", name)
		}
		found := false
		for _, a := range DefaultFiles {
			found = found || a == name
		}
		if !found {
			t.Fatalf("accepted %q, which is not allow-listed", name)
		}
	})
}

func TestConfigRejectsBadAllowList(t *testing.T) {
	if _, err := NewServer(Config{Files: []string{"../x"}}, nil, testr.New(t)); err == nil {
		t.Fatal("an allow-list entry with a path escape was accepted")
	}
}

func TestConfigSpinWait(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
		err      bool
	}{
		{0, DefaultSpinWait, false},
		{-1, 0, false},
		{20 * time.Microsecond, 20 * time.Microsecond, false},
		{2 * time.Millisecond, 0, true},
	} {
		s, err := NewServer(Config{SpinWait: tc.in}, nil, testr.New(t))
		if tc.err {
			if err == nil {
				t.Errorf("SpinWait %s accepted", tc.in)
			}
			continue
		}
		if err != nil || s.cfg.SpinWait != tc.want {
			t.Errorf("SpinWait %s: %v, err %v; want %s", tc.in, s.cfg.SpinWait, err, tc.want)
		}
	}
}

// TestSpinStopsForSlowClients: a wait that found no reply within the spin
// turns polling off; a reply already queued is read either way.
func TestSpinStopsForSlowClients(t *testing.T) {
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := dialTransfer(net.IPv4(127, 0, 0, 1), client.LocalAddr().(*net.UDPAddr), 50*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.send([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, srv, err := client.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("client got %q, %v", buf[:n], err)
	}
	ack := []byte{0, opACK, 0, 1}
	if _, err := client.WriteToUDP(ack, srv); err != nil {
		t.Fatal(err)
	}
	if n, err := c.recv(buf, time.Second); err != nil || !bytes.Equal(buf[:n], ack) {
		t.Fatalf("queued reply while polling: %q, %v", buf[:n], err)
	}
	if _, err := c.recv(buf, time.Millisecond); !errors.Is(err, errTimeout) {
		t.Fatalf("no reply: err %v, want %v", err, errTimeout)
	}
	if c.spinning {
		t.Fatal("still polling after a wait longer than the spin")
	}
	if _, err := client.WriteToUDP(ack, srv); err != nil {
		t.Fatal(err)
	}
	if n, err := c.recv(buf, time.Second); err != nil || !bytes.Equal(buf[:n], ack) {
		t.Fatalf("queued reply while blocking: %q, %v", buf[:n], err)
	}
}

// fixture is a running server on loopback.
type fixture struct {
	addr    string
	port    string
	dir     string
	metrics *Metrics
	// stop cancels Serve's context and returns what Serve returned; the
	// test's end calls it too (it runs once).
	stop func() error
}

// startServer serves dir on 127.0.0.1:<free port> until the test ends.
func startServer(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return startServerWith(t, cfg, nil)
}

// startPolledServer is startServer with every transfer on the netpoller's
// sockets (polledConn), as when more transfers run than GOMAXPROCS.
func startPolledServer(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return startServerWith(t, cfg, func(s *Server) { s.blockingLimit = func() int { return 0 } })
}

type startFunc func(*testing.T, Config) *fixture

// forEachSocket runs test against a server on each kind of transfer
// socket: blocking (transferConn) polling first as by default, blocking
// without polling, and netpoller (polledConn).
func forEachSocket(t *testing.T, test func(*testing.T, startFunc)) {
	t.Run("blocking", func(t *testing.T) { test(t, startServer) })
	t.Run("blocking without spin", func(t *testing.T) {
		test(t, func(t *testing.T, cfg Config) *fixture {
			cfg.SpinWait = -1
			return startServer(t, cfg)
		})
	})
	t.Run("netpoller", func(t *testing.T) { test(t, startPolledServer) })
}

// TestClientsOnPolledSockets: curl and atftp (with a window) fetch from a
// server whose transfers all run on the netpoller's sockets.
func TestClientsOnPolledSockets(t *testing.T) {
	dir := testDir(t)
	f := startPolledServer(t, Config{Dir: dir})
	t.Run("curl", func(t *testing.T) {
		bin := need(t, "curl", "curl")
		out := filepath.Join(t.TempDir(), "ipxe.efi")
		run(t, bin, "-sS", "--max-time", "60", "--tftp-blksize", "1468", "-o", out, "tftp://127.0.0.1:"+f.port+"/ipxe.efi")
		sameFile(t, filepath.Join(dir, "ipxe.efi"), out)
	})
	t.Run("atftp windowsize", func(t *testing.T) {
		bin := need(t, "atftp", "atftp")
		out := filepath.Join(t.TempDir(), "ipxe.efi")
		log := run(t, bin, "--trace", "--option", "blksize 1468", "--option", "windowsize 8", "-g", "-r", "ipxe.efi", "-l", out, "127.0.0.1", f.port)
		sameFile(t, filepath.Join(dir, "ipxe.efi"), out)
		if !strings.Contains(log, "windowsize: 8") {
			t.Errorf("OACK without windowsize 8:\n%s", log)
		}
	})
	// The server counts a transfer once it has read the last ACK, which
	// the client may send and exit before: wait for the count.
	ok := func() float64 { return testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultOK)) }
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return ok() >= 2, nil
	}); err != nil || ok() != 2 {
		t.Errorf("ok transfers = %v, want 2 (%v)", ok(), err)
	}
}

func startServerWith(t *testing.T, cfg Config, tune func(*Server)) *fixture {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, m, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(s)
	}
	conn, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := conn.LocalAddr().(*net.UDPAddr)
	return &fixture{addr: addr.String(), port: strconv.Itoa(addr.Port), dir: s.cfg.Dir, metrics: m, stop: stop}
}

// testDir holds the Debian iPXE binaries when installed, plus a random
// ipxe-arm64.efi whose size is an exact multiple of 1428 so that the
// zero-length final block is exercised.
func testDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"undionly.kpxe", "ipxe.efi", "snponly.efi"} {
		b, err := os.ReadFile(filepath.Join(DefaultDir, n))
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("SKIPPED, NOT PASSED: %s/%s is missing; install the Debian package ipxe", DefaultDir, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := make([]byte, 1428*40)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ipxe-arm64.efi"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func need(t *testing.T, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("SKIPPED, NOT PASSED: %s not found; install the Debian package %s", bin, pkg)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Logf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func sameFile(t *testing.T, want, got string) {
	t.Helper()
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("fetched file: %v", err)
	}
	if !bytes.Equal(w, g) {
		t.Fatalf("%s: fetched %d bytes, not identical to the %d-byte source", filepath.Base(want), len(g), len(w))
	}
}

func TestClients(t *testing.T) {
	dir := testDir(t)
	f := startServer(t, Config{Dir: dir})
	files := []string{"undionly.kpxe", "ipxe.efi", "snponly.efi", "ipxe-arm64.efi"}

	t.Run("tftp-hpa", func(t *testing.T) {
		// tftp-hpa 5.2 negotiates no options (no blksize, no tsize): this is
		// the plain RFC 1350 path with 512-byte blocks that old PXE ROMs use.
		bin := need(t, "tftp", "tftp-hpa")
		for _, n := range files {
			out := filepath.Join(t.TempDir(), n)
			run(t, bin, "-m", "binary", "127.0.0.1", f.port, "-c", "get", n, out)
			sameFile(t, filepath.Join(dir, n), out)
		}
	})
	t.Run("atftp", func(t *testing.T) {
		bin := need(t, "atftp", "atftp")
		for _, n := range files {
			out := filepath.Join(t.TempDir(), n)
			log := run(t, bin, "--trace", "--option", "blksize 1428", "--option", "tsize 0", "-g", "-r", n, "-l", out, "127.0.0.1", f.port)
			sameFile(t, filepath.Join(dir, n), out)
			// atftp prints the OACK it received; both options must be in it,
			// tsize with the file's real size.
			fi, _ := os.Stat(filepath.Join(dir, n))
			if !strings.Contains(log, "blksize: 1428") || !strings.Contains(log, "tsize: "+strconv.FormatInt(fi.Size(), 10)) {
				t.Errorf("%s: OACK did not carry blksize 1428 and tsize %d:\n%s", n, fi.Size(), log)
			}
		}
	})
	t.Run("atftp blksize capped", func(t *testing.T) {
		// A client asking for more than MaxBlockSize gets the cap in the
		// OACK, so blocks still fit an Ethernet frame.
		bin := need(t, "atftp", "atftp")
		out := filepath.Join(t.TempDir(), "ipxe.efi")
		log := run(t, bin, "--trace", "--option", "blksize 8192", "-g", "-r", "ipxe.efi", "-l", out, "127.0.0.1", f.port)
		sameFile(t, filepath.Join(dir, "ipxe.efi"), out)
		if !strings.Contains(log, "blksize: 1468") {
			t.Errorf("OACK did not cap blksize at 1468:\n%s", log)
		}
	})
	t.Run("atftp windowsize", func(t *testing.T) {
		// atftp asks for an RFC 7440 window of 8 and gets it: one ACK per
		// 8 blocks (and one for the OACK).
		bin := need(t, "atftp", "atftp")
		out := filepath.Join(t.TempDir(), "ipxe.efi")
		log := run(t, bin, "--trace", "--option", "blksize 1468", "--option", "windowsize 8", "-g", "-r", "ipxe.efi", "-l", out, "127.0.0.1", f.port)
		sameFile(t, filepath.Join(dir, "ipxe.efi"), out)
		oack := log[strings.Index(log, "received OACK"):]
		oack = oack[:strings.IndexByte(oack, '\n')]
		if !strings.Contains(oack, "blksize: 1468") || !strings.Contains(oack, "windowsize: 8") {
			t.Errorf("OACK %q: want blksize 1468 and windowsize 8", oack)
		}
		fi, _ := os.Stat(out)
		blocks := int(fi.Size()/1468 + 1)
		if acks, want := strings.Count(log, "sent ACK"), (blocks+7)/8+1; acks != want {
			t.Errorf("atftp sent %d ACKs for %d blocks in windows of 8 and the OACK, want %d", acks, blocks, want)
		}
	})
	t.Run("curl", func(t *testing.T) {
		bin := need(t, "curl", "curl")
		for _, n := range files {
			out := filepath.Join(t.TempDir(), n)
			run(t, bin, "-sS", "--max-time", "60", "--tftp-blksize", "1428", "-o", out, "tftp://127.0.0.1:"+f.port+"/"+n)
			sameFile(t, filepath.Join(dir, n), out)
		}
	})
	t.Run("path escape refused", func(t *testing.T) {
		bin := need(t, "atftp", "atftp")
		out := filepath.Join(t.TempDir(), "passwd")
		log := run(t, bin, "-g", "-r", "../../etc/passwd", "-l", out, "127.0.0.1", f.port)
		if b, _ := os.ReadFile(out); len(b) > 0 {
			t.Fatalf("path escape served %d bytes", len(b))
		}
		if !strings.Contains(log, "forbidden character") {
			t.Errorf("atftp did not report the refusal:\n%s", log)
		}
		if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultRefused)); got != 1 {
			t.Errorf("refused transfers = %v, want 1", got)
		}
	})
	if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultOK)); got < 1 {
		t.Errorf("ok transfers = %v, want >= 1", got)
	}
	if got := testutil.ToFloat64(f.metrics.bytes); got < 1 {
		t.Errorf("bytes = %v, want > 0", got)
	}
}

// TestProtocol drives the server with pin/tftp's own client for the cases
// the command-line clients cannot express cleanly.
func TestProtocol(t *testing.T) {
	dir := testDir(t)
	f := startServer(t, Config{Dir: dir, Files: append([]string{"missing.efi"}, DefaultFiles...)})
	c, err := pintftp.NewClient(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTimeout(2 * time.Second)
	c.SetBlockSize(1428)
	c.RequestTSize(true)

	t.Run("get with tsize", func(t *testing.T) {
		wt, err := c.Receive("ipxe-arm64.efi", "octet")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "ipxe-arm64.efi"))
		if n, ok := wt.(pintftp.IncomingTransfer).Size(); !ok || n != int64(len(want)) {
			t.Errorf("tsize = %d, %v; want %d", n, ok, len(want))
		}
		var buf bytes.Buffer
		if _, err := wt.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatal("content differs")
		}
	})
	for _, tc := range []struct{ name, file, result string }{
		{"escape", "../../etc/passwd", ResultRefused},
		{"absolute", "/etc/passwd", ResultRefused},
		{"not allow-listed", "ipxe.pxe", ResultRefused},
		{"allow-listed but absent", "missing.efi", ResultNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(tc.result))
			if _, err := c.Receive(tc.file, "octet"); err == nil {
				t.Fatalf("%q was served", tc.file)
			}
			if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(tc.result)); got != before+1 {
				t.Errorf("%s count went %v -> %v", tc.result, before, got)
			}
		})
	}
	t.Run("write refused", func(t *testing.T) {
		rf, err := c.Send("undionly.kpxe", "octet")
		if err == nil {
			_, err = rf.ReadFrom(strings.NewReader("overwrite"))
		}
		if err == nil {
			t.Fatal("write accepted")
		}
		want, _ := os.ReadFile(filepath.Join(dir, "undionly.kpxe"))
		if bytes.Contains(want, []byte("overwrite")) {
			t.Fatal("file changed")
		}
		if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultWrite)); got != 1 {
			t.Errorf("write_refused = %v, want 1", got)
		}
	})
}

// TestBusy holds every transfer slot with a client that stops acknowledging,
// and checks that a further request is refused at once rather than queued.
func TestBusy(t *testing.T) {
	dir := testDir(t)
	f := startServer(t, Config{Dir: dir, MaxTransfers: 1, Timeout: time.Second, Retries: 1})

	// A raw RRQ that is never acknowledged keeps the one slot busy until
	// Timeout x Retries runs out.
	hold, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	srv, _ := net.ResolveUDPAddr("udp4", f.addr)
	rrq := append([]byte{0, 1}, []byte("undionly.kpxe\x00octet\x00")...)
	if _, err := hold.WriteTo(rrq, srv); err != nil {
		t.Fatal(err)
	}
	// The first DATA packet proves the slot is taken.
	buf := make([]byte, 600)
	if err := hold.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := hold.ReadFrom(buf); err != nil || n < 4 || buf[1] != 3 {
		t.Fatalf("no DATA for the holding request: n=%d err=%v", n, err)
	}

	c, err := pintftp.NewClient(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTimeout(2 * time.Second)
	_, err = c.Receive("ipxe.efi", "octet")
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("second transfer: err = %v, want a busy refusal", err)
	}
	if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultBusy)); got != 1 {
		t.Errorf("busy = %v, want 1", got)
	}
}

// TestRequestBeforeServe: a read request that reaches the socket before
// Serve runs still gets the blksize it asked for, answered from the address
// it came to. Both come from the packet's IP_PKTINFO (the interface, for
// its MTU), which the kernel records only for packets that arrive after
// the option is on; pin/tftp, which kubefarm-pxe used before, turned it on
// in Serve and answered such a request with blksize 512.
func TestRequestBeforeServe(t *testing.T) {
	dir := testDir(t)
	s, err := NewServer(Config{Dir: dir}, nil, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rrq := append([]byte{0, 1}, "undionly.kpxe\x00octet\x00blksize\x001468\x00"...)
	if _, err := c.WriteTo(rrq, conn.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	// The request is in the socket's queue before Serve starts.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, from, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x00\x06blksize\x001468\x00"; string(buf[:n]) != want {
		t.Fatalf("answer %q, want the OACK %q", buf[:n], want)
	}
	// Take the file in 1468-byte blocks to the end, so that Serve has no
	// transfer left to wait for when the test ends.
	fi, err := os.Stat(filepath.Join(dir, "undionly.kpxe"))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for block := 0; ; block++ {
		if _, err := c.WriteTo([]byte{0, 4, byte(block >> 8), byte(block)}, from); err != nil {
			t.Fatal(err)
		}
		if block > 0 && n < 4+1468 {
			break
		}
		if n, _, err = c.ReadFrom(buf); err != nil || n < 4 || buf[1] != 3 || n > 4+1468 {
			t.Fatalf("DATA %d: %d bytes %q, err %v; want at most 1468 bytes of data", block+1, n, buf[:min(n, 4)], err)
		}
		total += int64(n - 4)
	}
	if total != fi.Size() {
		t.Fatalf("received %d bytes, the file has %d", total, fi.Size())
	}
}

// TestServeWaitsForTransfers: when ctx ends, Serve returns only after the
// transfers under way have ended (here by running out of retries), so that
// kubefarm-pxe's shutdown does not cut a machine's download and a
// transfer's goroutine does not outlive its Server.
func TestServeWaitsForTransfers(t *testing.T) {
	f := startServer(t, Config{Dir: testDir(t), Timeout: 100 * time.Millisecond, Retries: 1})
	// A request whose first block is never acknowledged.
	if _, p, _ := rawRRQ(t, f, "undionly.kpxe"); len(p) < 4 || p[1] != 3 {
		t.Fatalf("no DATA: % x", p)
	}
	if err := f.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(ResultFailed)); got != 1 {
		t.Fatalf("Serve returned with the transfer still running (failed transfers = %v, want 1)", got)
	}
}

// rawRRQ sends a read request for name with the given options (name,
// value pairs) from a fresh socket and returns the socket and the first
// packet the server answered, with its source (the transfer's port).
func rawRRQ(t *testing.T, f *fixture, name string, opts ...string) (*net.UDPConn, []byte, *net.UDPAddr) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rrq := append([]byte{0, 1}, name+"\x00octet\x00"...)
	for _, o := range opts {
		rrq = append(rrq, o+"\x00"...)
	}
	srv, _ := net.ResolveUDPAddr("udp4", f.addr)
	if _, err := c.WriteTo(rrq, srv); err != nil {
		t.Fatal(err)
	}
	p, from := rawRead(t, c)
	return c, p, from
}

// rawRead returns the next packet on c. The deadline only bounds a test
// that would otherwise hang: every read expects a packet.
func rawRead(t *testing.T, c *net.UDPConn) ([]byte, *net.UDPAddr) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	n, from, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no packet from the server: %v", err)
	}
	return buf[:n], from
}

func rawACK(t *testing.T, c *net.UDPConn, to *net.UDPAddr, block uint16) {
	t.Helper()
	if _, err := c.WriteTo([]byte{0, 4, byte(block >> 8), byte(block)}, to); err != nil {
		t.Fatal(err)
	}
}

// oackOptions parses an OACK; it fails the test on any other packet.
func oackOptions(t *testing.T, p []byte) map[string]string {
	t.Helper()
	if len(p) < 2 || p[1] != 6 {
		t.Fatalf("want an OACK, got opcode %v: %q", p[:min(2, len(p))], p)
	}
	f := strings.Split(strings.TrimSuffix(string(p[2:]), "\x00"), "\x00")
	if len(f)%2 != 0 {
		t.Fatalf("OACK with an odd number of fields: %q", p)
	}
	opts := map[string]string{}
	for i := 0; i < len(f); i += 2 {
		opts[f[i]] = f[i+1]
	}
	return opts
}

// dataBlock returns the block number and payload of a DATA packet; it
// fails the test on any other packet.
func dataBlock(t *testing.T, p []byte) (uint16, []byte) {
	t.Helper()
	if len(p) < 4 || p[1] != 3 {
		t.Fatalf("want DATA, got %q", p[:min(40, len(p))])
	}
	return uint16(p[2])<<8 | uint16(p[3]), p[4:]
}

// TestWindowsize: a client asking for an RFC 7440 window (EDK2's PXE
// driver asks for 4, PcdPxeTftpWindowSize) gets it in the OACK, and the
// server sends that many blocks before it waits for an ACK, never more.
// A block lost inside a window is sent again after the ACK of the block
// before it; the file arrives intact either way.
func TestWindowsize(t *testing.T) {
	forEachSocket(t, testWindowsize)
}

func testWindowsize(t *testing.T, start startFunc) {
	dir := testDir(t)
	f := start(t, Config{Dir: dir, Timeout: 200 * time.Millisecond})
	want, err := os.ReadFile(filepath.Join(dir, "ipxe.efi"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lose := range []uint16{0, 10, 9} {
		c, p, srv := rawRRQ(t, f, "ipxe.efi", "blksize", "1468", "tsize", "0", "windowsize", "4")
		opts := oackOptions(t, p)
		if opts["windowsize"] != "4" || opts["blksize"] != "1468" || opts["tsize"] != strconv.Itoa(len(want)) {
			t.Fatalf("OACK %v, want windowsize 4, blksize 1468 and tsize %d", opts, len(want))
		}
		rawACK(t, c, srv, 0)
		got, acks := readWindowed(t, c, srv, 4, lose)
		if !bytes.Equal(got, want) {
			t.Fatalf("block %d lost: received %d bytes, not identical to the %d-byte file", lose, len(got), len(want))
		}
		if blocks := len(want)/1468 + 1; lose == 0 && acks != (blocks+3)/4 {
			t.Errorf("%d ACKs for %d blocks in windows of 4, want %d", acks, blocks, (blocks+3)/4)
		}
	}
}

// TestWindowsizeOff: with MaxWindowSize 1 the OACK leaves windowsize out,
// which RFC 7440 reads as a window of one, and the transfer is lockstep.
func TestWindowsizeOff(t *testing.T) {
	dir := testDir(t)
	f := startServer(t, Config{Dir: dir, MaxWindowSize: 1})
	want, err := os.ReadFile(filepath.Join(dir, "ipxe.efi"))
	if err != nil {
		t.Fatal(err)
	}
	c, p, srv := rawRRQ(t, f, "ipxe.efi", "blksize", "1468", "windowsize", "8")
	if opts := oackOptions(t, p); opts["windowsize"] != "" || opts["blksize"] != "1468" {
		t.Fatalf("OACK %v, want blksize 1468 and no windowsize", opts)
	}
	rawACK(t, c, srv, 0)
	if got := readLockstep(t, c, srv, 0); !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, not identical to the %d-byte file", len(got), len(want))
	}
}

// readWindowed receives a transfer whose OACK has been acknowledged, as an
// RFC 7440 client with the given window: it takes blocks in order,
// acknowledges after window blocks since its last ACK and at the end,
// answers a block it did not expect with the ACK of the last it holds, and
// drops the first arrival of block lose (0: none). Without a loss, more
// than window blocks between two of its ACKs fails the test. It returns
// the data and the ACKs it sent.
func readWindowed(t *testing.T, c *net.UDPConn, srv *net.UDPAddr, window int, lose uint16) ([]byte, int) {
	t.Helper()
	var got []byte
	expect, since, acks, lost := uint16(1), 0, 0, false
	ack := func(b uint16) {
		rawACK(t, c, srv, b)
		acks++
		since = 0
	}
	for {
		p, from := rawRead(t, c)
		if from.String() != srv.String() {
			t.Fatalf("block from %v, the transfer is on %v", from, srv)
		}
		n, data := dataBlock(t, p)
		if n == lose && !lost {
			lost = true
			continue
		}
		if n != expect {
			ack(expect - 1)
			continue
		}
		if since++; since > window && lose == 0 {
			t.Fatalf("block %d is the %dth since the last ACK, window %d", n, since, window)
		}
		got = append(got, data...)
		expect++
		if len(data) < 1468 {
			ack(n)
			return got, acks
		}
		if since == window {
			ack(n)
		}
	}
}

// readLockstep receives a transfer whose OACK has been acknowledged, one
// block at a time, acknowledging each, and returns its data. Every block
// must come from the transfer's address srv, in order, none skipped. The
// first time block withhold (0: none) arrives it is not acknowledged: the
// next packet must be that block again.
func readLockstep(t *testing.T, c *net.UDPConn, srv *net.UDPAddr, withhold uint16) []byte {
	t.Helper()
	var got []byte
	withheld := false
	for block := uint16(1); ; block++ {
		p, from := rawRead(t, c)
		if from.String() != srv.String() {
			t.Fatalf("block %d from %v, the transfer is on %v", block, from, srv)
		}
		n, data := dataBlock(t, p)
		if n != block {
			t.Fatalf("got block %d, want %d: blocks in order, none skipped (an ACK withheld: %v)", n, block, withheld)
		}
		if block == withhold && !withheld {
			withheld = true
			block--
			continue
		}
		got = append(got, data...)
		rawACK(t, c, srv, block)
		if len(data) < 1468 {
			return got
		}
	}
}

// TestLostACK: without a negotiated window the server sends block n+1 only
// after the ACK of block n. A client whose ACK of block 3 is lost receives
// block 3 again after Timeout, not block 4, and completes the transfer by
// acknowledging it. This is what makes the server safe for lockstep
// clients that accept only the next block and re-acknowledge only the last
// one (curl; iPXE acknowledges the last block it holds without a gap, EDK2
// answers an unexpected block with the ACK of its last one). Sending
// ahead unasked (pin/tftp's SetAnticipate) fails such clients after a
// loss: docs/tftp.md.
func TestLostACK(t *testing.T) {
	forEachSocket(t, testLostACK)
}

func testLostACK(t *testing.T, start startFunc) {
	dir := testDir(t)
	f := start(t, Config{Dir: dir, Timeout: 200 * time.Millisecond})
	want, err := os.ReadFile(filepath.Join(dir, "snponly.efi"))
	if err != nil {
		t.Fatal(err)
	}
	c, p, srv := rawRRQ(t, f, "snponly.efi", "blksize", "1468")
	if opts := oackOptions(t, p); opts["blksize"] != "1468" {
		t.Fatalf("OACK %v, want blksize 1468", opts)
	}
	rawACK(t, c, srv, 0)
	// The ACK of block 3 is lost: the next packet must be block 3 again.
	if got := readLockstep(t, c, srv, 3); !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, not identical to the %d-byte file", len(got), len(want))
	}
}

// TestDialBlockingUpToLimit: transfers get blocking sockets while no more
// than blockingLimit of them hold one, netpoller sockets beyond, and a
// closed blocking socket frees its place.
func TestDialBlockingUpToLimit(t *testing.T) {
	s, err := NewServer(Config{Dir: t.TempDir()}, nil, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	s.blockingLimit = func() int { return 1 }
	peer := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
	kind := func(c transferSocket) string {
		switch c.(type) {
		case *countedConn:
			return "blocking"
		case *polledConn:
			return "netpoller"
		}
		return "?"
	}
	first, err := s.dial(net.IPv4(127, 0, 0, 1), peer)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.dial(net.IPv4(127, 0, 0, 1), peer)
	if err != nil {
		t.Fatal(err)
	}
	if kind(first) != "blocking" || kind(second) != "netpoller" {
		t.Fatalf("sockets %s and %s, want blocking then netpoller", kind(first), kind(second))
	}
	first.close()
	second.close()
	third, err := s.dial(net.IPv4(255, 255, 255, 255), peer)
	if err != nil {
		t.Fatalf("dial from a broadcast destination: %v", err)
	}
	defer third.close()
	if kind(third) != "blocking" {
		t.Fatalf("after close: %s, want blocking", kind(third))
	}
}

// TestSizeProbe: EDK2 first asks for the file's size alone and ends that
// transfer with an error packet after the OACK. It is counted as aborted
// by the client, not as a failed transfer, and costs no DATA packet.
func TestSizeProbe(t *testing.T) {
	dir := testDir(t)
	f := startServer(t, Config{Dir: dir})
	fi, err := os.Stat(filepath.Join(dir, "ipxe.efi"))
	if err != nil {
		t.Fatal(err)
	}
	c, p, srv := rawRRQ(t, f, "ipxe.efi", "tsize", "0", "blksize", "1468", "windowsize", "4")
	if opts := oackOptions(t, p); opts["tsize"] != strconv.FormatInt(fi.Size(), 10) {
		t.Fatalf("OACK %v, want tsize %d", opts, fi.Size())
	}
	if _, err := c.WriteTo([]byte("\x00\x05\x00\x08size known\x00"), srv); err != nil {
		t.Fatal(err)
	}
	// Serve returns once the transfer has ended.
	if err := f.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for result, want := range map[string]float64{ResultAborted: 1, ResultFailed: 0, ResultOK: 0} {
		if got := testutil.ToFloat64(f.metrics.transfers.WithLabelValues(result)); got != want {
			t.Errorf("%s transfers = %v, want %v", result, got, want)
		}
	}
	if got := testutil.ToFloat64(f.metrics.bytes); got != 0 {
		t.Errorf("bytes = %v, want 0", got)
	}
}

// TestBusyLogSpaced: busy refusals log their first line at once, then at
// most one line per busyLogInterval carrying the count since the last.
func TestBusyLogSpaced(t *testing.T) {
	var l intervalLog
	t0 := time.Unix(1000, 0)
	if n, ok := l.tick(t0); !ok || n != 1 {
		t.Fatalf("first refusal: %d, %v; want logged with 1", n, ok)
	}
	for i := 1; i <= 500; i++ {
		if _, ok := l.tick(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			t.Fatalf("refusal %d within the interval logged", i)
		}
	}
	if n, ok := l.tick(t0.Add(busyLogInterval)); !ok || n != 501 {
		t.Fatalf("after the interval: %d, %v; want logged with 501", n, ok)
	}
}
