package qmp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/power"
	"github.com/kubefarm/kubefarm/power/qmp"
)

const qemuBinary = "qemu-system-x86_64"

// startQEMU runs a stopped (-S, so it uses no CPU) diskless qemu with the
// given -qmp monitors plus one on watch.sock, and returns a watcher
// connected to that one. Its sockets are in the returned directory.
func startQEMU(t *testing.T, monitors ...string) (dir string, w *watcher) {
	t.Helper()
	if _, err := exec.LookPath(qemuBinary); err != nil {
		t.Skip("SKIPPED, NOT PASSED: " + qemuBinary + " is not on PATH, so the QMP driver was not tried against a real QEMU (apt-get install qemu-system-x86)")
	}
	// A short directory: a unix socket's path is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	args := []string{"-machine", "pc", "-accel", "tcg", "-nodefaults", "-no-user-config", "-display", "none", "-S"}
	for _, m := range append(monitors, "unix:"+filepath.Join(dir, "watch.sock")) {
		args = append(args, "-qmp", strings.ReplaceAll(m, "<dir>", dir)+",server=on,wait=off")
	}
	cmd := exec.Command(qemuBinary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting qemu: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	// Poll until the watch socket exists and accepts: QEMU binds it a moment
	// before it listens, so a connect in between is refused. QEMU creates
	// the -qmp listeners in order, each bound and listening before the
	// next, so once the last one accepts all do.
	watch := filepath.Join(dir, "watch.sock")
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.Dial("unix", watch)
		if err == nil {
			return dir, newWatcher(t, conn)
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("watcher: %v", err)
		}
		select {
		case <-exited:
			t.Fatalf("qemu exited before its QMP sockets were up: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu did not listen on %s within 20s (%v): %s", watch, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watcher is a QMP client on its own monitor; QEMU sends events to every
// monitor, so it sees the resets the driver makes through another one.
type watcher struct {
	t    *testing.T
	conn net.Conn
	dec  *json.Decoder
}

func dialWatcher(t *testing.T, path string) *watcher {
	t.Helper()
	conn, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		t.Fatalf("watcher: %v", err)
	}
	return newWatcher(t, conn)
}

func newWatcher(t *testing.T, conn net.Conn) *watcher {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	w := &watcher{t: t, conn: conn, dec: json.NewDecoder(conn)}
	var greeting map[string]json.RawMessage
	if err := w.dec.Decode(&greeting); err != nil || greeting["QMP"] == nil {
		t.Fatalf("watcher: no QMP greeting: %v %v", greeting, err)
	}
	if _, err := fmt.Fprintln(conn, `{"execute": "qmp_capabilities"}`); err != nil {
		t.Fatalf("watcher: %v", err)
	}
	var reply map[string]json.RawMessage
	if err := w.dec.Decode(&reply); err != nil || reply["return"] == nil {
		t.Fatalf("watcher: qmp_capabilities: %v %v", reply, err)
	}
	return w
}

// execute runs a command on the watcher's monitor and returns its result.
func (w *watcher) execute(command string) json.RawMessage {
	w.t.Helper()
	w.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(w.conn, `{"execute": %q}`+"\n", command); err != nil {
		w.t.Fatalf("watcher: %s: %v", command, err)
	}
	for {
		var m struct {
			Event  string
			Return json.RawMessage
			Error  json.RawMessage
		}
		if err := w.dec.Decode(&m); err != nil {
			w.t.Fatalf("watcher: %s: %v", command, err)
		}
		switch {
		case m.Event != "":
		case m.Return != nil:
			return m.Return
		default:
			w.t.Fatalf("watcher: %s: %s", command, m.Error)
		}
	}
}

// event reads until an event named name arrives and reports whether it
// did within timeout.
func (w *watcher) event(name string, timeout time.Duration) bool {
	w.t.Helper()
	w.conn.SetReadDeadline(time.Now().Add(timeout))
	for {
		var m struct{ Event string }
		if err := w.dec.Decode(&m); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// A decoder that failed is done; read on with a new one.
				w.dec = json.NewDecoder(w.conn)
				return false
			}
			w.t.Fatalf("watcher: %v", err)
		}
		if m.Event == name {
			return true
		}
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestQEMUResetThroughUnixSocket(t *testing.T) {
	dir, w := startQEMU(t, "unix:<dir>/a.sock")
	spec := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix://" + filepath.Join(dir, "a.sock")}

	// Twice: QEMU serves one client per monitor, so the second reset
	// succeeds only if the first call let go of its connection.
	for i := range 2 {
		if err := (qmp.Driver{}).Cycle(timeout(t, 10*time.Second), power.Target{Spec: spec}, power.Options{}); err != nil {
			t.Fatalf("reset %d: %v", i+1, err)
		}
		if !w.event("RESET", 10*time.Second) {
			t.Fatalf("reset %d: no RESET event within 10s", i+1)
		}
	}
}

func TestQEMUResetThroughTCP(t *testing.T) {
	// Port 0: QEMU binds a free port, read back from query-chardev, so no
	// other process can take it between choosing and binding.
	_, w := startQEMU(t, "tcp:127.0.0.1:0")
	var chardevs []struct{ Label, Filename string }
	if err := json.Unmarshal(w.execute("query-chardev"), &chardevs); err != nil {
		t.Fatalf("query-chardev: %v", err)
	}
	var port string
	for _, c := range chardevs {
		if m := regexp.MustCompile(`tcp:127\.0\.0\.1:([0-9]+)`).FindStringSubmatch(c.Filename); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("no tcp monitor in query-chardev: %+v", chardevs)
	}
	spec := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "tcp://127.0.0.1:" + port}

	if err := (qmp.Driver{}).Cycle(timeout(t, 10*time.Second), power.Target{Spec: spec}, power.Options{}); err != nil {
		t.Fatalf("PowerCycle: %v", err)
	}
	if !w.event("RESET", 10*time.Second) {
		t.Fatal("no RESET event within 10s")
	}
}

// A monitor that another client holds answers nobody else: the driver
// gives up at its deadline and, having closed its connection, does not
// reset the machine later when the monitor frees up.
func TestQEMUBusyMonitorTimesOutWithoutALateReset(t *testing.T) {
	dir, w := startQEMU(t, "unix:<dir>/a.sock")
	path := filepath.Join(dir, "a.sock")
	spec := v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix://" + path}

	busy := dialWatcher(t, path)
	err := (qmp.Driver{}).Cycle(timeout(t, time.Second), power.Target{Spec: spec}, power.Options{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "greeting") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want the deadline waiting for the greeting, naming the address", err)
	}
	busy.conn.Close()
	if w.event("RESET", 2*time.Second) {
		t.Fatal("the machine was reset after PowerCycle had returned an error")
	}
	if err := (qmp.Driver{}).Cycle(timeout(t, 10*time.Second), power.Target{Spec: spec}, power.Options{}); err != nil {
		t.Fatalf("PowerCycle once the monitor is free: %v", err)
	}
	if !w.event("RESET", 10*time.Second) {
		t.Fatal("no RESET event within 10s")
	}
}

func TestUnreachableAddressFailsClearly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()

	var wg sync.WaitGroup
	for _, address := range []string{
		"unix://" + filepath.Join(dir, "missing.sock"),
		fmt.Sprintf("tcp://127.0.0.1:%d", closed),
	} {
		wg.Go(func() {
			start := time.Now()
			err := (qmp.Driver{}).Cycle(timeout(t, 10*time.Second), power.Target{Spec: v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: address}}, power.Options{})
			switch {
			case err == nil:
				t.Errorf("%s: PowerCycle succeeded", address)
			case !strings.Contains(err.Error(), address):
				t.Errorf("%s: error %q does not name the address", address, err)
			case errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second:
				t.Errorf("%s: waited for the deadline instead of failing at once: %v", address, err)
			default:
				t.Logf("%s: %v", address, err)
			}
		})
	}
	wg.Wait()
}

