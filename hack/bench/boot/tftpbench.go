package main

import (
	"context"
	"fmt"
	"time"

	"github.com/kubefarm/kubefarm/hack/bench/internal/stats"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
)

// tftpBench runs the TFTP measurements against kubefarm-pxe and tftpd-hpa.
type tftpBench struct {
	o     options
	addr  map[string]string
	procs map[string]*server
	rep   *report
}

// goClient measures undionly.kpxe with the pin/tftp client: sequential
// fetches, then rounds of simultaneous ones.
func (t *tftpBench) goClient(size int64, src string) error {
	o := t.o
	res := map[string]*tftpSample{kubefarm: {}, tftpdHPA: {}}
	fmt.Printf("== TFTP, Go client (pin/tftp): %s (%d bytes, from %s), blksize %d, tsize; %d sequential fetches and %d rounds of %d parallel, x%d per server (ABBA)\n",
		bootfile.BinaryBIOS, size, src, tftpBlockSize, o.tftpSeq, o.tftpRounds, o.tftpParallel, o.reps)
	for r := 0; r < o.reps; r++ {
		for _, s := range abba(r, kubefarm, tftpdHPA) {
			for i := 0; i < 20; i++ { // warm-up: the file in page cache, the sockets' paths
				_, _ = tftpFetch(t.addr[s], bootfile.BinaryBIOS, size)
			}
			cpu0 := t.procs[s].cpu()
			var one tftpSample
			tftpRep(t.addr[s], bootfile.BinaryBIOS, size, o.tftpSeq, o.tftpParallel, o.tftpRounds, &one)
			cpu := t.procs[s].cpu() - cpu0
			fmt.Printf("  %-12s rep %d: sequential p50 %6.2f ms p99 %6.2f ms; %d parallel: wall p50 %7.1f ms = %6.0f fetches/s, fetch p50 %6.2f ms p99 %6.2f ms; failures %d; server CPU %.2f ms/fetch\n",
				s, r+1, stats.DurationPercentile(one.seq, .5), stats.DurationPercentile(one.seq, .99), o.tftpParallel,
				stats.DurationPercentile(one.parWalls, .5), float64(o.tftpParallel)/(stats.DurationPercentile(one.parWalls, .5)/1000),
				stats.DurationPercentile(one.par, .5), stats.DurationPercentile(one.par, .99), one.failures, stats.Milliseconds(cpu)/float64(one.fetches))
			acc := res[s]
			acc.seq = append(acc.seq, one.seq...)
			acc.par = append(acc.par, one.par...)
			acc.parWalls = append(acc.parWalls, one.parWalls...)
			acc.failures += one.failures
			acc.fetches += one.fetches
			acc.cpu += cpu
		}
	}
	for _, s := range []string{kubefarm, tftpdHPA} {
		a := res[s]
		wall := stats.DurationPercentile(a.parWalls, .5)
		t.rep.TFTP = append(t.rep.TFTP, TFTPResult{
			Server: s, File: src, Size: size, BlockSize: tftpBlockSize,
			SeqFetches: len(a.seq), SeqP50Ms: stats.DurationPercentile(a.seq, .5), SeqP99Ms: stats.DurationPercentile(a.seq, .99),
			Parallel: o.tftpParallel, Rounds: len(a.parWalls), ParWallP50Ms: wall,
			ParFetchesPerSec: float64(o.tftpParallel) / (wall / 1000),
			ParP50Ms:         stats.DurationPercentile(a.par, .5), ParP99Ms: stats.DurationPercentile(a.par, .99),
			Failures: a.failures, CPUMsPerFetch: stats.Milliseconds(a.cpu) / float64(a.fetches),
		})
	}
	k, p := t.rep.TFTP[0], t.rep.TFTP[1]
	rs := []Ratio{
		latencyRatio("tftp go "+bootfile.BinaryBIOS+" p50", tftpdHPA, k.SeqP50Ms, p.SeqP50Ms, 1),
		latencyRatio("tftp go "+bootfile.BinaryBIOS+" p99", tftpdHPA, k.SeqP99Ms, p.SeqP99Ms, 0),
		rateRatio(fmt.Sprintf("tftp go %d parallel fetches", o.tftpParallel), tftpdHPA, "fetches/s", k.ParFetchesPerSec, p.ParFetchesPerSec, 1),
		latencyRatio(fmt.Sprintf("tftp go p99 inside %d parallel", o.tftpParallel), tftpdHPA, k.ParP99Ms, p.ParP99Ms, 0),
	}
	for _, r := range rs {
		fmt.Println(" ", r)
	}
	t.rep.Ratios = append(t.rep.Ratios, rs...)
	return nil
}

