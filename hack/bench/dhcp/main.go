// Command dhcp is the DHCP benchmark of `make bench`: a perfdhcp rate ladder
// against kubefarm-pxe and against dnsmasq, both serving the same static
// machines, in one run.
//
// kubefarm-pxe runs the way an operator runs it: the real binary
// (cmd/kubefarm-pxe, built by the bench) with the chart's default flags,
// Events on, reading its machines from a real kube-apiserver and etcd
// (internal/testing/testenv) as the identity of its generated RBAC
// (config/rbac-pxe) and nothing more. The API holds -machines Machines, as
// the NodePool controller writes them, in NodePools of -per-pool machines,
// one per tenant namespace. dnsmasq, the peer, reads the same machines
// from a dhcp-hostsfile. With -in-process the bench runs pxe/dhcp in a
// child process with its lease table filled in memory instead (no API
// server, cache or Events: the DHCP path alone, for CPU profiles).
//
// The server under test listens on kfb0 in the host's network namespace
// (where it reaches the API server); perfdhcp runs in namespace kfb-cli at
// the other end of a veth pair and acts as a relay (giaddr set), so both
// servers answer by unicast and neither needs broadcast handling on the
// test link.
//
// It prints, per server and offered rate: the rate perfdhcp actually sent
// (on 2 cores it falls short of the asked rate from about 10,000/s), the
// completed DORA exchanges per second and their share of those sent, OFFER
// latency percentiles (from perfdhcp's per-exchange timers), the CPU the
// server and perfdhcp used, the server's CPU per completed exchange, and
// the UDP socket drops on each side; for kubefarm-pxe also the CPU
// kube-apiserver and etcd used, the Events it wrote and the ones its
// per-replica bound dropped. Memory: each server's resident set once it
// serves every machine, at the end of its ladder, and its peak (VmHWM).
// Then the ratio of kubefarm-pxe to dnsmasq. By default the server runs on
// CPU 0 and perfdhcp, kube-apiserver and etcd on CPU 1 (taskset), so that
// neither the load generator nor the API server is counted as, or takes,
// the server's core. It needs root, perfdhcp (kea-admin), dnsmasq and the envtest
// binaries (make envtest-tools); it creates and removes namespace kfb-cli
// and link kfb0.
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

	"github.com/kubefarm/kubefarm/hack/bench/internal/affinity"
	"github.com/kubefarm/kubefarm/hack/bench/internal/stats"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/dhcp"
	"github.com/kubefarm/kubefarm/pxe/leases"
)

const (
	// The server's side is the host's namespace ("").
	srvNS, cliNS   = "", "kfb-cli"
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
	var o options
	flag.IntVar(&o.machines, "machines", 20000, "static machines both servers know")
	flag.IntVar(&o.perPool, "per-pool", 250, "machines per NodePool (one pool per tenant namespace); 250 is the most a pool holds")
	flag.StringVar(&o.rates, "rates", "1000,5000,10000,20000,30000", "offered DORA exchanges per second, in order")
	flag.IntVar(&o.period, "period", 10, "seconds per rate")
	flag.StringVar(&o.out, "out", "_build/bench-dhcp", "folder for lists, configs, logs and raw perfdhcp output")
	flag.StringVar(&perfdhcpThreads, "perfdhcp-threads", perfdhcpThreads,
		"perfdhcp -g: single, or multi (a receiver thread, which on 2 cores competes with the server under test)")
	pin := flag.Bool("pin", true, "pin the server under test to CPU 0, and perfdhcp, kube-apiserver and etcd to CPU 1 (taskset)")
	flag.StringVar(&o.only, "only", "", "run only this server (kubefarm-pxe or dnsmasq), for profiling; the ratio needs both")
	flag.BoolVar(&o.inProcess, "in-process", false,
		"run pxe/dhcp in a child process with its lease table in memory instead of the kubefarm-pxe binary with an API server (no cache, no Events)")
	flag.StringVar(&o.serverEnv, "server-env", "", "comma-separated VAR=value added to the environment of the server under test only (e.g. GOGC=50), for experiments")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "with -in-process: write a CPU profile of the DHCP server over all its rates here")
	flag.DurationVar(&o.settle, "settle", 0,
		"after the ladder, leave each server idle this long and print its resident set every 30 s (the heap a storm grew is handed back after the runtime's periodic collection, two to three minutes)")
	flag.Parse()
	if !*pin {
		serverCPU, clientCPU = -1, -1
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp bench:", err)
		os.Exit(1)
	}
}

