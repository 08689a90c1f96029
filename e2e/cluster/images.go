package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

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
	BusyboxImage              = "docker.io/library/busybox:kubefarm-e2e"
)

// BuildProjectBinaries builds the project's own binaries that go into images
// (static, like the upstream ones) into CacheDir/bin.
func (c *Cluster) BuildProjectBinaries(repoRoot string) error {
	out := filepath.Join(c.CacheDir(), "bin")
	for name, pkg := range map[string]string{"kubefarm-manager": "./cmd/kubefarm-manager", "pause": "./e2e/images/pause"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(out, name), pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", name, err, b)
		}
	}
	return nil
}

// Images are every image the e2e scenarios run, under their usual names.
func (c *Cluster) Images() []Image {
	bin := func(ref, binary, src string, args ...string) Image {
		return Image{Ref: ref, Files: []ImageFile{{Path: "/usr/local/bin/" + binary, Source: src, Mode: 0o755}},
			Entrypoint: append([]string{"/usr/local/bin/" + binary}, args...)}
	}
	atRoot := func(ref, binary, src string) Image {
		return Image{Ref: ref, Files: []ImageFile{{Path: "/" + binary, Source: src, Mode: 0o755}}, Entrypoint: []string{"/" + binary}}
	}
	up := func(name string) string { return filepath.Join(c.BinDir, name) }
	own := func(name string) string { return filepath.Join(c.CacheDir(), "bin", name) }
	images := []Image{
		bin("registry.k8s.io/pause:3.10", "pause", own("pause")),
		bin(ManagerImage, "kubefarm-manager", own("kubefarm-manager")),
		bin("quay.io/jetstack/cert-manager-controller:"+CertManagerVersion, "cert-manager-controller", up("cert-manager-controller")),
		bin("quay.io/jetstack/cert-manager-cainjector:"+CertManagerVersion, "cert-manager-cainjector", up("cert-manager-cainjector")),
		bin("registry.k8s.io/etcd:"+EtcdImageTag, "etcd", up("etcd")),
		// The upstream Konnectivity images have their binary at the root.
		atRoot("registry.k8s.io/kas-network-proxy/proxy-server:"+KonnectivityVersion, "proxy-server", up("konnectivity-server")),
		atRoot("registry.k8s.io/kas-network-proxy/proxy-agent:"+KonnectivityVersion, "proxy-agent", up("konnectivity-agent")),
		{Ref: BusyboxImage, Entrypoint: []string{"/bin/busybox"}, Files: []ImageFile{
			{Path: "/bin/busybox", Source: "/bin/busybox", Mode: 0o755},
			{Path: "/www/index.html", Content: "kubefarm-e2e\n"},
		}},
	}
	for _, k := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		images = append(images, bin("registry.k8s.io/"+k+":"+KubernetesVersion, k, up(k)))
	}
	for _, k := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		images = append(images, bin("registry.k8s.io/"+k+":"+PreviousKubernetesVersion, k, up(filepath.Join("k8s-prev", k))))
	}
	return images
}
