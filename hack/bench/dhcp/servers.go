package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubefarm/kubefarm/internal/testing/procstat"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// benchServer is one server under test, running.
type benchServer struct {
	name    string
	cmd     *exec.Cmd
	logFile *os.File
	logPath string
	restore func()
	// farm and metricsURL: kubefarm-pxe with an API server only.
	farm       *farm
	metricsURL string
}

// startServer starts kubefarm-pxe (the binary with an API server, or the
// in-process DHCP path) or dnsmasq on kfb0, pinned to serverCPU.
func startServer(ctx context.Context, name string, o options, out, hostsFile string) (*benchServer, error) {
	s := &benchServer{name: name, restore: func() {}, logPath: filepath.Join(out, name+".log")}
	var argv []string
	switch {
	case name == "dnsmasq":
		argv = []string{"dnsmasq", "--no-daemon", "--port=0", "--conf-file=/dev/null", "--leasefile-ro",
			"--dhcp-range=10.77.0.0,static,255.255.0.0,1h", "--dhcp-hostsfile=" + hostsFile, "--dhcp-authoritative",
			"--interface=" + srvIf, "--bind-interfaces", "--log-facility=/dev/null", "--pid-file=" + filepath.Join(out, "dnsmasq.pid")}
	case o.inProcess:
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		argv = []string{self, "serve", "-machines", strconv.Itoa(o.machines), "-cpuprofile", o.cpuProfile}
	default:
		fmt.Println("== kubefarm-pxe: building the binary, starting kube-apiserver and etcd, creating the machines")
		binary, err := buildPXE(ctx, out)
		if err != nil {
			return nil, err
		}
		if s.farm, err = startFarm(ctx, o.machines, o.perPool, out, clientCPU); err != nil {
			return s, err
		}
		httpPort, err := testenv.FreePort()
		if err != nil {
			return s, err
		}
		tftpPort, err := testenv.FreePort()
		if err != nil {
			return s, err
		}
		metricsPort, err := testenv.FreePort()
		if err != nil {
			return s, err
		}
		cacheDir := filepath.Join(out, "pxe-cache")
		_ = os.RemoveAll(cacheDir)
		argv = pxeArgs(binary, s.farm.kubeconfig, cacheDir, httpPort, tftpPort, metricsPort)
		s.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	}
	if name == "kubefarm-pxe" {
		// Only for the fast server: see raiseSocketBuffers. dnsmasq runs
		// under the machine's defaults, as in the reference figures.
		s.restore = raiseSocketBuffers()
	}
	argv = pinned(serverCPU, argv)
	s.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	var err error
	if s.logFile, err = os.Create(s.logPath); err != nil {
		return s, err
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logFile, s.logFile
	if o.serverEnv != "" {
		s.cmd.Env = append(os.Environ(), strings.Split(o.serverEnv, ",")...)
	}
	if err := s.cmd.Start(); err != nil {
		return s, err
	}
	return s, nil
}

func (s *benchServer) pid() int { return s.cmd.Process.Pid }

func (s *benchServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
	}
	if s.logFile != nil {
		s.logFile.Close()
	}
	s.restore()
	if s.farm != nil {
		s.farm.stop()
	}
}

// measure runs perfdhcp at rate for period seconds and adds what the
// server, and the API server behind it, spent on it.
func (s *benchServer) measure(ctx context.Context, rate, period int, macFile, out string) (result, error) {
	cpu0 := procstat.TreeCPU(s.pid())
	var api0 time.Duration
	var ev0, dropped0 int
	if s.farm != nil {
		api0 = s.farm.apiCPU()
		_, n, err := s.farm.events(ctx)
		if err != nil {
			return result{}, err
		}
		ev0, dropped0 = n, s.eventsDropped()
	}
	sd0, cd0 := rcvbufErrors(srvNS), rcvbufErrors(cliNS)
	r, err := perfdhcp(ctx, s.name, rate, period, macFile, out)
	if err != nil {
		return r, err
	}
	r.serverDrops, r.clientDrops = rcvbufErrors(srvNS)-sd0, rcvbufErrors(cliNS)-cd0
	r.serverCPU = (procstat.TreeCPU(s.pid()) - cpu0).Seconds() / float64(period)
	if s.farm != nil {
		// What kubefarm-pxe's Events cost the API server is read
		// together with the exchanges, so that a write still queued at
		// the end is counted in the next rate, not lost.
		r.apiCPU = (s.farm.apiCPU() - api0).Seconds() / float64(period)
		_, n, err := s.farm.events(ctx)
		if err != nil {
			return r, err
		}
		r.eventObjects, r.eventsDropped = n-ev0, s.eventsDropped()-dropped0
	}
	return r, nil
}

// metricsClient reads kubefarm-pxe's /metrics; a server that does not
// answer in time reads as no drops rather than stalling the ladder.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// eventsDropped sums kubefarm_pxe_events_dropped_total over its reasons
// from kubefarm-pxe's /metrics.
func (s *benchServer) eventsDropped() int {
	resp, err := metricsClient.Get(s.metricsURL)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kubefarm_pxe_events_dropped_total") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		total += v
	}
	return int(total)
}
