// Command dhcp is the DHCP benchmark of `make bench`: a perfdhcp rate ladder
// against kubefarm-pxe's DHCP server and against dnsmasq, both serving the
// same static machines, in one run, in two network namespaces joined by a
// veth pair. perfdhcp acts as a relay (giaddr set), so both servers answer
// by unicast and neither needs broadcast handling on the test link.
//
// It prints, per server and offered rate: the rate perfdhcp actually sent
// (on 2 cores it falls short of the asked rate from about 10,000/s), the
// completed DORA exchanges per second and their share of those sent, OFFER
// latency percentiles (from perfdhcp's per-exchange timers), the CPU the
// server and perfdhcp used and the UDP socket drops in each namespace, then
// the ratio of kubefarm-pxe to dnsmasq. By default perfdhcp runs
// single-threaded on CPU 1 and the server on CPU 0 (taskset), the same for
// both servers, so that the load generator does not take the server's core. It needs root, perfdhcp (kea-admin) and
// dnsmasq; it creates and removes namespaces kfb-srv and kfb-cli.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubefarm/kubefarm/hack/bench/internal/stats"
	"github.com/kubefarm/kubefarm/internal/procstat"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

const (
	srvNS, cliNS   = "kfb-srv", "kfb-cli"
	srvIf, cliIf   = "kfb0", "kfb1"
	srvIP, cliIP   = "10.77.0.1", "10.77.0.2"
	subnetBits     = 16
	firstMachineIP = 0x0a4d0100 // 10.77.1.0
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	machines := flag.Int("machines", 20000, "static machines both servers know")
	rates := flag.String("rates", "1000,5000,10000,20000,30000", "offered DORA exchanges per second, in order")
	period := flag.Int("period", 10, "seconds per rate")
	out := flag.String("out", "_build/bench-dhcp", "folder for lists, configs and raw perfdhcp output")
	flag.StringVar(&perfdhcpThreads, "perfdhcp-threads", perfdhcpThreads,
		"perfdhcp -g: single, or multi (a receiver thread, which on 2 cores competes with the server under test)")
	pin := flag.Bool("pin", true, "pin the server under test to CPU 0 and perfdhcp to CPU 1 (taskset)")
	only := flag.String("only", "", "run only this server (kubefarm-pxe or dnsmasq), for profiling; the ratio needs both")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of kubefarm-pxe's server over all its rates here")
	flag.Parse()
	if !*pin {
		serverCPU, clientCPU = -1, -1
	}
	if err := run(*machines, *rates, *period, *out, *only, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp bench:", err)
		os.Exit(1)
	}
}

// result is one perfdhcp run.
type result struct {
	server        string
	rate          int
	completed     int     // ACKs received
	sent          int     // DISCOVERs sent
	perSecond     float64 // completed / period
	share         float64 // completed / sent: of the exchanges perfdhcp started, the share completed
	sentPerSecond float64 // DISCOVERs perfdhcp managed to send per second (it falls short of -r when out of CPU)
	p50, p99, max float64 // OFFER latency, ms
	// UDP receive-buffer drops during the run in each namespace: who lost
	// packets, the server's socket or perfdhcp's.
	serverDrops, clientDrops int
	// CPU used during the run, in cores (1.0 = one core busy): the server
	// and perfdhcp share the machine's cores, so the split matters.
	serverCPU, clientCPU float64
}