type options struct {
	machines, perPool, period int
	rates, out, only          string
	inProcess                 bool
	cpuProfile, serverEnv     string
	settle                    time.Duration
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
	// kubefarm-pxe with an API server: the CPU kube-apiserver and etcd
	// used (cores), the Event writes it made (the growth of the sum of the
	// Events' counts: a create is one, each patch of a repeated Event one
	// more) and the Events its bound dropped (its metric).
	apiCPU                      float64
	eventObjects, eventsDropped int
}

// memory is a server's resident set: once it serves every machine, at the
// end of its ladder, and its peak (VmHWM) over the run.
type memory struct{ serving, after, peak int64 }

func run(o options) error {
	for _, bin := range []string{"perfdhcp", "dnsmasq", "ip", "taskset"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (make bench installs kea-admin and dnsmasq-base): %w", bin, err)
		}
	}
	var rates []int
	for _, r := range strings.Split(o.rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad rate %q", r)
		}
		rates = append(rates, n)
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	macFile, hostsFile := filepath.Join(out, "macs.txt"), filepath.Join(out, "dnsmasq-hosts.txt")
	if err := writeMachineLists(o.machines, macFile, hostsFile); err != nil {
		return err
	}
	teardown := setupNetwork()
	defer teardown()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var results []result
	mem := map[string]memory{}
	for _, name := range []string{"kubefarm-pxe", "dnsmasq"} {
		if o.only != "" && name != o.only {
			continue
		}
		s, err := startServer(ctx, name, o, out, hostsFile)
		if err != nil {
			if s != nil {
				s.stop()
			}
			return err
		}
		t0 := time.Now()
		if err := waitServing(ctx, macFile, 3*time.Minute); err != nil {
			s.stop()
			return fmt.Errorf("%s never answered (log %s): %w", name, s.logPath, err)
		}
		// Every machine is in the table once the server answers the last
		// one: the informers deliver in no particular order, so ask for it
		// too before reading the memory of a whole table.
		if err := waitServing(ctx, lastMACFile(out, o.machines), 3*time.Minute); err != nil {
			s.stop()
			return fmt.Errorf("%s never answered the last machine (log %s): %w", name, s.logPath, err)
		}
		m := memory{serving: procRSS(s.pid(), "VmRSS")}
		fmt.Printf("== %s, %d static machines: serving all after %.1f s, resident %.1f MiB (anonymous %.1f, file %.1f)\n", name, o.machines,
			time.Since(t0).Seconds(), mib(m.serving), mib(procRSS(s.pid(), "RssAnon")), mib(procRSS(s.pid(), "RssFile")))
		for _, rate := range rates {
			r, err := s.measure(ctx, rate, o.period, macFile, out)
			if err != nil {
				s.stop()
				return err
			}
			results = append(results, r)
			fmt.Printf("  offered %6d/s (perfdhcp sent %6.0f/s): completed %8.0f DORA/s (%5.1f%% of those sent), OFFER latency p50 %.2f ms p99 %.2f ms max %.2f ms; "+
				"CPU server %.2f cores = %.0f µs/DORA, perfdhcp %.2f; socket drops server %d perfdhcp %d",
				r.rate, r.sentPerSecond, r.perSecond, 100*r.share, r.p50, r.p99, r.max, r.serverCPU, perDORA(r), r.clientCPU, r.serverDrops, r.clientDrops)
			if s.farm != nil {
				fmt.Printf("; API server and etcd %.2f cores; Event writes %d, dropped %d", r.apiCPU, r.eventObjects, r.eventsDropped)
			}
			fmt.Println()
		}
		m.after, m.peak = procRSS(s.pid(), "VmRSS"), procRSS(s.pid(), "VmHWM")
		for idle := 30 * time.Second; idle <= o.settle; idle += 30 * time.Second {
			time.Sleep(30 * time.Second)
			fmt.Printf("  %s idle %.0f s after the ladder: resident %.1f MiB (anonymous %.1f)\n",
				name, idle.Seconds(), mib(procRSS(s.pid(), "VmRSS")), mib(procRSS(s.pid(), "RssAnon")))
		}
		mem[name] = m
		fmt.Printf("  %s resident: %.1f MiB serving, %.1f MiB after the ladder, peak %.1f MiB\n", name, mib(m.serving), mib(m.after), mib(m.peak))
		s.stop()
	}
	if o.only != "" {
		return nil
	}
	fmt.Println("== kubefarm-pxe / dnsmasq: completed leases per second, server CPU per DORA")
	for _, rate := range rates {
		k, d := find(results, "kubefarm-pxe", rate), find(results, "dnsmasq", rate)
		fmt.Printf("  offered %6d/s: %8.0f vs %8.0f = %s; %4.0f vs %4.0f µs/DORA\n", rate, k.perSecond, d.perSecond, ratio(k.perSecond, d.perSecond), perDORA(k), perDORA(d))
	}
	fmt.Printf("  resident with %d machines: %.1f vs %.1f MiB serving, %.1f vs %.1f MiB after the ladder, peak %.1f vs %.1f MiB\n", o.machines,
		mib(mem["kubefarm-pxe"].serving), mib(mem["dnsmasq"].serving), mib(mem["kubefarm-pxe"].after), mib(mem["dnsmasq"].after),
		mib(mem["kubefarm-pxe"].peak), mib(mem["dnsmasq"].peak))
	return nil
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "inf"
	}
	return fmt.Sprintf("%.1fx", a/b)
}

