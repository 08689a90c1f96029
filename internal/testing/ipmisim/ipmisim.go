// Package ipmisim runs a real IPMI LAN BMC for tests: Debian's ipmi_sim
// (package openipmi) on a free loopback UDP port, with a user "admin" and
// a random password, whose chassis_control hook (a shell script written
// here) starts and stops a real qemu machine. Power state is therefore a
// process, not a variable: "on" means a qemu is running.
//
// The hook records what ipmi_sim asked of it in a log the tests read (the
// boot device set, each qemu started and its boot arguments), since a
// one-time PXE boot is not otherwise visible from outside a machine with
// no disk.
package ipmisim

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubefarm/kubefarm/internal/testing/local"
)

// Sim is one running BMC and its machine.
type Sim struct {
	// Addr is the BMC's 127.0.0.1:port (UDP).
	Addr string
	// Username and Password are the BMC's administrator.
	Username, Password string
	// Operator is a user, with Password too, whose privilege is limited
	// to operator (enough for power control). (ipmi_sim does not enforce
	// a lower one: a "user" user may power a machine, so there is none.)
	Operator string

	dir     string
	pidFile string
}

// Options change the BMC's address and its machine; the zero value is
// what Start runs: a BMC on loopback and a small machine with nothing
// attached.
type Options struct {
	// Addr is the IPv4 address the BMC listens on (default 127.0.0.1). A
	// BMC that a pod must reach listens on an address of the host's that
	// the test made (the e2e boot bridge's).
	Addr string
	// Qemu is the machine's command line, program first (default: 128 MiB,
	// no disk, no network). The hook adds -daemonize and -pidfile, and
	// -boot once=n when a one-time network boot is set.
	Qemu []string
	// PIDFile is where the hook has qemu write its pid (default: in Dir).
	// A harness that stops machines after this process is gone names one
	// it knows (e2e-cluster down stops <state>/run/qemu-*.pid).
	PIDFile string
}

// defaultQemu is the machine of Start: enough to be "on".
var defaultQemu = []string{"qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-m", "128",
	"-display", "none", "-serial", "null", "-monitor", "none", "-nodefaults"}

