package nodeimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainerdConfig has the node image's containerd (bin/containerd,
// built from its pinned module by make tools) read the image's config.toml
// and print the configuration it would run with: every setting the image
// depends on must be there with its value, not silently dropped as a key
// of another config version would be.
func TestContainerdConfig(t *testing.T) {
	bin := filepath.Join("..", "..", "bin", "containerd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make tools builds it from hack/tools/containerd)", bin, err)
	}
	out, err := exec.Command(bin, "--config", filepath.Join("rootfs", "etc", "containerd", "config.toml"), "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	dump := string(out)
	for _, want := range []string{
		"[plugins.'io.containerd.cri.v1.images'.pinned_images]\n      sandbox = 'registry.k8s.io/pause:3.10'",
		"[plugins.'io.containerd.cri.v1.images'.registry]\n      config_path = '/etc/containerd/certs.d'",
		"default_runtime_name = 'runc'",
		"runtime_type = 'io.containerd.runc.v2'",
		"BinaryName = '/usr/bin/runc'",
		"SystemdCgroup = true",
		"bin_dirs = ['/usr/lib/cni']",
		"conf_dir = '/etc/cni/net.d'",
		"max_conf_num = 1",
		"snapshotter = 'overlayfs'",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("containerd's configuration lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("containerd config dump:\n%s", dump)
	}
}
