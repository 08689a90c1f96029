package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/pxe/bootfile"
)

func run(o options) error {
	for _, bin := range []string{"in.tftpd", "nginx"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (make bench installs tftpd-hpa and nginx-light): %w", bin, err)
		}
	}
	d, err := makeDirs(o.dir)
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(d.cache)
	}
	rep := report{Time: time.Now().UTC(), CodePath: codePath, CPUs: runtime.NumCPU(), Reps: o.reps}
	fmt.Printf("== boot bench: %s\n", codePath)

	in, err := prepareInputs(o, d)
	if err != nil {
		return err
	}
	s, err := startServers(o, d, in.digest, &rep)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return err
	}
	if !o.skipTFTP {
		if err := benchTFTP(o, d, s, in, &rep); err != nil {
			return err
		}
	}
	if !o.skipHTTP {
		if err := benchHTTP(o, d, s, in, &rep); err != nil {
			return err
		}
	}

	printRatios(rep.Ratios)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(o.out, append(b, '\n'), 0o644)
}

// benchDirs are the bench's folders: dir, and in it the TFTP root, the
// kubefarm-pxe artifact cache and nginx's prefix.
type benchDirs struct{ dir, tftp, cache, nginx string }

// makeDirs makes the folders under dir, with an empty cache.
func makeDirs(dir string) (benchDirs, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return benchDirs{}, err
	}
	d := benchDirs{dir: dir, tftp: filepath.Join(dir, "tftp"), cache: filepath.Join(dir, "cache"), nginx: filepath.Join(dir, "nginx")}
	_ = os.RemoveAll(d.cache)
	for _, p := range []string{d.dir, d.tftp, d.cache, d.nginx} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return benchDirs{}, err
		}
		// tftpd-hpa reads as nobody after its chroot.
		if err := os.Chmod(p, 0o755); err != nil {
			return benchDirs{}, err
		}
	}
	return d, nil
}

// benchInputs are what the servers serve and the C clients that fetch
// it: the BIOS and UEFI boot files (sizes and sources) and the HTTP image
// (size and digest, "" with -skip-http).
type benchInputs struct {
	tftpSize, efiSize int64
	tftpSrc, efiSrc   string
	cClients          []cClient
	size              int64
	digest            string
}

// prepareInputs places the TFTP files, finds the C TFTP clients and has
// the production Store cache the HTTP image from a local origin.
func prepareInputs(o options, d benchDirs) (benchInputs, error) {
	var in benchInputs
	var err error
	in.tftpSize, in.tftpSrc, err = placeTFTPFile(o.tftpFile, filepath.Join(d.tftp, bootfile.BinaryBIOS), 70<<10)
	if err != nil {
		return in, err
	}
	in.efiSize, in.efiSrc, err = placeTFTPFile(o.tftpEFIFile, filepath.Join(d.tftp, bootfile.BinaryUEFIx64), 830<<10)
	if err != nil {
		return in, err
	}
	if !o.skipTFTP && o.curlSeq > 0 {
		c, err := curlClient()
		if err != nil {
			return in, fmt.Errorf("%w (make bench installs curl)", err)
		}
		in.cClients = append(in.cClients, c)
	}
	if !o.skipTFTP && o.atftpSeq > 0 {
		c, err := atftpClient(o.windowsize)
		if err != nil {
			return in, fmt.Errorf("%w (make bench installs atftp)", err)
		}
		in.cClients = append(in.cClients, c)
	}
	in.size = o.httpMiB << 20
	if !o.skipHTTP {
		t0 := time.Now()
		in.digest, err = prewarm(d.dir, d.cache, in.size)
		if err != nil {
			return in, err
		}
		fmt.Printf("  image: %d MiB random, %s, cached by Store.Ensure in %.1fs\n", o.httpMiB, in.digest, time.Since(t0).Seconds())
	}
	return in, nil
}

// benchServers are the running servers by name and where each serves.
type benchServers struct {
	procs    map[string]*server
	started  []*server
	tftpAddr map[string]string
	httpURL  map[string]string
}

// stop stops the servers, the last started first.
func (s *benchServers) stop() {
	for i := len(s.started) - 1; i >= 0; i-- {
		s.started[i].stop()
	}
}