// TestQEMUStatus: a stopped QEMU (-S) is powered, so On; its run state is
// read through query-status, and the connection is let go (a second read
// works on a one-client monitor).
func TestQEMUStatus(t *testing.T) {
	dir, _ := startQEMU(t, "unix:<dir>/a.sock")
	target := power.Target{Machine: "farm/q1", Spec: v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix://" + filepath.Join(dir, "a.sock")}}
	for i := range 2 {
		st, err := (qmp.Driver{}).Status(timeout(t, 10*time.Second), target)
		if err != nil || st != power.StateOn {
			t.Fatalf("status %d = %s, %v; want On", i+1, st, err)
		}
	}
}

// TestUnsupportedOperations: QMP cannot power on or off, nor force a
// network boot; each says so with power.ErrUnsupported, without dialling.
func TestUnsupportedOperations(t *testing.T) {
	target := power.Target{Spec: v1alpha1.PowerSpec{Driver: v1alpha1.PowerQMP, Address: "unix:///nonexistent/m.sock"}}
	ctx := context.Background()
	d := qmp.Driver{}
	for name, err := range map[string]error{
		"on":            d.On(ctx, target, power.Options{}),
		"off":           d.Off(ctx, target),
		"cycle netboot": d.Cycle(ctx, target, power.Options{NetbootOnce: true}),
	} {
		if !errors.Is(err, power.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}
