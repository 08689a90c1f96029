package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/procstat"
)

// server is one process tree under test.
type server struct {
	name    string
	cmd     *exec.Cmd
	logFile *os.File
	// cgroup is the server's own cgroup v2 directory, "" when none could
	// be made.
	cgroup string
}

func startServer(name, logPath string, argv ...string) (*server, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	srv := &server{name: name, cmd: cmd, logFile: lf}
	srv.cgroup = ownCgroup(name, cmd.Process.Pid)
	return srv, nil
}

// ownCgroup moves pid, just started, into a new cgroup of the cgroup v2
// hierarchy so that cpu() counts every process it starts: tftpd-hpa forks
// a child per transfer and ignores SIGCHLD, so the kernel reaps those
// children without adding their CPU to the parent's (/proc cutime stays
// 0). No controller is needed: cpu.stat is kept by every v2 cgroup. It
// returns "" when there is no writable v2 hierarchy.
func ownCgroup(name string, pid int) string {
	root := cgroup2Root()
	if root == "" {
		return ""
	}
	dir := filepath.Join(root, fmt.Sprintf("kubefarm-boot-bench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		_ = os.Remove(dir)
		return ""
	}
	return dir
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup,
// or /sys/fs/cgroup/unified on hybrid systems), "" when it is not.
func cgroup2Root() string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// stop ends the process (SIGTERM, then SIGKILL after 10s) and waits.
func (s *server) stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.logFile.Close()
	if s.cgroup != "" {
		_ = os.Remove(s.cgroup) // empty once its processes are gone
	}
}

// cpu is the CPU time used so far by the server's processes: from its
// cgroup when it has one, else from /proc (the process, its reaped
// children and its live descendants, which misses tftpd-hpa's transfer
// children).
func (s *server) cpu() time.Duration {
	if s.cgroup != "" {
		if b, err := os.ReadFile(filepath.Join(s.cgroup, "cpu.stat")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					if us, err := strconv.ParseInt(v, 10, 64); err == nil {
						return time.Duration(us) * time.Microsecond
					}
				}
			}
		}
	}
	return procstat.TreeCPU(s.cmd.Process.Pid)
}

// freePort returns a port on 127.0.0.1 that was free a moment ago for
// network ("tcp" or "udp").
func freePort(network string) (int, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// nginxConfig is a minimal static file server: sendfile and tcp_nopush on,
// one worker per CPU, no access log, everything under dir.
func nginxConfig(dir, root string, port int) string {
	return fmt.Sprintf(`worker_processes auto;
daemon off;
user root;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    default_type application/octet-stream;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen 127.0.0.1:%[3]d;
        root %[2]s;
        location / { }
    }
}
`, dir, root, port)
}