// startServers starts kubefarm-pxe, tftpd-hpa and nginx on free loopback
// ports, nginx serving kubefarm-pxe's cache (digest is the image's). On an
// error the servers started so far are in the result, to be stopped.
func startServers(o options, d benchDirs, digest string, rep *report) (*benchServers, error) {
	kTFTP, kHTTP, err := ports()
	if err != nil {
		return nil, err
	}
	pTFTP, pHTTP, err := ports()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	kArgs := []string{self, "serve", "-tftp-addr", fmt.Sprintf("127.0.0.1:%d", kTFTP), "-http-addr", fmt.Sprintf("127.0.0.1:%d", kHTTP),
		"-ipxe-dir", d.tftp, "-cache-dir", d.cache}
	if o.cpuProfile != "" {
		p, _ := filepath.Abs(o.cpuProfile)
		kArgs = append(kArgs, "-cpuprofile", p)
	}
	s := &benchServers{}
	kSrv, err := startServer(kubefarm, filepath.Join(d.dir, "kubefarm-pxe.log"), kArgs...)
	if err != nil {
		return s, err
	}
	s.started = append(s.started, kSrv)
	tSrv, err := startServer(tftpdHPA, filepath.Join(d.dir, "tftpd-hpa.log"),
		"in.tftpd", "-L", "-4", "-s", "-a", fmt.Sprintf("127.0.0.1:%d", pTFTP), d.tftp)
	if err != nil {
		return s, err
	}
	s.started = append(s.started, tSrv)
	rep.NginxConfig = nginxConfig(d.nginx, filepath.Join(d.cache, "sha256"), pHTTP)
	conf := filepath.Join(d.nginx, "nginx.conf")
	if err := os.WriteFile(conf, []byte(rep.NginxConfig), 0o644); err != nil {
		return s, err
	}
	nSrv, err := startServer(nginx, filepath.Join(d.dir, "nginx.log"), "nginx", "-p", d.nginx, "-e", filepath.Join(d.nginx, "nginx-error.log"), "-c", conf)
	if err != nil {
		return s, err
	}
	s.started = append(s.started, nSrv)

	s.tftpAddr = map[string]string{kubefarm: fmt.Sprintf("127.0.0.1:%d", kTFTP), tftpdHPA: fmt.Sprintf("127.0.0.1:%d", pTFTP)}
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	s.httpURL = map[string]string{
		kubefarm: fmt.Sprintf("http://127.0.0.1:%d/artifacts/%s", kHTTP, digest),
		nginx:    fmt.Sprintf("http://127.0.0.1:%d/%s", pHTTP, hexDigest),
	}
	s.procs = map[string]*server{kubefarm: kSrv, tftpdHPA: tSrv, nginx: nSrv}
	rep.CPUAccounting = "cpu.stat of a cgroup v2 per server"
	for _, p := range s.procs {
		if p.cgroup == "" {
			rep.CPUAccounting = "/proc/<pid>/stat of each server and its descendants (no cgroup v2: tftpd-hpa's transfer children are missed)"
		}
	}
	fmt.Printf("  server CPU from %s\n", rep.CPUAccounting)
	return s, nil
}

// benchTFTP runs the TFTP measurements: the Go client, then the C clients.
func benchTFTP(o options, d benchDirs, s *benchServers, in benchInputs, rep *report) error {
	for _, name := range []string{kubefarm, tftpdHPA} {
		if err := waitTFTP(s.tftpAddr[name], in.tftpSize); err != nil {
			return fmt.Errorf("%s never served TFTP (log in %s): %w", name, d.dir, err)
		}
	}
	unpin := func() {}
	rep.TFTPPinning = "none (-pin=false)"
	if o.pin {
		var err error
		if unpin, err = pinTFTP([]int{s.procs[kubefarm].cmd.Process.Pid, s.procs[tftpdHPA].cmd.Process.Pid}); err != nil {
			return fmt.Errorf("-pin: %w", err)
		}
		rep.TFTPPinning = fmt.Sprintf("server under test on CPU %d, clients on CPU %d", serverCPU, clientCPU)
	}
	fmt.Printf("== TFTP placement: %s\n", rep.TFTPPinning)
	t := tftpBench{o: o, addr: s.tftpAddr, procs: s.procs, rep: rep}
	err := t.goClient(in.tftpSize, in.tftpSrc)
	if err == nil {
		err = t.cClients(in.cClients, in.efiSize, in.efiSrc)
	}
	unpin()
	return err
}

