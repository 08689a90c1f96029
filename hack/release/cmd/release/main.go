// Command release is `make release`: kubefarm's images for linux/amd64 and
// linux/arm64 as one multi-arch index each, with an SBOM per image, and its
// charts as OCI artifacts, pushed to a registry; release.json lists every
// digest. The same commit gives the same digests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kubefarm/kubefarm/hack/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	var o release.Options
	var arches, epoch string
	var allowDirty bool
	flag.StringVar(&o.Version, "version", "", "release version, x.y.z (required)")
	flag.StringVar(&o.ImageRepo, "registry", "", "image repository prefix, e.g. ghcr.io/kubefarm (required); images go to <registry>/kubefarm-manager")
	flag.StringVar(&o.ChartRepo, "chart-registry", "", "chart repository prefix; default <registry>/charts")
	flag.StringVar(&arches, "arch", "amd64,arm64", "comma-separated linux architectures")
	flag.StringVar(&o.OutDir, "out", "", "output folder; default _build/release/<version>")
	flag.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time every artifact carries; default the commit's time")
	flag.BoolVar(&allowDirty, "allow-dirty", false, "release a checkout with uncommitted changes (its digests then name no commit)")
	flag.StringVar(&o.IPXEARM64, "ipxe-arm64", "", "the arm64 UEFI iPXE kubefarm-pxe serves; default <checkout>/"+release.IPXEARM64Build+" (make ipxe-arm64)")
	flag.Parse()
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	o.RepoRoot = root
	if o.IPXEARM64 == "" {
		o.IPXEARM64 = filepath.Join(root, release.IPXEARM64Build)
	}
	o.Arches = strings.Split(arches, ",")
	if o.OutDir == "" {
		o.OutDir = filepath.Join(root, "_build", "release", o.Version)
	}
	if o.Commit, err = git("rev-parse", "HEAD"); err != nil {
		return err
	}
	if status, err := git("status", "--porcelain"); err != nil {
		return err
	} else if status != "" && !allowDirty {
		return fmt.Errorf("the checkout has uncommitted changes; commit them (a release names a commit) or pass --allow-dirty")
	}
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("source date epoch %q: %w", epoch, err)
	}
	o.Created = time.Unix(secs, 0).UTC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := release.Run(ctx, o); err != nil {
		return err
	}
	fmt.Println("release manifest:", filepath.Join(o.OutDir, "release.json"))
	return nil
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
