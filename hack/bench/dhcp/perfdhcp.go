package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/hack/bench/internal/affinity"
	"github.com/kubefarm/kubefarm/hack/bench/internal/stats"
)

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
