// Command boot-bench is the TFTP and HTTP boot benchmark of `make bench`:
// kubefarm-pxe against tftpd-hpa for TFTP and against nginx for HTTP, on
// 127.0.0.1, in one run.
//
// kubefarm-pxe runs as a child process ("boot-bench serve") built from the
// pxe/tftp and pxe/httpboot constructors with cmd/kubefarm-pxe's settings;
// the HTTP path measured is GET /artifacts/sha256:<hex> through
// httpboot.Handler (route, metrics wrapper, Store.Open, http.ServeContent,
// sendfile) from a Store pre-warmed with Store.Ensure. tftpd-hpa
// (in.tftpd -L) and nginx (sendfile, tcp_nopush, worker_processes auto,
// generated config) run as children too, serving the same files: nginx
// serves the Store's cache file itself, so both read one page-cached inode.
//
// TFTP runs with the server under test on CPU 0 and every client on CPU 1
// (-pin; why in pin.go), with three clients, two lockstep (one ACK per
// block, as most firmware) and one windowed:
//
//   - Go (pin/tftp): the iPXE BIOS binary (undionly.kpxe) with blksize 1468
//     and tsize: single-fetch latency over sequential fetches (p50, p99),
//     then rounds of simultaneous fetches (wall time, fetches/s).
//   - curl: the UEFI binary (ipxe.efi, 850,528 bytes: 580 blocks) with
//     --tftp-blksize 1468 (curl adds tsize and timeout). A fetch's time is
//     curl's own %{time_total}, so process start-up is not in it; p50 and
//     p99 over sequential fetches. Its median carries the target:
//     kubefarm-pxe's at most 1.0x tftpd-hpa's.
//   - atftp: ipxe.efi asking blksize 1468, tsize and an RFC 7440 windowsize
//     (8), as EDK2 asks for 4. One traced fetch per server records the OACK
//     it answered and the DATA and ACK counts (kubefarm-pxe grants the
//     window; tftpd-hpa does not, so with it atftp falls back to
//     lockstep), then timed fetches: process wall time, start-up included.
//
// HTTP: full downloads of a random image (256 MiB) by 1, 10 and 100
// concurrent clients, aggregate MiB/s. Each measurement is repeated in
// ABBA order (kubefarm-pxe, peer, peer, kubefarm-pxe, ...) so that drift on
// a shared machine falls on both sides, and each prints kubefarm-pxe's
// ratio to its peer (>= 1.00x: kubefarm-pxe at least as fast). Server CPU
// is read from a cgroup v2 per server, which also counts tftpd-hpa's
// per-transfer children (procs.go).
//
// It needs tftpd-hpa, nginx-light (or nginx), curl and atftp installed, and
// root (both peers change user; in.tftpd chroots).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/internal/fetchguard"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
	"github.com/kubefarm/kubefarm/pxe/httpboot"
)

const (
	kubefarm = "kubefarm-pxe"
	tftpdHPA = "tftpd-hpa"
	nginx    = "nginx"
)

type options struct {
	out, dir           string
	tftpFile           string
	tftpEFIFile        string
	tftpSeq            int
	tftpParallel       int
	tftpRounds         int
	curlSeq            int
	atftpSeq           int
	windowsize         int
	pin                bool
	httpMiB            int64
	httpConc           []int
	httpMinMiB         int64
	httpLimitMiB       int64
	reps               int
	cpuProfile         string
	keep               bool
	skipTFTP, skipHTTP bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	conc := flag.String("http-concurrency", "1,10,100", "concurrent HTTP downloads, in order")
	flag.StringVar(&o.out, "out", "_build/bench-boot.json", "write the results here as JSON")
	flag.StringVar(&o.dir, "dir", "_build/bench-boot", "working folder: served files, configs, server logs")
	flag.StringVar(&o.tftpFile, "tftp-file", "/usr/lib/ipxe/undionly.kpxe",
		"file served over TFTP as "+bootfile.BinaryBIOS+" (when absent, 70 KiB of random bytes)")
	flag.StringVar(&o.tftpEFIFile, "tftp-efi-file", "/usr/lib/ipxe/ipxe.efi",
		"file served over TFTP as "+bootfile.BinaryUEFIx64+", fetched by curl and atftp (when absent, 830 KiB of random bytes)")
	flag.IntVar(&o.tftpSeq, "tftp-seq", 200, "sequential Go-client TFTP fetches per server and repetition")
	flag.IntVar(&o.tftpParallel, "tftp-parallel", 50, "simultaneous TFTP fetches in a round")
	flag.IntVar(&o.tftpRounds, "tftp-rounds", 5, "parallel rounds per server and repetition")
	flag.IntVar(&o.curlSeq, "tftp-curl-seq", 200, "sequential curl fetches of "+bootfile.BinaryUEFIx64+" per server and repetition (0: none)")
	flag.IntVar(&o.atftpSeq, "tftp-atftp-seq", 100, "sequential atftp fetches of "+bootfile.BinaryUEFIx64+" per server and repetition (0: none)")
	flag.IntVar(&o.windowsize, "tftp-windowsize", 8, "RFC 7440 windowsize atftp asks for")
	flag.BoolVar(&o.pin, "pin", true, fmt.Sprintf("during TFTP, pin the server under test to CPU %d and the clients to CPU %d", serverCPU, clientCPU))
	flag.Int64Var(&o.httpMiB, "http-size", 256, "HTTP image size, MiB")
	flag.Int64Var(&o.httpMinMiB, "http-min", 1024,
		"at least this many MiB per concurrency level and repetition: the downloads are repeated (in multiples of the concurrency) until reached")
	flag.Int64Var(&o.httpLimitMiB, "http-total-limit", 0,
		"at most this many MiB per concurrency level and repetition (0: none): above it each client fetches only the first limit/concurrency bytes, by Range")
	flag.IntVar(&o.reps, "reps", 2, "repetitions of every measurement per server, in ABBA order")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the kubefarm-pxe process (whole run) here")
	flag.BoolVar(&o.keep, "keep", false, "keep the image and cache in -dir afterwards")
	flag.BoolVar(&o.skipTFTP, "skip-tftp", false, "HTTP only")
	flag.BoolVar(&o.skipHTTP, "skip-http", false, "TFTP only")
	flag.Parse()
	for _, c := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "boot bench: bad concurrency %q\n", c)
			os.Exit(2)
		}
		o.httpConc = append(o.httpConc, n)
	}
	if o.reps < 1 {
		o.reps = 1
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "boot bench:", err)
		os.Exit(1)
	}
}