func run(machines int, rateList string, period int, out, only, cpuProfile string) error {
	for _, bin := range []string{"perfdhcp", "dnsmasq", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (make bench installs kea-admin and dnsmasq-base): %w", bin, err)
		}
	}
	var rates []int
	for _, r := range strings.Split(rateList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad rate %q", r)
		}
		rates = append(rates, n)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	macFile, hostsFile := filepath.Join(out, "macs.txt"), filepath.Join(out, "dnsmasq-hosts.txt")
	if err := writeMachineLists(machines, macFile, hostsFile); err != nil {
		return err
	}
	teardown := setupNetwork()
	defer teardown()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	servers := []struct {
		name string
		argv []string
	}{
		{"kubefarm-pxe", []string{self, "serve", "-machines", strconv.Itoa(machines), "-cpuprofile", cpuProfile}},
		{"dnsmasq", []string{"dnsmasq", "--no-daemon", "--port=0", "--conf-file=/dev/null", "--leasefile-ro",
			"--dhcp-range=10.77.0.0,static,255.255.0.0,1h", "--dhcp-hostsfile=" + hostsFile, "--dhcp-authoritative",
			"--interface=" + srvIf, "--bind-interfaces", "--log-facility=/dev/null", "--pid-file=" + filepath.Join(out, "dnsmasq.pid")}},
	}
	var results []result
	for _, s := range servers {
		if only != "" && s.name != only {
			continue
		}
		fmt.Printf("== %s, %d static machines\n", s.name, machines)
		restore := func() {}
		if s.name == "kubefarm-pxe" {
			// Only for the fast server: see raiseSocketBuffers. dnsmasq runs
			// under the machine's defaults, as in the reference figures.
			restore = raiseSocketBuffers()
		}
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", srvNS}, pinned(serverCPU, s.argv)...)...)
		logPath := filepath.Join(out, s.name+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			return err
		}
		stopServer := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			logFile.Close()
			restore()
		}
		if err := waitServing(ctx, macFile); err != nil {
			stopServer()
			return fmt.Errorf("%s never answered (log %s): %w", s.name, logPath, err)
		}
		for _, rate := range rates {
			before := procstat.TreeCPU(cmd.Process.Pid)
			sd0, cd0 := rcvbufErrors(srvNS), rcvbufErrors(cliNS)
			r, err := perfdhcp(ctx, s.name, rate, period, macFile, out)
			r.serverDrops, r.clientDrops = rcvbufErrors(srvNS)-sd0, rcvbufErrors(cliNS)-cd0
			if err != nil {
				stopServer()
				return err
			}
			r.serverCPU = (procstat.TreeCPU(cmd.Process.Pid) - before).Seconds() / float64(period)
			results = append(results, r)
			fmt.Printf("  offered %6d/s (perfdhcp sent %6.0f/s): completed %8.0f DORA/s (%5.1f%% of those sent), OFFER latency p50 %.2f ms p99 %.2f ms max %.2f ms; CPU server %.2f perfdhcp %.2f cores; socket drops server %d perfdhcp %d\n",
				r.rate, r.sentPerSecond, r.perSecond, 100*r.share, r.p50, r.p99, r.max, r.serverCPU, r.clientCPU, r.serverDrops, r.clientDrops)
		}
		stopServer()
	}
	fmt.Println("== kubefarm-pxe / dnsmasq, completed leases per second")
	for _, rate := range rates {
		k, d := find(results, "kubefarm-pxe", rate), find(results, "dnsmasq", rate)
		ratio := "inf"
		if d.perSecond > 0 {
			ratio = fmt.Sprintf("%.1fx", k.perSecond/d.perSecond)
		}
		fmt.Printf("  offered %6d/s: %8.0f vs %8.0f = %s\n", rate, k.perSecond, d.perSecond, ratio)
	}
	return nil
}

func find(rs []result, server string, rate int) result {
	for _, r := range rs {
		if r.server == server && r.rate == rate {
			return r
		}
	}
	return result{}
}

