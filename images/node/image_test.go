package nodeimage

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

type cpioEntry struct {
	name  string
	mode  uint32
	mtime int64
	uid   int
	data  []byte
	rdev  [2]int
}

// readInitramfs parses a gzip newc archive.
func readInitramfs(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var out []cpioEntry
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(raw) || string(raw[off:off+6]) != "070701" {
			t.Fatalf("bad cpio header at %d", off)
		}
		field := func(i int) int64 {
			v, err := strconv.ParseUint(string(raw[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int64(v)
		}
		e := cpioEntry{mode: uint32(field(1)), uid: int(field(2)), mtime: field(5), rdev: [2]int{int(field(9)), int(field(10))}}
		size, nameLen := int(field(6)), int(field(11))
		off += 110
		e.name = string(raw[off : off+nameLen-1])
		off += nameLen
		align()
		e.data = raw[off : off+size]
		off += size
		align()
		if e.name == "TRAILER!!!" {
			return out
		}
		out = append(out, e)
	}
}

func writeTree(t *testing.T, dir string) {
	t.Helper()
	for name, body := range map[string]string{"init": "#!/bin/sh\n", "etc/kubefarm/modules.order": "kernel/fs/overlayfs/overlay.ko\n", "bin/busybox": "ELF"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("busybox", filepath.Join(dir, "bin/sh")); err != nil {
		t.Fatal(err)
	}
}

// Two trees with the same content written at different times, in a
// different order, give the same bytes; entries are sorted, owned by root,
// stamped with the given time, and /dev/console is there.
func TestInitramfsDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a)
	time.Sleep(10 * time.Millisecond)
	writeTree(t, b)
	if err := os.Chtimes(filepath.Join(b, "init"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	var ba, bb bytes.Buffer
	if err := WriteInitramfs(&ba, a, 1735689600); err != nil {
		t.Fatal(err)
	}
	if err := WriteInitramfs(&bb, b, 1735689600); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ba.Bytes(), bb.Bytes()) {
		t.Fatal("same tree, different initramfs bytes")
	}
	entries := readInitramfs(t, ba.Bytes())
	var names []string
	for _, e := range entries {
		names = append(names, e.name)
		if e.uid != 0 || e.mtime != 1735689600 {
			t.Errorf("%s: uid %d mtime %d", e.name, e.uid, e.mtime)
		}
		switch e.name {
		case "dev/console":
			if e.mode != 0o020600 || e.rdev != [2]int{5, 1} {
				t.Errorf("dev/console: mode %o rdev %v", e.mode, e.rdev)
			}
		case "bin/sh":
			if e.mode != 0o120777 || string(e.data) != "busybox" {
				t.Errorf("bin/sh: mode %o target %q", e.mode, e.data)
			}
		case "init":
			if e.mode != 0o100755 || string(e.data) != "#!/bin/sh\n" {
				t.Errorf("init: mode %o data %q", e.mode, e.data)
			}
		}
	}
	want := "bin bin/busybox bin/sh dev dev/console etc etc/kubefarm etc/kubefarm/modules.order init"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries\n got %s\nwant %s", got, want)
	}
	// The kernel's own unpacker agrees when busybox is there to ask.
	if _, err := exec.LookPath("busybox"); err == nil {
		dir := t.TempDir()
		zr, _ := gzip.NewReader(bytes.NewReader(ba.Bytes()))
		raw, _ := io.ReadAll(zr)
		cmd := exec.Command("busybox", "cpio", "-t")
		cmd.Dir, cmd.Stdin = dir, bytes.NewReader(raw)
		out, err := cmd.Output() // the block count goes to stderr
		if err != nil {
			t.Fatalf("busybox cpio -t: %v\n%s", err, out)
		}
		if got := strings.Join(strings.Fields(string(out)), " "); got != want {
			t.Errorf("busybox cpio -t lists %s", got)
		}
	}
}

func TestChainText(t *testing.T) {
	got := ChainText("c0", map[string]string{"portmap": "p", "bandwidth": "b"})
	if want := "conflist c0\nbandwidth b\nportmap p\n"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

// The conflist in the recipe is one chain: flannel first, then portmap and
// bandwidth, and nothing else in its folder.
func TestConflist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("rootfs", ConflistPath))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range c.Plugins {
		types = append(types, p.Type)
	}
	if got := strings.Join(types, ","); got != "flannel,portmap,bandwidth" {
		t.Errorf("chain %s", got)
	}
	ents, err := os.ReadDir(filepath.Join("rootfs", filepath.Dir(ConflistPath)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("%d files in %s, want only the conflist", len(ents), filepath.Dir(ConflistPath))
	}
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestBuiltImage checks a built image: KUBEFARM_NODE_IMAGE names its folder
// (`make node-image` sets it and runs this test after the build). Without
// it there is nothing to check, and the test says so and passes.
func TestBuiltImage(t *testing.T) {
	dir := os.Getenv("KUBEFARM_NODE_IMAGE")
	if dir == "" {
		t.Log("KUBEFARM_NODE_IMAGE is not set: no built image to check (make node-image runs this test on its output)")
		return
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
		"containerd":      m.Containerd != "",
		"runc":            m.Runc != "",
		"flannel":         strings.HasPrefix(m.Flannel.Version, "v") && hexRE.MatchString(m.Flannel.SHA256),
		"agent":           m.Agent == "none" || strings.HasPrefix(m.Agent, "sha256:"),
		"conflist":        m.CNI.Conflist == "/"+ConflistPath && hexRE.MatchString(m.CNI.ConflistSHA256),
		"chain":           hexRE.MatchString(m.CNI.ChainSHA256) && len(m.CNI.Plugins) == len(CNIChainPlugins),
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
	// The conflist in the image is the recipe's, byte for byte.
	want, _, err := FileSHA256(filepath.Join("rootfs", ConflistPath))
	if err != nil {
		t.Fatal(err)
	}
	if m.CNI.ConflistSHA256 != want {
		t.Errorf("manifest conflist sha256 %s, recipe's %s", m.CNI.ConflistSHA256, want)
	}
	// The chain hash is recomputable from what the manifest lists.
	sum := sha256Hex([]byte(ChainText(m.CNI.ConflistSHA256, m.CNI.Plugins)))
	if sum != m.CNI.ChainSHA256 {
		t.Errorf("chain sha256 %s does not match its lines (%s)", m.CNI.ChainSHA256, sum)
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
	out, err := exec.Command("unsquashfs", "-cat", filepath.Join(dir, Rootfs), ConflistPath).Output()
	if err != nil {
		t.Fatalf("unsquashfs -cat %s: %v", ConflistPath, err)
	}
	if got := sha256Hex(out); got != want {
		t.Errorf("conflist in the squashfs has sha256 %s, recipe's %s", got, want)
	}
	ls, err := exec.Command("unsquashfs", "-lls", filepath.Join(dir, Rootfs)).Output()
	if err != nil {
		t.Fatalf("unsquashfs -lls: %v", err)
	}
	for _, f := range []string{"usr/bin/kubelet", "usr/bin/flanneld", "usr/bin/containerd", "usr/sbin/runc", "usr/lib/cni/flannel",
		"usr/lib/cni/bridge", "usr/lib/cni/portmap", "usr/lib/cni/bandwidth", "usr/share/kubefarm/images/pause.tar",
		// bookworm is merged-/usr: /lib is a link to usr/lib.
		"usr/lib/systemd/systemd", "etc/systemd/system/multi-user.target.wants/kubelet.service",
		fmt.Sprintf("usr/lib/modules/%s/kernel/net/netfilter/ipvs/ip_vs.ko", m.Kernel.Release)} {
		if !bytes.Contains(ls, []byte("squashfs-root/"+f+"\n")) && !bytes.Contains(ls, []byte("squashfs-root/"+f+" ")) {
			t.Errorf("rootfs.squashfs has no /%s", f)
		}
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
