package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubefarm/kubefarm/hack/release"
	"github.com/kubefarm/kubefarm/pxe/bootfile"
)

// IPXEDir is where the kubefarm-pxe image carries the iPXE binaries (the
// chart's pxe.ipxe.dir), copied from the host's Debian ipxe package (and
// the arm64 one from make ipxe-arm64, when built).
const IPXEDir = release.IPXEDir

// Versions of the upstream images, matching the pinned binaries.
const (
	KubernetesVersion = "v1.34.4"
	// PreviousKubernetesVersion is the control plane a tenant starts on in
	// the upgrade scenario (built by hack/tools/k8s-prev into bin/k8s-prev).
	PreviousKubernetesVersion = "v1.33.4"
	CertManagerVersion        = "v1.21.2"
	KonnectivityVersion       = "v0.34.0"
	EtcdImageTag              = "3.6.4-0"
	ManagerImage              = "ghcr.io/kubefarm/kubefarm-manager:e2e"
	PXEImage                  = "ghcr.io/kubefarm/kubefarm-pxe:e2e"
	BusyboxImage              = "docker.io/library/busybox:kubefarm-e2e"

	// CoreDNSVersion is the tenants' DNS add-on, built by hack/tools/coredns
	// into bin/coredns, and the manager's default CoreDNS tag
	// (controllers/tenantcluster DefaultCoreDNSTag; make verify-pins).
	CoreDNSVersion = "v1.15.0"
)

// BuildProjectBinaries builds the project's own binaries that go into images
// into CacheDir/bin, with a release's flags (static, reproducible), and the
// e2e pause image's.
func (c *Cluster) BuildProjectBinaries(repoRoot string) error {
	bins := append([]release.Binary{{Name: "pause", Package: "./e2e/images/pause"}}, release.Binaries...)
	_, err := release.BuildBinaries(repoRoot, filepath.Join(c.CacheDir(), "bin"), "amd64", bins)
	return err
}

// Images are every image the e2e scenarios run, under their usual names.
func (c *Cluster) Images() ([]Image, error) {
	bin := func(ref, binary, src string, args ...string) Image {
		return Image{Ref: ref, Files: []ImageFile{{Path: "/usr/local/bin/" + binary, Source: src, Mode: 0o755}},
			Entrypoint: append([]string{"/usr/local/bin/" + binary}, args...)}
	}
	atRoot := func(ref, binary, src string) Image {
		return Image{Ref: ref, Files: []ImageFile{{Path: "/" + binary, Source: src, Mode: 0o755}}, Entrypoint: []string{"/" + binary}}
	}
	up := func(name string) string { return filepath.Join(c.BinDir, name) }
	own, err := c.ProjectImages()
	if err != nil {
		return nil, err
	}
	images := append(own,
		bin("registry.k8s.io/pause:3.10", "pause", filepath.Join(c.CacheDir(), "bin", "pause")),
		bin("quay.io/jetstack/cert-manager-controller:"+CertManagerVersion, "cert-manager-controller", up("cert-manager-controller")),
		bin("quay.io/jetstack/cert-manager-cainjector:"+CertManagerVersion, "cert-manager-cainjector", up("cert-manager-cainjector")),
		bin("registry.k8s.io/etcd:"+EtcdImageTag, "etcd", up("etcd")),
		// The upstream Konnectivity images have their binary at the root.
		atRoot("registry.k8s.io/kas-network-proxy/proxy-server:"+KonnectivityVersion, "proxy-server", up("konnectivity-server")),
		atRoot("registry.k8s.io/kas-network-proxy/proxy-agent:"+KonnectivityVersion, "proxy-agent", up("konnectivity-agent")),
		// As upstream's: /coredns as the entrypoint, to which the tenants'
		// CoreDNS Deployment passes -conf /etc/coredns/Corefile.
		atRoot("registry.k8s.io/coredns/coredns:"+CoreDNSVersion, "coredns", up("coredns")),
		Image{Ref: BusyboxImage, Entrypoint: []string{"/bin/busybox"}, Files: []ImageFile{
			{Path: "/bin/busybox", Source: "/bin/busybox", Mode: 0o755},
			{Path: "/www/index.html", Content: "kubefarm-e2e\n"},
		}},
	)
	for _, k := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		images = append(images, bin("registry.k8s.io/"+k+":"+KubernetesVersion, k, up(k)))
	}
	kubeProxy := bin("registry.k8s.io/kube-proxy:"+KubernetesVersion, "kube-proxy", up("kube-proxy"))
	userland, err := iptablesFiles()
	if err != nil {
		return nil, err
	}
	kubeProxy.Files = append(kubeProxy.Files, userland...)
	// The ipvs and nftables modes run ipset and nft, as the upstream
	// image carries them.
	tools, err := programFiles("/usr/sbin/ipset", "/usr/sbin/nft")
	if err != nil {
		return nil, fmt.Errorf("the tenants' kube-proxy image (apt-get install ipset nftables): %w", err)
	}
	kubeProxy.Files = append(kubeProxy.Files, dedupeFiles(kubeProxy.Files, tools)...)
	// ipset parses the protocol of every "ip,proto:port" entry through
	// /etc/protocols: without it each Service's entry is refused ("cannot
	// parse 'tcp' as a protocol"), the ipvs mode's KUBE-CLUSTER-IP set stays
	// empty and no ClusterIP answers. The upstream image carries the file.
	kubeProxy.Files = append(kubeProxy.Files, ImageFile{Path: "/etc/protocols", Source: "/etc/protocols", Mode: 0o644, HashContent: true})
	images = append(images, kubeProxy)
	if c.WithoutPreviousMinor {
		return images, nil
	}
	for _, k := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		images = append(images, bin("registry.k8s.io/"+k+":"+PreviousKubernetesVersion, k, up(filepath.Join("k8s-prev", k))))
	}
	return images, nil
}

