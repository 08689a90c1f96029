package sushy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	libvirtdBin = "/usr/sbin/libvirtd"
	virtlogdBin = "/usr/sbin/virtlogd"
	qemuBin     = "/usr/bin/qemu-system-x86_64"
	// lockPath serialises the test processes that use libvirtd: go test
	// runs packages in parallel, and two of them starting and stopping
	// one system libvirtd would pull it from under each other.
	lockPath = "/run/lock/kubefarm-sushy.lock"
	// virtlogdSocket and libvirtdSocket answer when the daemons run.
	virtlogdSocket = "/run/libvirt/virtlogd-sock"
	libvirtdSocket = "/run/libvirt/libvirt-sock"
)

// qemuConf is /etc/libvirt/qemu.conf as ../shared/ENVIRONMENT.md found it
// must be here: qemu runs as root with no relabelling and no security
// driver (no AppArmor or SELinux profile to load on this host).
const qemuConf = `# Written by kubefarm's internal/testing/sushy (see ENVIRONMENT.md, "BMC emulators").
user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
`

// daemons is this process's use of virtlogd and libvirtd: started once,
// shared by its tests, stopped by Main only if this process started them.
var daemons struct {
	sync.Mutex
	ready   bool
	err     error
	lock    *os.File
	dir     string
	started []string // pidfiles of the daemons this process started
}

// mainCalled is set by Main: without it nothing would stop the daemons.
var mainCalled bool

// ensureDaemons takes the cross-process lock and starts virtlogd and
// libvirtd unless they answer already.
func ensureDaemons() error {
	daemons.Lock()
	defer daemons.Unlock()
	if daemons.ready || daemons.err != nil {
		return daemons.err
	}
	daemons.err = startDaemons()
	daemons.ready = daemons.err == nil
	return daemons.err
}

func startDaemons() error {
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	// Another package's test process may hold it for its whole run.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			lock.Close()
			return fmt.Errorf("waiting for %s (another test process using libvirtd): %w", lockPath, err)
		}
		time.Sleep(200 * time.Millisecond) // polling a lock held by another process
	}
	daemons.lock = lock
	if err := prepareHost(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kubefarm-sushy-daemons-")
	if err != nil {
		return err
	}
	daemons.dir = dir
	if !answers(virtlogdSocket) {
		pidfile := filepath.Join(dir, "virtlogd.pid")
		if out, err := exec.Command(virtlogdBin, "-d", "-p", pidfile).CombinedOutput(); err != nil {
			return fmt.Errorf("virtlogd -d: %v: %s", err, out)
		}
		daemons.started = append(daemons.started, pidfile)
		if err := waitFor(virtlogdSocket, 30*time.Second); err != nil {
			return fmt.Errorf("virtlogd: %w", err)
		}
	}
	if !answers(libvirtdSocket) {
		pidfile := filepath.Join(dir, "libvirtd.pid")
		if out, err := exec.Command(libvirtdBin, "-d", "-p", pidfile).CombinedOutput(); err != nil {
			return fmt.Errorf("libvirtd -d: %v: %s", err, out)
		}
		daemons.started = append(daemons.started, pidfile)
	}
	// libvirtd listens before its qemu driver is up: wait for virsh.
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command("virsh", "-c", "qemu:///system", "list", "--all", "--name").CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("libvirtd did not answer virsh within 60 s: %v: %s", err, out)
		}
		time.Sleep(250 * time.Millisecond) // polling the daemon's readiness
	}
}

// prepareHost makes what libvirtd needs here and does not create itself
// (ENVIRONMENT.md): its log folder, the libvirt-qemu user it dies without
// even when qemu runs as root, and qemu.conf. An existing qemu.conf that
// is not ours is left alone and must say the same.
func prepareHost() error {
	if err := os.MkdirAll("/var/log/libvirt/qemu", 0o700); err != nil {
		return err
	}
	if _, err := exec.Command("id", "-u", "libvirt-qemu").CombinedOutput(); err != nil {
		if out, err := exec.Command("useradd", "-r", "-M", "-s", "/usr/sbin/nologin", "libvirt-qemu").CombinedOutput(); err != nil {
			return fmt.Errorf("useradd libvirt-qemu: %v: %s", err, out)
		}
	}
	const path = "/etc/libvirt/qemu.conf"
	have, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return os.WriteFile(path, []byte(qemuConf), 0o644)
	case err != nil:
		return err
	}
	for _, line := range strings.Split(qemuConf, "\n")[1:] {
		if line != "" && !strings.Contains(string(have), line) {
			return fmt.Errorf("%s lacks %q, which running qemu here needs (see ENVIRONMENT.md, BMC emulators)", path, line)
		}
	}
	return nil
}

// stopDaemons stops the daemons this process started (by the pid in their
// pidfiles) and releases the lock.
func stopDaemons() {
	daemons.Lock()
	defer daemons.Unlock()
	// libvirtd first: it holds virtlogd's connection.
	for i := len(daemons.started) - 1; i >= 0; i-- {
		stopPidfile(daemons.started[i])
	}
	daemons.started = nil
	if daemons.dir != "" {
		os.RemoveAll(daemons.dir)
	}
	if daemons.lock != nil {
		daemons.lock.Close() // releases the flock
		daemons.lock = nil
	}
	daemons.ready = false
}

func stopPidfile(pidfile string) {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's exit
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// answers says whether a unix socket accepts a connection.
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func waitFor(socket string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !answers(socket) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s", socket, timeout)
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's socket
	}
	return nil
}
