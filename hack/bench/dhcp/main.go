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
	rates, out, err := prepareRun(o)
	if err != nil {
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
		rs, m, err := benchLadder(ctx, name, o, rates, out, macFile, hostsFile)
		if err != nil {
			return err
		}
		results = append(results, rs...)
		mem[name] = m
	}
	if o.only != "" {
		return nil
	}
	printComparison(o, rates, results, mem)
	return nil
}

// prepareRun checks the tools, parses the rates and makes the output
// folder, returning its absolute path.
func prepareRun(o options) (rates []int, out string, err error) {
	for _, bin := range []string{"perfdhcp", "dnsmasq", "ip", "taskset"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, "", fmt.Errorf("%s is not installed (make bench installs kea-admin and dnsmasq-base): %w", bin, err)
		}
	}
	for _, r := range strings.Split(o.rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return nil, "", fmt.Errorf("bad rate %q", r)
		}
		rates = append(rates, n)
	}
	out, err = filepath.Abs(o.out)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, "", err
	}
	return rates, out, nil
}

// benchLadder starts the server name, waits until it serves every
// machine, runs the rate ladder against it, watches its memory while it
// idles and stops it.
func benchLadder(ctx context.Context, name string, o options, rates []int, out, macFile, hostsFile string) ([]result, memory, error) {
	s, err := startServer(ctx, name, o, out, hostsFile)
	if err != nil {
		if s != nil {
			s.stop()
		}
		return nil, memory{}, err
	}
	t0 := time.Now()
	if err := waitServing(ctx, macFile, 3*time.Minute); err != nil {
		s.stop()
		return nil, memory{}, fmt.Errorf("%s never answered (log %s): %w", name, s.logPath, err)
	}
	// Every machine is in the table once the server answers the last
	// one: the informers deliver in no particular order, so ask for it
	// too before reading the memory of a whole table.
	if err := waitServing(ctx, lastMACFile(out, o.machines), 3*time.Minute); err != nil {
		s.stop()
		return nil, memory{}, fmt.Errorf("%s never answered the last machine (log %s): %w", name, s.logPath, err)
	}
	m := memory{serving: procRSS(s.pid(), "VmRSS")}
	fmt.Printf("== %s, %d static machines: serving all after %.1f s, resident %.1f MiB (anonymous %.1f, file %.1f)\n", name, o.machines,
		time.Since(t0).Seconds(), mib(m.serving), mib(procRSS(s.pid(), "RssAnon")), mib(procRSS(s.pid(), "RssFile")))
	var results []result
	for _, rate := range rates {
		r, err := s.measure(ctx, rate, o.period, macFile, out)
		if err != nil {
			s.stop()
			return nil, memory{}, err
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
	fmt.Printf("  %s resident: %.1f MiB serving, %.1f MiB after the ladder, peak %.1f MiB\n", name, mib(m.serving), mib(m.after), mib(m.peak))
	s.stop()
	return results, m, nil
}

// printComparison prints kubefarm-pxe against dnsmasq, rate by rate.
func printComparison(o options, rates []int, results []result, mem map[string]memory) {
	fmt.Println("== kubefarm-pxe / dnsmasq: completed leases per second, server CPU per DORA")
	for _, rate := range rates {
		k, d := find(results, "kubefarm-pxe", rate), find(results, "dnsmasq", rate)
		fmt.Printf("  offered %6d/s: %8.0f vs %8.0f = %s; %4.0f vs %4.0f µs/DORA\n", rate, k.perSecond, d.perSecond, ratio(k.perSecond, d.perSecond), perDORA(k), perDORA(d))
	}
	fmt.Printf("  resident with %d machines: %.1f vs %.1f MiB serving, %.1f vs %.1f MiB after the ladder, peak %.1f vs %.1f MiB\n", o.machines,
		mib(mem["kubefarm-pxe"].serving), mib(mem["dnsmasq"].serving), mib(mem["kubefarm-pxe"].after), mib(mem["dnsmasq"].after),
		mib(mem["kubefarm-pxe"].peak), mib(mem["dnsmasq"].peak))
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

var (
	receivedRe = regexp.MustCompile(`received packets: (\d+)`)
	sentRe     = regexp.MustCompile(`sent packets: (\d+)`)
	timerRe    = regexp.MustCompile(`sent / received: ([0-9.]+) / ([0-9.]+)`)
)

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