// iptablesFiles are the host's iptables userland (Debian's nft-backed
// xtables-nft-multi, under the names kube-proxy runs, with its shared
// libraries and match/target extensions) for the tenants' kube-proxy image.
// The admin cluster runs kube-proxy on the host, where iptables is
// installed; a tenant's runs as a pod on a netbooted node and, like the
// upstream image, carries its own. Host and node image are both Debian
// bookworm with the nft backend, so the rules land in the same tables.
func iptablesFiles() ([]ImageFile, error) {
	const multi = "/usr/sbin/xtables-nft-multi"
	if _, err := os.Stat(multi); err != nil {
		return nil, fmt.Errorf("the tenants' kube-proxy image needs the host's iptables (apt-get install iptables): %w", err)
	}
	var files []ImageFile
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		// xtables-nft-multi chooses what to be by the name it runs as; in
		// /usr/bin, which is on the e2e images' PATH (registry.go).
		files = append(files, ImageFile{Path: "/usr/bin/" + name, Source: multi, Mode: 0o755, HashContent: true})
	}
	const ext = "/usr/lib/x86_64-linux-gnu/xtables"
	entries, err := os.ReadDir(ext)
	if err != nil {
		return nil, fmt.Errorf("iptables extensions: %w", err)
	}
	// The shared libraries of the program and of every extension: an
	// extension has its own (libxt_statistic.so needs libm, and without it
	// kube-proxy's iptables-restore fails for every Service with more than
	// one endpoint).
	needs := []string{multi}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".so") {
			files = append(files, ImageFile{Path: ext + "/" + e.Name(), Source: filepath.Join(ext, e.Name()), Mode: 0o644, HashContent: true})
			needs = append(needs, filepath.Join(ext, e.Name()))
		}
	}
	return withLibraries(files, needs)
}

// programFiles are host programs, put in /usr/bin of an image, with their
// shared libraries.
func programFiles(programs ...string) ([]ImageFile, error) {
	var files []ImageFile
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
		files = append(files, ImageFile{Path: "/usr/bin/" + filepath.Base(p), Source: p, Mode: 0o755, HashContent: true})
	}
	return withLibraries(files, programs)
}

// withLibraries adds to files, once each, the shared libraries the
// executables and shared objects in needs load.
func withLibraries(files []ImageFile, needs []string) ([]ImageFile, error) {
	seen := map[string]bool{}
	for _, bin := range needs {
		libs, err := sharedLibraries(bin)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if !seen[lib] {
				seen[lib] = true
				files = append(files, ImageFile{Path: lib, Source: lib, Mode: 0o755, HashContent: true})
			}
		}
	}
	return files, nil
}

// dedupeFiles are the files of add whose paths have is not already.
func dedupeFiles(have, add []ImageFile) []ImageFile {
	paths := map[string]bool{}
	for _, f := range have {
		paths[f.Path] = true
	}
	var out []ImageFile
	for _, f := range add {
		if !paths[f.Path] {
			paths[f.Path] = true
			out = append(out, f)
		}
	}
	return out
}

// sharedLibraries are the files ldd resolves for an executable or a shared
// object, in ldd's order.
func sharedLibraries(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", path, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; vdso has no file.
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
			libs = append(libs, fields[2])
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			libs = append(libs, fields[0])
		}
	}
	return libs, nil
}

// IPXESources are the e2e kubefarm-pxe image's iPXE binaries: the host's
// Debian ones, and the arm64 one when make ipxe-arm64 has built it into
// BinDir (the scenarios boot x86 machines only).
func (c *Cluster) IPXESources() release.IPXESources {
	return release.IPXESources{ARM64: filepath.Join(c.BinDir, "ipxe", bootfile.BinaryUEFIARM64)}
}

// ProjectImages are the project's own images as a release builds them
// (hack/release), kubefarm-manager and kubefarm-pxe, under their e2e names
// (what `make images` writes as OCI layouts).
func (c *Cluster) ProjectImages() ([]Image, error) {
	refs := map[string]string{"kubefarm-manager": ManagerImage, "kubefarm-pxe": PXEImage}
	var images []Image
	for _, spec := range release.ProjectImages(c.IPXESources()) {
		ref, ok := refs[spec.Name]
		if !ok {
			continue // the agent goes into the node image, not into a pod
		}
		files, err := spec.Files(filepath.Join(c.CacheDir(), "bin"))
		if err != nil {
			return nil, err
		}
		images = append(images, Image{Ref: ref, Entrypoint: spec.Entrypoint, Files: files})
	}
	return images, nil
}