// writeMachineLists writes the MACs perfdhcp draws from and the same
// machines as dnsmasq dhcp-host lines.
func writeMachineLists(n int, macFile, hostsFile string) error {
	var macs, hosts strings.Builder
	for i := 0; i < n; i++ {
		mac, ip := machine(i)
		fmt.Fprintln(&macs, mac)
		fmt.Fprintf(&hosts, "%s,%s\n", mac, ip)
	}
	if err := os.WriteFile(macFile, []byte(macs.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(hostsFile, []byte(hosts.String()), 0o644)
}

func machine(i int) (string, net.IP) {
	mac := fmt.Sprintf("02:4b:46:%02x:%02x:%02x", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
	v := uint32(firstMachineIP + i)
	return mac, net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// setupNetwork creates the two namespaces and the veth pair; the returned
// function removes them (also after a failure halfway).
func setupNetwork() func() {
	teardown := func() {
		_ = exec.Command("ip", "netns", "del", srvNS).Run()
		_ = exec.Command("ip", "netns", "del", cliNS).Run()
	}
	teardown()
	steps := [][]string{
		{"ip", "netns", "add", srvNS}, {"ip", "netns", "add", cliNS},
		{"ip", "link", "add", srvIf, "netns", srvNS, "type", "veth", "peer", "name", cliIf, "netns", cliNS},
		{"ip", "-n", srvNS, "addr", "add", fmt.Sprintf("%s/%d", srvIP, subnetBits), "dev", srvIf},
		{"ip", "-n", cliNS, "addr", "add", fmt.Sprintf("%s/%d", cliIP, subnetBits), "dev", cliIf},
		{"ip", "-n", srvNS, "link", "set", srvIf, "up"}, {"ip", "-n", cliNS, "link", "set", cliIf, "up"},
		{"ip", "-n", srvNS, "link", "set", "lo", "up"}, {"ip", "-n", cliNS, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := sh(s...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			teardown()
			os.Exit(1)
		}
	}
	return teardown
}

// waitServing runs single exchanges until one completes.
func waitServing(ctx context.Context, macFile string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// A one-second run at a low rate: perfdhcp -n 1 may exit before
		// the reply arrives, which reads as "not serving".
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", cliNS, "perfdhcp", "-4", "-r", "10", "-p", "1", "-R", "100",
			"-M", macFile, "-l", cliIP, "-d", "0.5", srvIP)
		if out, err := cmd.CombinedOutput(); err == nil && received(string(out)) > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.New("no exchange completed in 30s")
}

var (
	receivedRe = regexp.MustCompile(`received packets: (\d+)`)
	sentRe     = regexp.MustCompile(`sent packets: (\d+)`)
	timerRe    = regexp.MustCompile(`sent / received: ([0-9.]+) / ([0-9.]+)`)
)

func received(out string) int {
	m := receivedRe.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[0][1])
	return n
}

// perfdhcpThreads is perfdhcp's -g. Set by -perfdhcp-threads.
var perfdhcpThreads = "single"

// serverCPU and clientCPU pin the server under test and perfdhcp to
// separate CPUs (-pin): perfdhcp alone needs well over a core at 10,000
// exchanges/s, and unpinned the two fight over the same cores, so the
// latencies measure the scheduler as much as the server. -1: not pinned.
var serverCPU, clientCPU = 0, 1

// pinned prefixes argv with taskset when cpu >= 0.
func pinned(cpu int, argv []string) []string {
	if cpu < 0 {
		return argv
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// perfdhcp runs one rate for period seconds and reads its report: the
// first "sent/received packets" pair is DISCOVER-OFFER, the second
// REQUEST-ACK; `-x t` adds the timers of every completed exchange.
func perfdhcp(ctx context.Context, server string, rate, period int, macFile, out string) (result, error) {
	raw := filepath.Join(out, fmt.Sprintf("perfdhcp-%s-%d.txt", server, rate))
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", cliNS}, pinned(clientCPU, []string{"perfdhcp", "-4",
		"-r", strconv.Itoa(rate), "-p", strconv.Itoa(period), "-R", "20000", "-M", macFile,
		"-l", cliIP, "-d", "2", "-W", "500000", "-x", "t", "-g", perfdhcpThreads, srvIP})...)...)
	outBytes, err := cmd.CombinedOutput()
	_ = os.WriteFile(raw, outBytes, 0o644)
	text := string(outBytes)
	// perfdhcp exits 3 when drops happened; that is a result, not an error.
	if err != nil && !strings.Contains(text, "received packets") {
		return result{}, fmt.Errorf("perfdhcp at %d/s against %s: %v (output in %s)", rate, server, err, raw)
	}
	r := result{server: server, rate: rate}
	if ps := cmd.ProcessState; ps != nil {
		r.clientCPU = (ps.UserTime() + ps.SystemTime()).Seconds() / float64(period)
	}
	recv := receivedRe.FindAllStringSubmatch(text, -1)
	sent := sentRe.FindAllStringSubmatch(text, -1)
	if len(recv) >= 2 && len(sent) >= 1 {
		r.completed, _ = strconv.Atoi(recv[1][1])
		r.sent, _ = strconv.Atoi(sent[0][1])
	}
	r.perSecond = float64(r.completed) / float64(period)
	if r.sent > 0 {
		r.share = float64(r.completed) / float64(r.sent)
	}
	r.sentPerSecond = float64(r.sent) / float64(period)
	r.p50, r.p99, r.max = offerLatencies(text)
	return r, nil
}

// offerLatencies reads the per-exchange timestamps perfdhcp prints with
// -x t ("sent / received: s / s") for DISCOVER-OFFER, as latencies in ms.
func offerLatencies(text string) (p50, p99, max float64) {
	var ms []float64
	s := bufio.NewScanner(strings.NewReader(text))
	inDO := false
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.Contains(line, "DISCOVER-OFFER"):
			inDO = true
		case strings.Contains(line, "REQUEST-ACK"):
			inDO = false
		case inDO:
			if m := timerRe.FindStringSubmatch(line); m != nil {
				sent, _ := strconv.ParseFloat(m[1], 64)
				recv, _ := strconv.ParseFloat(m[2], 64)
				ms = append(ms, (recv-sent)*1000)
			}
		}
	}
	if len(ms) == 0 {
		return 0, 0, 0
	}
	return stats.Percentile(ms, 0.50), stats.Percentile(ms, 0.99), stats.Percentile(ms, 1)
}