// TFTPResult is one server's TFTP figures.
type TFTPResult struct {
	Server           string  `json:"server"`
	File             string  `json:"file"`
	Size             int64   `json:"size"`
	BlockSize        int     `json:"blockSize"`
	SeqFetches       int     `json:"sequentialFetches"`
	SeqP50Ms         float64 `json:"sequentialP50Ms"`
	SeqP99Ms         float64 `json:"sequentialP99Ms"`
	Parallel         int     `json:"parallel"`
	Rounds           int     `json:"rounds"`
	ParWallP50Ms     float64 `json:"parallelWallP50Ms"`
	ParFetchesPerSec float64 `json:"parallelFetchesPerSecond"`
	ParP50Ms         float64 `json:"parallelFetchP50Ms"`
	ParP99Ms         float64 `json:"parallelFetchP99Ms"`
	Failures         int     `json:"failures"`
	CPUMsPerFetch    float64 `json:"serverCPUMsPerFetch"`
}

// TFTPClientResult is one server's figures with one C client fetching
// ipxe.efi sequentially.
type TFTPClientResult struct {
	Server        string       `json:"server"`
	Client        string       `json:"client"`
	Asks          string       `json:"optionsAsked"`
	Timing        string       `json:"timing"`
	File          string       `json:"file"`
	Size          int64        `json:"size"`
	Probe         *optionProbe `json:"optionProbe,omitempty"`
	Fetches       int          `json:"fetches"`
	P50Ms         float64      `json:"p50Ms"`
	P99Ms         float64      `json:"p99Ms"`
	RepP50Ms      []float64    `json:"p50MsByRep"`
	Failures      int          `json:"failures"`
	CPUMsPerFetch float64      `json:"serverCPUMsPerFetch"`
}

// HTTPResult is one server's figures at one concurrency.
type HTTPResult struct {
	Server       string    `json:"server"`
	Concurrency  int       `json:"concurrency"`
	Downloads    int       `json:"downloadsPerRep"`
	BytesEach    int64     `json:"bytesEach"`
	MiBps        float64   `json:"mibPerSecond"` // mean over repetitions
	RepMiBps     []float64 `json:"mibPerSecondByRep"`
	CPUSecPerGiB float64   `json:"serverCPUSecondsPerGiB"`
}

// Ratio is kubefarm-pxe's figure over its peer's, oriented so that >= 1
// means kubefarm-pxe is at least as fast.
type Ratio struct {
	Measurement string  `json:"measurement"`
	Peer        string  `json:"peer"`
	Unit        string  `json:"unit"`
	Kubefarm    float64 `json:"kubefarm"`
	PeerValue   float64 `json:"peerValue"`
	Ratio       float64 `json:"ratio"`
	Target      float64 `json:"target,omitempty"`
	Met         *bool   `json:"met,omitempty"`
}

type report struct {
	Time        time.Time `json:"time"`
	CodePath    string    `json:"codePath"`
	CPUs        int       `json:"cpus"`
	Reps        int       `json:"reps"`
	NginxConfig string    `json:"nginxConfig"`
	// CPUAccounting says where the servers' CPU figures come from.
	CPUAccounting string       `json:"cpuAccounting"`
	TFTPPinning   string       `json:"tftpPinning"`
	TFTP          []TFTPResult `json:"tftp"`
	// TFTPClients are the C clients' figures on ipxe.efi.
	TFTPClients []TFTPClientResult `json:"tftpClients"`
	HTTP        []HTTPResult       `json:"http"`
	Ratios      []Ratio            `json:"ratios"`
}

