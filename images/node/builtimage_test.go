//go:build nodeimage

// The check of a built image runs only where an image was built: make
// node-image runs it on its output with -tags nodeimage. Behind a build tag
// rather than passing without an image, so that no run of go test counts
// it as passed when it checked nothing.

package nodeimage

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

// TestBuiltImage checks a built image: KUBEFARM_NODE_IMAGE names its folder
// (`make node-image` sets it and runs this test after the build). Without
// it there is nothing to check, and the test says so and passes.
func TestBuiltImage(t *testing.T) {
	dir := os.Getenv("KUBEFARM_NODE_IMAGE")
	if dir == "" {
		t.Fatal("KUBEFARM_NODE_IMAGE is not set: it names the built image's folder (make node-image runs this test on its output)")
	}
	m, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(dir) != m.Key {
		t.Errorf("folder %s holds an image of key %s", dir, m.Key)
	}
	checks := map[string]bool{
		"kernel package":  strings.HasPrefix(m.Kernel.Package, "linux-image-") && m.Kernel.Version != "" && m.Kernel.Release != "",
		"kernel deb":      hexRE.MatchString(m.Kernel.DebSHA256),
		"kubelet":         strings.HasPrefix(m.Kubelet.Version, "v1.") && hexRE.MatchString(m.Kubelet.SHA256),
		"containerd":      m.Containerd == modulePin(t, "containerd", "github.com/containerd/containerd/v2"),
		"runc":            "v"+m.Runc == modulePin(t, "runc", "github.com/opencontainers/runc"),
		"flannel":         strings.HasPrefix(m.Flannel.Version, "v") && hexRE.MatchString(m.Flannel.SHA256),
		"agent":           strings.HasPrefix(m.Agent, "sha256:"),
		"conflist":        m.CNI.Conflist == "/"+cni.ConflistPath && hexRE.MatchString(m.CNI.ConflistSHA256),
		"chain":           hexRE.MatchString(m.CNI.ChainSHA256) && len(m.CNI.Plugins) >= len(cni.SetupPlugins),
		"packages":        len(m.Packages) > 50,
		"modules":         len(m.Modules["always"]) == 3 && len(m.Modules["ipvs"]) == 4,
		"source date":     m.SourceDateEpoch > 0,
		"schema":          m.SchemaVersion == 1,
		"suite":           m.Suite != "",
		"sha256 of files": len(m.Artifacts) == len(Artifacts),
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("manifest: bad %s", what)
		}
	}
	checkArchitecture(t, dir, m)
	// Nothing the node never runs: no Debian container runtime beside the
	// one built from its module, no perl (usrmerge's).
	for _, p := range []string{"containerd", "runc", "perl", "usrmerge"} {
		if v := PackageVersion(m.Packages, p); v != "" {
			t.Errorf("manifest: Debian package %s %s is in the image", p, v)
		}
	}
	// The conflist in the image is the recipe's, byte for byte, or the
	// recipe's with plugins chained in at build time (recipeChain, below).
	recipe, err := os.ReadFile(filepath.Join("rootfs", cni.ConflistPath))
	if err != nil {
		t.Fatal(err)
	}
	// The record covers every chain plugin (and those chained in).
	for _, p := range cni.SetupPlugins {
		if !hexRE.MatchString(m.CNI.Plugins[p]) {
			t.Errorf("manifest records no sha256 of CNI plugin %s", p)
		}
	}
	// The chain hash is recomputable from what the manifest lists.
	sum := sha256Hex([]byte(cni.ChainText(m.CNI.ConflistSHA256, m.CNI.Plugins)))
	if sum != m.CNI.ChainSHA256 {
		t.Errorf("chain sha256 %s does not match its lines (%s)", m.CNI.ChainSHA256, sum)
	}
	// The root carries the record the agent checks its chain against, and
	// it is the manifest's chain (unsquashfs reads it without mounting).
	rec, err := exec.Command("unsquashfs", "-cat", filepath.Join(dir, Rootfs), "usr/share/kubefarm/cni.json").Output()
	if err != nil {
		t.Fatalf("reading /usr/share/kubefarm/cni.json from the root: %v", err)
	}
	var got struct{ CNI cni.Record }
	if err := json.Unmarshal(rec, &got); err != nil {
		t.Fatalf("cni.json: %v", err)
	}
	if got.CNI.ChainSHA256 != m.CNI.ChainSHA256 || got.CNI.ConflistSHA256 != m.CNI.ConflistSHA256 {
		t.Errorf("the image's cni.json records chain %s conflist %s, the manifest %s %s",
			got.CNI.ChainSHA256, got.CNI.ConflistSHA256, m.CNI.ChainSHA256, m.CNI.ConflistSHA256)
	}
	// The initrd carries /init, busybox, kubefarm-fetch and the boot modules.
	ib, err := os.ReadFile(filepath.Join(dir, Initrd))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	var order string
	for _, e := range readInitramfs(t, ib) {
		have[e.name] = true
		if e.name == "etc/kubefarm/modules.order" {
			order = string(e.data)
		}
	}
	for _, f := range []string{"init", "bin/busybox", "bin/kubefarm-fetch", "etc/kubefarm/udhcpc.script", "dev/console"} {
		if !have[f] {
			t.Errorf("initrd has no %s", f)
		}
	}
	for _, m := range []string{"loop.ko", "squashfs.ko", "overlay.ko"} {
		if !strings.Contains(order, "/"+m+"\n") {
			t.Errorf("initrd modules.order has no %s:\n%s", m, order)
		}
	}
	// The root file system holds what the manifest says.
	if _, err := exec.LookPath("unsquashfs"); err != nil {
		t.Fatal("unsquashfs (squashfs-tools) is needed to look into rootfs.squashfs")
	}
	out, err := exec.Command("unsquashfs", "-cat", filepath.Join(dir, Rootfs), cni.ConflistPath).Output()
	if err != nil {
		t.Fatalf("unsquashfs -cat %s: %v", cni.ConflistPath, err)
	}
	if got := sha256Hex(out); got != m.CNI.ConflistSHA256 {
		t.Errorf("conflist in the squashfs has sha256 %s, the manifest records %s", got, m.CNI.ConflistSHA256)
	}
	if !recipeChain(recipe, out) {
		t.Errorf("the conflist in the squashfs is neither the recipe's nor the recipe's with plugins chained in:\n%s", out)
	}
	ls, err := exec.Command("unsquashfs", "-lls", filepath.Join(dir, Rootfs)).Output()
	if err != nil {
		t.Fatalf("unsquashfs -lls: %v", err)
	}
	for _, f := range []string{"usr/bin/kubelet", "usr/bin/flanneld", "usr/bin/containerd", "usr/bin/containerd-shim-runc-v2", "usr/bin/ctr", "usr/bin/runc", "usr/lib/cni/flannel",
		"usr/lib/cni/bridge", "usr/lib/cni/portmap", "usr/lib/cni/bandwidth", "usr/share/kubefarm/images/pause.tar",
		// bookworm is merged-/usr: /lib is a link to usr/lib.
		"usr/lib/systemd/systemd", "etc/systemd/system/multi-user.target.wants/kubelet.service",
		fmt.Sprintf("usr/lib/modules/%s/kernel/net/netfilter/ipvs/ip_vs.ko", m.Kernel.Release)} {
		if !bytes.Contains(ls, []byte("squashfs-root/"+f+"\n")) && !bytes.Contains(ls, []byte("squashfs-root/"+f+" ")) {
			t.Errorf("rootfs.squashfs has no /%s", f)
		}
	}
	// The units build.sh masks are masked in the image (a link to
	// /dev/null): they cost the boot time and the node never needs them.
	for _, u := range maskedUnits(t) {
		if !bytes.Contains(ls, []byte("squashfs-root/etc/systemd/system/"+u+" -> /dev/null\n")) {
			t.Errorf("rootfs.squashfs: %s is not masked (/etc/systemd/system/%s -> /dev/null)", u, u)
		}
	}
}