// serve runs kubefarm-pxe's DHCP server on the server side of the link with
// the benchmark's machines in its lease table.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	machines := fs.Int("machines", 20000, "static machines")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server here")
	_ = fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	table := leases.NewTable()
	_, subnet, _ := net.ParseCIDR(fmt.Sprintf("%s/%d", srvIP, subnetBits))
	for i := 0; i < *machines; i++ {
		macStr, ip := machine(i)
		mac, _ := net.ParseMAC(macStr)
		key := leases.MachineKey("bench", fmt.Sprintf("m%d", i))
		table.Upsert(key, []leases.Lease{{
			MAC: mac, IP: ip.To4(), Mask: subnet.Mask, Router: net.ParseIP(srvIP).To4(),
			DNS: []net.IP{net.ParseIP(srvIP).To4()}, Hostname: fmt.Sprintf("m%d", i),
			LeaseTime: time.Hour, Pool: "bench", Machine: key,
		}})
	}
	cfg := dhcp.Config{ServerID: net.ParseIP(srvIP).To4(), Boot: bootfile.Config{Server: net.ParseIP(srvIP).To4(), HTTPPort: 8080}}
	srv, err := dhcp.NewServer(cfg, table, nil, logr.Discard())
	if err != nil {
		return err
	}
	conns, err := dhcp.Listen(srvIf, cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = srv.Serve(ctx, conns...)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// raiseSocketBuffers lifts the default and maximum UDP receive buffers and
// returns a function that restores them. Without it perfdhcp cannot take in
// replies at 20,000/s on this machine and drops them in its own socket
// (its namespace's RcvbufErrors), which would measure the load generator,
// not the server. kubefarm-pxe sets its own buffer explicitly, so the raised
// default changes only perfdhcp's side.
func raiseSocketBuffers() func() {
	keys := []string{"net.core.rmem_default", "net.core.rmem_max"}
	old := map[string]string{}
	for _, k := range keys {
		out, err := exec.Command("sysctl", "-n", k).Output()
		if err != nil {
			return func() {}
		}
		old[k] = strings.TrimSpace(string(out))
		_ = exec.Command("sysctl", "-qw", k+"=8388608").Run()
	}
	return func() {
		for _, k := range keys {
			_ = exec.Command("sysctl", "-qw", k+"="+old[k]).Run()
		}
	}
}

// rcvbufErrors is the UDP RcvbufErrors counter of a network namespace
// (/proc/net/snmp): datagrams dropped because a socket's buffer was full.
func rcvbufErrors(ns string) int {
	b, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0
	}
	var header []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			if h == "RcvbufErrors" && i < len(f) {
				n, _ := strconv.Atoi(f[i])
				return n
			}
		}
	}
	return 0
}