// perDORA is the server's CPU per completed exchange, µs.
func perDORA(r result) float64 {
	if r.perSecond == 0 {
		return 0
	}
	return r.serverCPU / r.perSecond * 1e6
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// procRSS reads a size field (VmRSS, VmHWM) of /proc/<pid>/status, bytes.
func procRSS(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// lastMACFile writes a list of the last machine alone, for waitServing.
func lastMACFile(out string, machines int) string {
	mac, _ := machine(machines - 1)
	p := filepath.Join(out, "last-mac.txt")
	_ = os.WriteFile(p, []byte(mac+"\n"), 0o644)
	return p
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

// setupNetwork creates namespace kfb-cli and the veth pair, kfb0 on the
// host with the server's address, kfb1 in kfb-cli with perfdhcp's; the
// returned function removes them (also after a failure halfway).
func setupNetwork() func() {
	teardown := func() {
		_ = exec.Command("ip", "link", "del", srvIf).Run()
		_ = exec.Command("ip", "netns", "del", cliNS).Run()
	}
	teardown()
	steps := [][]string{
		{"ip", "netns", "add", cliNS},
		{"ip", "link", "add", srvIf, "type", "veth", "peer", "name", cliIf, "netns", cliNS},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", srvIP, subnetBits), "dev", srvIf},
		{"ip", "-n", cliNS, "addr", "add", fmt.Sprintf("%s/%d", cliIP, subnetBits), "dev", cliIf},
		{"ip", "link", "set", srvIf, "up"}, {"ip", "-n", cliNS, "link", "set", cliIf, "up"},
		{"ip", "-n", cliNS, "link", "set", "lo", "up"},
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
func waitServing(ctx context.Context, macFile string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
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
	return fmt.Errorf("no exchange completed in %s", timeout)
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
var serverCPU, clientCPU = affinity.ServerCPU, affinity.ClientCPU

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
// ("": the host's) from /proc/net/snmp: datagrams dropped because a
// socket's buffer was full.
func rcvbufErrors(ns string) int {
	read := exec.Command("cat", "/proc/net/snmp")
	if ns != "" {
		read = exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
	}
	b, err := read.Output()
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