const codePath = "kubefarm-pxe: pxe/tftp.Server (its own sender: blocking sockets polled 50µs first, up to GOMAXPROCS transfers; netpoller beyond) and pxe/httpboot.Handler GET /artifacts/sha256:<hex> " +
	"(Store.Open, http.ServeContent, sendfile) in a child process, configured as cmd/kubefarm-pxe; " +
	"peers: tftpd-hpa in.tftpd -L, nginx with sendfile and tcp_nopush"

func fmtVal(v float64, unit string) string {
	if unit == "ms" {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f %s", v, unit)
}

func (r Ratio) String() string {
	s := fmt.Sprintf("%s: %s vs %s %s = %.2fx", r.Measurement, fmtVal(r.Kubefarm, r.Unit), r.Peer, fmtVal(r.PeerValue, r.Unit), r.Ratio)
	if r.Met != nil {
		s += fmt.Sprintf(" (target >= %.2fx: %s)", r.Target, map[bool]string{true: "met", false: "NOT met"}[*r.Met])
	}
	return s
}

func rateRatio(what, peer, unit string, k, p, target float64) Ratio {
	r := Ratio{Measurement: what, Peer: peer, Unit: unit, Kubefarm: k, PeerValue: p, Target: target}
	if p > 0 {
		r.Ratio = k / p
	}
	if target > 0 {
		met := r.Ratio >= target
		r.Met = &met
	}
	return r
}

// latencyRatio is peer/kubefarm, so that >= 1 reads "no slower" too.
func latencyRatio(what, peer string, k, p, target float64) Ratio {
	r := Ratio{Measurement: what, Peer: peer, Unit: "ms", Kubefarm: k, PeerValue: p, Target: target}
	if k > 0 {
		r.Ratio = p / k
	}
	if target > 0 {
		met := r.Ratio >= target
		r.Met = &met
	}
	return r
}

// abba orders the two servers for repetition r: a b, b a, a b, ...
func abba(r int, a, b string) []string {
	if r%2 == 0 {
		return []string{a, b}
	}
	return []string{b, a}
}

func ports() (udp, tcp int, err error) {
	if udp, err = freePort("udp"); err != nil {
		return 0, 0, err
	}
	tcp, err = freePort("tcp")
	return udp, tcp, err
}

// placeTFTPFile copies src to dst, or writes size random bytes when src
// does not exist, and returns the size and what was used.
func placeTFTPFile(src, dst string, size int) (int64, string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		b = make([]byte, size)
		_, _ = rand.Read(b)
		src = "random bytes"
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return 0, "", err
	}
	return int64(len(b)), src, os.Chmod(dst, 0o644)
}

// prewarm writes size random bytes to a local origin, caches them through
// httpboot.Store.Ensure from that origin over HTTP (download, sha256 check,
// link into place), and removes the origin. It returns the digest.
func prewarm(dir, cacheDir string, size int64) (string, error) {
	origin := filepath.Join(dir, "origin.bin")
	f, err := os.Create(origin)
	if err != nil {
		return "", err
	}
	defer os.Remove(origin)
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	src := mrand.NewChaCha8(seed)
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := io.CopyN(w, src, size); err != nil {
		f.Close()
		return "", err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, origin) }))
	defer srv.Close()
	// The origin is this process's own server on 127.0.0.1, which the
	// store refuses unless allowed.
	guard := fetchguard.New(fetchguard.Options{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	store, err := httpboot.NewStore(httpboot.StoreConfig{Dir: cacheDir, MaxSize: 4 << 30, Guard: guard})
	if err != nil {
		return "", err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := store.Ensure(ctx, kubefarmv1.Artifact{Digest: digest, URL: srv.URL + "/image"}, ""); err != nil {
		return "", err
	}
	if !store.Has(digest) {
		return "", fmt.Errorf("%s not cached after Ensure", digest)
	}
	return digest, nil
}

func waitTFTP(addr string, size int64) error {
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = tftpFetch(addr, bootfile.BinaryBIOS, size); err == nil {
			return nil
		}
	}
	return err
}

// waitHTTP waits for url to answer, then downloads it once checking its
// sha256 (this also warms the path).
func waitHTTP(url string, size int64, digest string) error {
	c := httpClient(1)
	defer c.CloseIdleConnections()
	buf := make([]byte, 256<<10)
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var conn net.Conn
		host := strings.SplitN(strings.TrimPrefix(url, "http://"), "/", 2)[0]
		if conn, err = net.Dial("tcp", host); err != nil {
			continue
		}
		conn.Close()
		var sum string
		if sum, err = httpGet(context.Background(), c, url, size, size, buf, true); err != nil {
			continue
		}
		if "sha256:"+sum != digest {
			return fmt.Errorf("served content has digest sha256:%s, want %s", sum, digest)
		}
		return nil
	}
	return err
}