// benchHTTP runs the HTTP measurements, one concurrency level after the
// other.
func benchHTTP(o options, d benchDirs, s *benchServers, in benchInputs, rep *report) error {
	for _, name := range []string{kubefarm, nginx} {
		if err := waitHTTP(s.httpURL[name], in.size, in.digest); err != nil {
			return fmt.Errorf("%s never served the image (logs in %s): %w", name, d.dir, err)
		}
	}
	fmt.Printf("== HTTP: %d MiB image, full downloads to a discarding reader (256 KiB reads), sha256 checked once per server before timing; x%d per server (ABBA)\n",
		o.httpMiB, o.reps)
	for _, c := range o.httpConc {
		if err := httpConcurrency(o, s, in.size, c, rep); err != nil {
			return err
		}
	}
	return nil
}

// httpConcurrency measures both HTTP servers with c concurrent downloads
// of the image (size bytes, or a part of it under -http-limit-mib).
func httpConcurrency(o options, s *benchServers, size int64, c int, rep *report) error {
	length := size
	if o.httpLimitMiB > 0 && int64(c)*size > o.httpLimitMiB<<20 {
		length = (o.httpLimitMiB << 20) / int64(c)
	}
	downloads := c
	for int64(downloads)*length < o.httpMinMiB<<20 {
		downloads += c
	}
	res := map[string]*HTTPResult{}
	cpus := map[string]time.Duration{}
	for r := 0; r < o.reps; r++ {
		for _, name := range abba(r, kubefarm, nginx) {
			cpu0 := s.procs[name].cpu()
			wall, err := httpLevel(s.httpURL[name], size, length, c, downloads)
			if err != nil {
				return fmt.Errorf("%s at %d concurrent: %w", name, c, err)
			}
			cpus[name] += s.procs[name].cpu() - cpu0
			total := float64(downloads) * float64(length)
			mibps := total / (1 << 20) / wall.Seconds()
			if res[name] == nil {
				res[name] = &HTTPResult{Server: name, Concurrency: c, Downloads: downloads, BytesEach: length}
			}
			res[name].RepMiBps = append(res[name].RepMiBps, mibps)
			fmt.Printf("  %-12s c=%-3d rep %d: %d x %d MiB in %6.2f s = %7.0f MiB/s\n", name, c, r+1, downloads, length>>20, wall.Seconds(), mibps)
		}
	}
	for _, name := range []string{kubefarm, nginx} {
		h := res[name]
		for _, v := range h.RepMiBps {
			h.MiBps += v / float64(len(h.RepMiBps))
		}
		gib := float64(o.reps) * float64(downloads) * float64(length) / (1 << 30)
		h.CPUSecPerGiB = cpus[name].Seconds() / gib
		rep.HTTP = append(rep.HTTP, *h)
	}
	target := 0.0
	if c == 100 {
		target = 0.9
	}
	r := rateRatio(fmt.Sprintf("http %d concurrent downloads", c), nginx, "MiB/s", res[kubefarm].MiBps, res[nginx].MiBps, target)
	fmt.Printf("  %s; server CPU %.2f vs %.2f s/GiB\n", r, res[kubefarm].CPUSecPerGiB, res[nginx].CPUSecPerGiB)
	rep.Ratios = append(rep.Ratios, r)
	return nil
}

// printRatios prints the table of kubefarm-pxe against its peers.
func printRatios(ratios []Ratio) {
	fmt.Println("== kubefarm-pxe / peer (ratio >= 1.00x: kubefarm-pxe at least as fast; latencies are peer/kubefarm-pxe)")
	fmt.Printf("  %-36s %-10s %15s %15s %8s  %s\n", "measurement", "peer", "kubefarm-pxe", "peer", "ratio", "target")
	for _, r := range ratios {
		t := ""
		if r.Met != nil {
			t = fmt.Sprintf(">= %.2fx: %s", r.Target, map[bool]string{true: "met", false: "NOT met"}[*r.Met])
		}
		fmt.Printf("  %-36s %-10s %15s %15s %7.2fx  %s\n", r.Measurement, r.Peer, fmtVal(r.Kubefarm, r.Unit), fmtVal(r.PeerValue, r.Unit), r.Ratio, t)
	}
}
