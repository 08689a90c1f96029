package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// cClient is a TFTP client written in C, run as a process per fetch. Both
// are lockstep: one ACK per DATA block, as firmware clients are.
type cClient struct {
	name string // "curl"
	// version is the client's own version line, for the report.
	version string
	// asks are the options the client sends in its read request.
	asks string
	// timing says what a fetch's duration covers.
	timing string
	// fetch gets file from addr once, checks what it can, and returns the
	// duration.
	fetch func(ctx context.Context, addr, file string, size int64) (time.Duration, error)
}

// curlClient fetches with curl's TFTP client: a lockstep client like a PXE
// ROM's. The duration is curl's own %{time_total}, from before it opens
// the socket to the last block, so process start-up is not in it.
func curlClient() (cClient, error) {
	v, err := exec.Command("curl", "--version").Output()
	if err != nil {
		return cClient{}, fmt.Errorf("curl: %w", err)
	}
	first := strings.SplitN(string(v), "\n", 2)[0]
	if !strings.Contains(string(v), "tftp") {
		return cClient{}, fmt.Errorf("this curl has no TFTP support: %s", first)
	}
	return cClient{
		name:    "curl",
		version: strings.Join(strings.Fields(first)[:2], " "),
		asks:    fmt.Sprintf("blksize %d, tsize 0, timeout 6 (curl adds the last two)", tftpBlockSize),
		timing:  "curl's %{time_total}: socket to last block, without process start-up",
		fetch:   curlFetch,
	}, nil
}

func curlFetch(ctx context.Context, addr, file string, size int64) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", "-sS", "--max-time", "30", "--tftp-blksize", strconv.Itoa(tftpBlockSize),
		"-o", "/dev/null", "-w", "%{time_total} %{size_download}", "tftp://"+addr+"/"+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("curl: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var secs float64
	var n int64
	if _, err := fmt.Sscanf(string(out), "%g %d", &secs, &n); err != nil {
		return 0, fmt.Errorf("curl -w output %q: %w", out, err)
	}
	if n != size {
		return 0, fmt.Errorf("curl received %d bytes, want %d", n, size)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// atftpClient fetches with atftp asking for blksize, tsize and an RFC 7440
// windowsize. kubefarm-pxe grants it, tftpd-hpa does not and atftp falls
// back to one ACK per block (atftpProbe records what each answers). atftp reports
// no timing: the duration is the process's wall time, start-up included
// (about the same few milliseconds for both servers).
func atftpClient(windowsize int) (cClient, error) {
	var v bytes.Buffer
	cmd := exec.Command("atftp", "-V")
	cmd.Stdout, cmd.Stderr = &v, &v
	if err := cmd.Run(); err != nil {
		return cClient{}, fmt.Errorf("atftp: %w", err)
	}
	return cClient{
		name:    "atftp",
		version: strings.TrimSpace(strings.SplitN(v.String(), "\n", 2)[0]),
		asks:    fmt.Sprintf("blksize %d, tsize 0, windowsize %d", tftpBlockSize, windowsize),
		timing:  "process wall time, start-up included",
		fetch: func(ctx context.Context, addr, file string, size int64) (time.Duration, error) {
			start := time.Now()
			_, err := runATFTP(ctx, addr, file, windowsize, false)
			return time.Since(start), err
		},
	}, nil
}

// runATFTP fetches file to /dev/null; with trace, atftp prints every
// packet it sends and receives.
func runATFTP(ctx context.Context, addr, file string, windowsize int, trace bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"--option", fmt.Sprintf("blksize %d", tftpBlockSize), "--option", "tsize 0"}
	if windowsize > 0 {
		args = append(args, "--option", fmt.Sprintf("windowsize %d", windowsize))
	}
	if trace {
		args = append(args, "--trace")
	}
	args = append(args, "-g", "-r", file, "-l", "/dev/null", host, port)
	out, err := exec.CommandContext(ctx, "atftp", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("atftp %s: %w: %s", strings.Join(args, " "), err, lastLine(out))
	}
	return string(out), nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndexByte(s, '\n')+1:]
}

var (
	oackRe = regexp.MustCompile(`received OACK <([^>]*)>`)
	ackRe  = regexp.MustCompile(`sent ACK <block: (\d+)>`)
	dataRe = regexp.MustCompile(`received \d+\. DATA <block: (\d+), size (\d+)>`)
)

// optionProbe is what one server answered to atftp's options.
type optionProbe struct {
	// OACK is the option acknowledgement as atftp printed it.
	OACK string `json:"oack"`
	// WindowsizeGranted: the OACK carries windowsize.
	WindowsizeGranted bool `json:"windowsizeGranted"`
	// DataBlocks and ACKs atftp received and sent (ACK 0 answers the
	// OACK): one ACK per block is lockstep.
	DataBlocks int   `json:"dataBlocks"`
	ACKs       int   `json:"acks"`
	Bytes      int64 `json:"bytes"`
}

// atftpProbe fetches file once with --trace and reads the OACK and the
// packet counts from atftp's trace.
func atftpProbe(ctx context.Context, addr, file string, size int64, windowsize int) (optionProbe, error) {
	out, err := runATFTP(ctx, addr, file, windowsize, true)
	if err != nil {
		return optionProbe{}, err
	}
	p := parseATFTPTrace(out)
	if p.Bytes != size {
		return p, fmt.Errorf("atftp trace shows %d bytes received, want %d", p.Bytes, size)
	}
	return p, nil
}

// parseATFTPTrace reads the OACK and the packet counts from atftp --trace.
func parseATFTPTrace(out string) optionProbe {
	var p optionProbe
	if m := oackRe.FindStringSubmatch(out); m != nil {
		// atftp erases its trailing ", " with backspaces.
		p.OACK = strings.TrimSuffix(strings.TrimSpace(strings.ReplaceAll(m[1], "\b", "")), ",")
	}
	p.WindowsizeGranted = strings.Contains(p.OACK, "windowsize")
	p.ACKs = len(ackRe.FindAllString(out, -1))
	for _, m := range dataRe.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		p.Bytes += n
		p.DataBlocks++
	}
	return p
}
