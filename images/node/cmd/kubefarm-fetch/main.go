// Command kubefarm-fetch is the node initrd's download step (see
// images/node/initrd/init): it downloads the root file system, checks its
// sha256, and on a mismatch prints one console line
//
//	kubefarm: rootfs digest mismatch: want sha256:X got sha256:Y
//
// reports the failure to kubefarm-pxe's /report (best effort) and exits 2.
// Other failures, after retries, exit 1. Built static (CGO_ENABLED=0).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/images/node/fetch"
	"github.com/kubefarm/kubefarm/pxe/bootproto"
	"github.com/kubefarm/kubefarm/pxe/bootsecret"
)

func main() {
	url := flag.String("url", "", "rootfs URL (kubefarm.rootfs=)")
	digest := flag.String("sha256", "", "expected digest, sha256:<hex> or <hex> (kubefarm.image=)")
	out := flag.String("out", "", "file to write")
	server := flag.String("server", "", "kubefarm-pxe base URL for failure reports (kubefarm.server=); empty: no report")
	iface := flag.String("iface", "", "boot interface, whose MAC the report names")
	secretFile := flag.String("secret-file", "", "this boot's secret (package bootsecret), which kubefarm-pxe requires of a report")
	attempts := flag.Int("attempts", 5, "download attempts for transfer errors")
	flag.Parse()

	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "kubefarm: "+format+"\n", a...) }
	if *url == "" || *out == "" {
		say("kubefarm-fetch: -url and -out are required")
		os.Exit(1)
	}
	want, err := fetch.ParseDigest(*digest)
	if err != nil {
		say("rootfs digest: %v", err)
		os.Exit(1)
	}
	// No overall timeout: a rootfs is hundreds of MB on a busy network.
	// A stalled connection is cut by the transport's timeouts.
	c := &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		ResponseHeaderTimeout: 2 * time.Minute,
		IdleConnTimeout:       30 * time.Second,
	}}
	start := time.Now()
	err = fetch.Retry(*attempts, 2*time.Second, func(err error) { say("rootfs download failed, retrying: %v", err) }, func() error {
		return fetch.Fetch(context.Background(), c, *url, want, *out)
	})
	if err == nil {
		st, _ := os.Stat(*out)
		var n int64
		if st != nil {
			n = st.Size()
		}
		say("rootfs sha256:%s verified, %d bytes in %s", want, n, time.Since(start).Round(time.Millisecond))
		return
	}
	var mm *fetch.MismatchError
	code := 1
	if errors.As(err, &mm) {
		code = 2
		say("%v", err)
	} else {
		say("rootfs download failed: %v", err)
	}
	if *server != "" {
		rep := bootproto.BootReport{ImageDigest: "sha256:" + want, Error: err.Error()}
		rep.BootID = readTrim("/proc/sys/kernel/random/boot_id")
		if *iface != "" {
			rep.MAC = readTrim("/sys/class/net/" + *iface + "/address")
		}
		secret, serr := bootsecret.Parse(readTrim(*secretFile))
		if serr != nil {
			say("no boot secret for the report: %v", serr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := fetch.SendReport(ctx, &http.Client{}, *server, secret, rep); err != nil {
			say("report to %s not accepted: %v", *server, err)
		} else {
			say("reported to %s", *server)
		}
		cancel()
	}
	os.Exit(code)
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}
