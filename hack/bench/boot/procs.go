package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/kubefarm/kubefarm/internal/procstat"
)

// server is one process tree under test.
type server struct {
	name    string
	cmd     *exec.Cmd
	logFile *os.File
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
	return &server{name: name, cmd: cmd, logFile: lf}, nil
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
}

// cpu is the CPU time used so far by the server's process, its reaped
// children (tftpd-hpa forks one per transfer) and its live descendants
// (nginx's workers).
func (s *server) cpu() time.Duration {
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