// cClients measures ipxe.efi with each C client: sequential fetches, ABBA.
// curl's median has the target (kubefarm-pxe at most 1.0x tftpd-hpa's).
func (t *tftpBench) cClients(clients []cClient, size int64, src string) error {
	ctx := context.Background()
	file := bootfile.BinaryUEFIx64
	for _, c := range clients {
		n := t.o.curlSeq
		if c.name == "atftp" {
			n = t.o.atftpSeq
		}
		fmt.Printf("== TFTP, %s (%s): %s (%d bytes, from %s), asking %s; %d sequential fetches, x%d per server (ABBA); time: %s\n",
			c.name, c.version, file, size, src, c.asks, n, t.o.reps, c.timing)
		res := map[string]*TFTPClientResult{}
		samples := map[string][]time.Duration{}
		cpus := map[string]time.Duration{}
		for _, s := range []string{kubefarm, tftpdHPA} {
			res[s] = &TFTPClientResult{Server: s, Client: c.version, Asks: c.asks, Timing: c.timing, File: src, Size: size}
			if c.name == "atftp" {
				p, err := atftpProbe(ctx, t.addr[s], file, size, t.o.windowsize)
				if err != nil {
					return fmt.Errorf("%s: atftp --trace: %w", s, err)
				}
				res[s].Probe = &p
				fmt.Printf("  %-12s answered OACK <%s>: windowsize granted: %v; %d DATA blocks, %d ACKs\n", s, p.OACK, p.WindowsizeGranted, p.DataBlocks, p.ACKs)
			}
		}
		for r := 0; r < t.o.reps; r++ {
			for _, s := range abba(r, kubefarm, tftpdHPA) {
				for i := 0; i < 10; i++ { // warm-up
					_, _ = c.fetch(ctx, t.addr[s], file, size)
				}
				cpu0 := t.procs[s].cpu()
				one, failures, firstErr := fetchSeries(ctx, c, t.addr[s], file, size, n)
				cpu := t.procs[s].cpu() - cpu0
				cpus[s] += cpu
				res[s].Failures += failures
				res[s].Fetches += n
				p50 := stats.DurationPercentile(one, .5)
				res[s].RepP50Ms = append(res[s].RepP50Ms, p50)
				samples[s] = append(samples[s], one...)
				fmt.Printf("  %-12s rep %d: p50 %6.2f ms p99 %6.2f ms; failures %d; server CPU %.2f ms/fetch\n",
					s, r+1, p50, stats.DurationPercentile(one, .99), failures, stats.Milliseconds(cpu)/float64(n))
				if firstErr != nil {
					fmt.Printf("  %-12s first failure: %v\n", s, firstErr)
				}
			}
		}
		for _, s := range []string{kubefarm, tftpdHPA} {
			r := res[s]
			r.P50Ms = stats.DurationPercentile(samples[s], .5)
			r.P99Ms = stats.DurationPercentile(samples[s], .99)
			if r.Fetches > 0 {
				r.CPUMsPerFetch = stats.Milliseconds(cpus[s]) / float64(r.Fetches)
			}
			t.rep.TFTPClients = append(t.rep.TFTPClients, *r)
		}
		target := 0.0
		if c.name == "curl" {
			target = 1
		}
		rs := []Ratio{
			latencyRatio(fmt.Sprintf("tftp %s %s p50", c.name, file), tftpdHPA, res[kubefarm].P50Ms, res[tftpdHPA].P50Ms, target),
			latencyRatio(fmt.Sprintf("tftp %s %s p99", c.name, file), tftpdHPA, res[kubefarm].P99Ms, res[tftpdHPA].P99Ms, 0),
		}
		if rs[0].Met != nil && res[kubefarm].Failures > 0 {
			met := false // a faster median does not count with failed fetches
			rs[0].Met = &met
		}
		for _, r := range rs {
			fmt.Println(" ", r)
		}
		t.rep.Ratios = append(t.rep.Ratios, rs...)
	}
	return nil
}

// fetchSeries fetches file (size bytes) from addr n times in a row with c
// and returns the successful fetches' times, the failures and the first
// failure's error.
func fetchSeries(ctx context.Context, c cClient, addr, file string, size int64, n int) (one []time.Duration, failures int, firstErr error) {
	for i := 0; i < n; i++ {
		d, err := c.fetch(ctx, addr, file, size)
		if err != nil {
			failures++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		one = append(one, d)
	}
	return one, failures, firstErr
}
