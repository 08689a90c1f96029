package bootchain

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// HostArch is the Debian architecture of this machine (Go and Debian spell
// amd64 and arm64 alike): its packages come from the host's own apt.
var HostArch = runtime.GOARCH

// downloadDeb downloads Debian package pkg of arch into dir, a folder of
// the caller's, and returns the .deb's path. The host's architecture goes
// through `apt-get download` and the host's package lists; another through
// hack/apt-download-arch, which keeps that architecture's lists apart (the
// host's dpkg is never told about it). Nothing is installed.
func downloadDeb(ctx context.Context, dir, arch, pkg string) (string, error) {
	if arch == HostArch {
		// apt drops privileges to _apt for downloads unless told
		// otherwise; the cache folder need not be readable by that user.
		if _, err := aptRun(ctx, dir, "apt-get", "download", "-o", "APT::Sandbox::User=root", pkg); err != nil {
			return "", err
		}
		debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
		if len(debs) != 1 {
			return "", fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
		}
		return debs[0], nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "apt-download-arch"), arch, dir, pkg)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/apt-download-arch %s %s: %v: %s", arch, pkg, err, bytes.TrimSpace(stderr.Bytes()))
	}
	deb := strings.TrimSpace(string(out))
	if _, err := os.Stat(deb); err != nil {
		return "", fmt.Errorf("hack/apt-download-arch %s %s printed %q: %w", arch, pkg, deb, err)
	}
	return deb, nil
}

// debDepends lists the package names of a .deb's Depends field, the first
// of each alternative.
func debDepends(ctx context.Context, deb string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", deb, "Depends").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb -f %s Depends: %v: %s", deb, err, bytes.TrimSpace(out))
	}
	var names []string
	for _, dep := range strings.Split(string(out), ",") {
		if f := strings.Fields(strings.SplitN(dep, "|", 2)[0]); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// FetchBusybox returns a static busybox for arch. The host's own is
// DefaultBusybox (busybox-static installed); another architecture's is
// taken from that architecture's busybox-static, downloaded the first time
// and kept as cacheDir/busybox-<arch>.
func FetchBusybox(ctx context.Context, cacheDir, arch string) (string, error) {
	if arch == HostArch {
		return DefaultBusybox, nil
	}
	path := filepath.Join(cacheDir, "busybox-"+arch)
	if CheckStatic(path) == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(cacheDir, ".busybox-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	deb, err := downloadDeb(ctx, work, arch, "busybox-static")
	if err != nil {
		return "", err
	}
	root := filepath.Join(work, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x: %v: %s", err, bytes.TrimSpace(out))
	}
	bin := filepath.Join(root, "bin", "busybox")
	if err := CheckStatic(bin); err != nil {
		return "", err
	}
	// Renamed into place: a concurrent or interrupted run never sees
	// half a binary.
	if err := os.Rename(bin, path); err != nil {
		return "", err
	}
	return path, nil
}
