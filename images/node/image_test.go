package nodeimage

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubefarm/kubefarm/images/node/cni"
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

// The conflist in the recipe is one chain: flannel first, then portmap and
// bandwidth, and nothing else in its folder.
func TestConflist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("rootfs", cni.ConflistPath))
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
	ents, err := os.ReadDir(filepath.Join("rootfs", filepath.Dir(cni.ConflistPath)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("%d files in %s, want only the conflist", len(ents), filepath.Dir(cni.ConflistPath))
	}
}