// Start runs ipmi_sim and stops it, and any qemu its hook started, when
// the test ends. It skips the test, saying so, when ipmi_sim or
// qemu-system-x86_64 is not installed.
func Start(t testing.TB) *Sim {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with o's address and machine.
func StartWith(t testing.TB, o Options) *Sim {
	t.Helper()
	for _, bin := range []string{"ipmi_sim", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("SKIPPED: the IPMI emulator tests need %s (apt-get install openipmi qemu-system-x86): %v", bin, err)
		}
	}
	// qemu daemonizes, so it is reparented; this process becomes its
	// parent (instead of a pid 1 that may never reap it) and reaps it in
	// QemuPID and at cleanup.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}

	dir := t.TempDir()
	if o.Addr == "" {
		o.Addr = "127.0.0.1"
	}
	ip := net.ParseIP(o.Addr).To4()
	if ip == nil {
		t.Fatalf("ipmisim: address %q is not IPv4", o.Addr)
	}
	if len(o.Qemu) == 0 {
		o.Qemu = defaultQemu
	}
	if o.PIDFile == "" {
		o.PIDFile = filepath.Join(dir, "qemu.pid")
	}
	port := local.UDPPort(t)
	s := &Sim{
		Addr:     net.JoinHostPort(o.Addr, strconv.Itoa(port)),
		Username: "admin",
		Password: local.RandomHex(t, 8),
		Operator: "operator",
		dir:      dir,
		pidFile:  o.PIDFile,
	}
	write := func(name, text string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("hook.sh", fmt.Sprintf(hookScript, shellQuote(dir), shellQuote(o.PIDFile), shellWords(o.Qemu)), 0o755)
	write("lan.conf", fmt.Sprintf(lanConf, o.Addr, port, local.RandomHex(t, 16), filepath.Join(dir, "hook.sh"), s.Password, s.Password), 0o600)
	write("sim.emu", emulatorFile, 0o600)
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}

	logf, err := os.Create(filepath.Join(dir, "ipmi_sim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ipmi_sim", "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "sim.emu"),
		"-s", filepath.Join(dir, "state"), "-n")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ipmi_sim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		s.stopQemu()
		if t.Failed() {
			for _, name := range []string{"ipmi_sim.log", "hook.log", "qemu.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, name))
				t.Logf("%s:\n%s", name, b)
			}
		}
	})

	// Ready when the port is bound (about 0.1 s).
	deadline := time.Now().Add(10 * time.Second)
	for !udpBound(ip, port) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "ipmi_sim.log"))
			t.Fatalf("ipmi_sim did not bind %s within 10 s; its log:\n%s", s.Addr, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// QemuPID is the pid of the running qemu machine, or 0 when the machine
// is off. An exited qemu (a zombie) counts as off and is reaped.
func (s *Sim) QemuPID() int {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	s.reapExited()
	if !alive(pid) {
		return 0
	}
	return pid
}

// reapExited waits for every qemu the hook started that has exited, so
// none stays a zombie.
func (s *Sim) reapExited() {
	for _, l := range s.HookLog() {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "qemu-started" {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[1], "pid="))
		if err != nil || alive(pid) {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// HookLog is what ipmi_sim asked of the hook, one request a line
// ("set boot pxe", "set power 1"), and a "qemu-started pid=N args=..."
// line for each machine the hook started; "get" requests are left out.
func (s *Sim) HookLog() []string {
	f, err := os.Open(filepath.Join(s.dir, "hook.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "get ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// Dir is the folder of the configuration, the logs and the pid file.
func (s *Sim) Dir() string { return s.dir }

func (s *Sim) stopQemu() {
	pid := s.QemuPID()
	if pid == 0 {
		s.reapExited()
		return
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	s.reapExited()
}

// alive: the process exists and has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// udpBound reads /proc/net/udp for a socket bound to ip:port (the
// kernel prints the address as one little-endian word).
func udpBound(ip net.IP, port int) bool {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == want {
			return true
		}
	}
	return false
}

// shellQuote makes s one word of a POSIX shell command.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellWords quotes each of args.
func shellWords(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// FreeUDPPort is a loopback UDP port nobody listens on (for a test of a
// BMC that does not answer).
func FreeUDPPort(t testing.TB) int { return local.UDPPort(t) }

// lanConf is ipmi_sim's configuration: one LAN channel on loopback, the
// hook for power and boot device, an administrator and an operator.
// Arguments: address, port, GUID (32 hex digits), hook path, the two
// passwords.
const lanConf = `name "ipmisim"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid %s
  endlan
  chassis_control "%s 0x20"
user 2 true "admin" "%s" admin 10 none md2 md5 straight
user 3 true "operator" "%s" operator 10 none md2 md5 straight
`

// emulatorFile makes the BMC at 0x20 (no SDRs, a SEL).
const emulatorFile = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
mc_enable 0x20
`

// hookScript is ipmi_sim's chassis_control program: "<mc> get <param>..."
// prints "param:value" lines; "<mc> set <param> <value>..." acts. qemu is
// started with -daemonize (and its output sent to a file) because
// ipmi_sim waits for the hook's output to close: a qemu holding the pipe
// would hang the BMC. A pxe boot device applies to the next start only
// and is then cleared, as a BMC clears a one-time boot flag. Argument:
// the folder, the pid file, qemu's command line (quoted words).
const hookScript = `#!/bin/sh
d=%s
pidfile=%s
echo "$*" | cut -d' ' -f2- >> "$d/hook.log"
running() {
  [ -f "$pidfile" ] || return 1
  st=$(sed 's/.*) //' "/proc/$(cat "$pidfile")/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
start() {
  once=""
  if [ "$(cat "$d/boot" 2>/dev/null)" = pxe ]; then once="-boot once=n"; rm -f "$d/boot"; fi
  %s -daemonize -pidfile "$pidfile" $once </dev/null >>"$d/qemu.log" 2>&1 || return 1
  echo "qemu-started pid=$(cat "$pidfile") args=$once" >> "$d/hook.log"
}
stop() {
  running || return 0
  pid=$(cat "$pidfile")
  kill -9 "$pid"
  i=0
  while running && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
}
op=$2
shift 2
case $op in
get)
  for p in "$@"; do
    case $p in
    power) if running; then echo power:1; else echo power:0; fi ;;
    boot) echo "boot:$(cat "$d/boot" 2>/dev/null || echo default)" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    case $1 in
    power) if [ "$2" = 1 ]; then running || start || exit 1; else stop; fi ;;
    reset) stop; start || exit 1 ;;
    boot) if [ "$2" = pxe ]; then echo pxe > "$d/boot"; else rm -f "$d/boot"; fi ;;
    esac
    shift 2
  done ;;
esac
`