// maskedUnits reads build.sh's MASKED_UNITS, the one list of them.
func maskedUnits(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := maskedUnitsRE.FindSubmatch(b)
	if m == nil {
		t.Fatal(`build.sh has no MASKED_UNITS="..."`)
	}
	units := strings.Fields(string(m[1]))
	if len(units) == 0 {
		t.Fatal("build.sh's MASKED_UNITS is empty")
	}
	return units
}

var maskedUnitsRE = regexp.MustCompile(`(?m)^MASKED_UNITS="([^"]*)"`)

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// recipeChain says whether conf is the recipe's conflist, byte for byte, or
// the recipe's with more plugins chained in at build time (CNI_CHAIN_DIR in
// build.sh, cni.ChainPlugins).
func recipeChain(recipe, conf []byte) bool {
	if bytes.Equal(recipe, conf) {
		return true
	}
	var r, c struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(recipe, &r) != nil || json.Unmarshal(conf, &c) != nil || len(c.Plugins) <= len(r.Plugins) {
		return false
	}
	var entries [][]byte
	for _, p := range c.Plugins[len(r.Plugins):] {
		entries = append(entries, p)
	}
	b, err := cni.ChainPlugins(recipe, entries...)
	return err == nil && bytes.Equal(b, conf)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// modulePin is the version hack/tools/<dir>/go.mod requires of module.
func modulePin(t *testing.T, dir, module string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "tools", dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("hack/tools/%s/go.mod does not require %s", dir, module)
	return ""
}

// checkArchitecture: the kernel and every program the node runs are built
// for the architecture the manifest (and so the BootImage) says: a
// cross-build that picked up one host binary would boot, then fail on the
// machine. The kernel's release names its Debian architecture.
func checkArchitecture(t *testing.T, dir string, m *Manifest) {
	t.Helper()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[m.Arch()]
	if want == elf.EM_NONE {
		t.Fatalf("manifest: architecture %q is neither amd64 nor arm64", m.Arch())
	}
	if !strings.HasSuffix(m.Kernel.Release, "-"+m.Arch()) {
		t.Errorf("an %s image boots kernel %s", m.Arch(), m.Kernel.Release)
	}
	for _, p := range []string{"usr/bin/kubelet", "usr/bin/flanneld", "usr/bin/containerd", "usr/bin/containerd-shim-runc-v2",
		"usr/bin/runc", "usr/bin/kubefarm-agent", "usr/lib/cni/flannel", "usr/lib/cni/bridge", "usr/lib/systemd/systemd"} {
		data, err := exec.Command("unsquashfs", "-cat", filepath.Join(dir, Rootfs), p).Output()
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s is no ELF file: %v", p, err)
			continue
		}
		if f.Machine != want {
			t.Errorf("%s is built for %s, the image is %s", p, f.Machine, m.Arch())
		}
	}
}
