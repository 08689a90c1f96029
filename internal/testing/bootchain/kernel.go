package bootchain

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// KernelMetaPackage is the Debian package whose dependency names the
// current kernel image package of arch: linux-image-amd64 depends on
// linux-image-6.1.0-<N>-amd64 on bookworm, linux-image-arm64 on
// linux-image-6.1.0-<N>-arm64.
func KernelMetaPackage(arch string) string { return "linux-image-" + arch }

// Kernel is a Debian kernel unpacked into the cache: the image and the
// modules an initrd needs, in the order they must be loaded.
type Kernel struct {
	// Package is the Debian package it came from.
	Package string `json:"package"`
	// Release is the kernel's uname -r.
	Release string `json:"release"`
	// Vmlinuz is the kernel image's path.
	Vmlinuz string `json:"vmlinuz"`
	// Modules are the .ko files, dependencies before their users.
	Modules []string `json:"modules"`
}

// KernelPackage asks apt which kernel image package KernelMetaPackage(arch)
// depends on: the host's apt-cache for the host's architecture; for
// another, the meta package's own Depends, downloaded into a temporary
// folder under cacheDir (those package lists are not the host's).
func KernelPackage(ctx context.Context, cacheDir, arch string) (string, error) {
	meta := KernelMetaPackage(arch)
	var deps []string
	if arch == HostArch {
		out, err := aptRun(ctx, "", "apt-cache", "depends", meta)
		if err != nil {
			return "", err
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends: "); ok {
				deps = append(deps, dep)
			}
		}
	} else {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return "", err
		}
		work, err := os.MkdirTemp(cacheDir, ".meta-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(work)
		deb, err := downloadDeb(ctx, work, arch, meta)
		if err != nil {
			return "", err
		}
		if deps, err = debDepends(ctx, deb); err != nil {
			return "", err
		}
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "linux-image-") && strings.HasSuffix(dep, "-"+arch) {
			return dep, nil
		}
	}
	return "", fmt.Errorf("%s depends on no linux-image-*-%s package (it depends on %q)", meta, arch, deps)
}

// FetchKernel returns the kernel of Debian package pkg, of architecture
// arch, with modules and their dependencies (module names as modprobe
// spells them, e.g. "virtio_net"; built-in ones are skipped). The first
// call downloads the package (downloadDeb) and keeps only the image and
// those modules under cacheDir/<pkg>-<hash of the module list>; later calls
// read the cache. Nothing is installed on the host.
func FetchKernel(ctx context.Context, cacheDir, arch, pkg string, modules []string) (*Kernel, error) {
	sum := sha256.Sum256([]byte(strings.Join(modules, ",")))
	dir := filepath.Join(cacheDir, pkg+"-"+hex.EncodeToString(sum[:4]))
	manifest := filepath.Join(dir, "kernel.json")
	if b, err := os.ReadFile(manifest); err == nil {
		var k Kernel
		if err := json.Unmarshal(b, &k); err == nil {
			return &k, nil
		}
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	deb, err := downloadDeb(ctx, work, arch, pkg)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(work, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x: %v: %s", err, bytes.TrimSpace(out))
	}
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return nil, fmt.Errorf("%s has %d kernel images in /boot", pkg, len(images))
	}
	release := strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	ordered, err := moduleClosure(filepath.Join(root, "lib", "modules", release), modules)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}

	stage := filepath.Join(work, "stage")
	if err := os.MkdirAll(filepath.Join(stage, "modules"), 0o755); err != nil {
		return nil, err
	}
	k := Kernel{Package: pkg, Release: release, Vmlinuz: filepath.Join(dir, "vmlinuz")}
	if err := copyFile(images[0], filepath.Join(stage, "vmlinuz")); err != nil {
		return nil, err
	}
	for _, src := range ordered {
		name := filepath.Base(src)
		if err := copyFile(src, filepath.Join(stage, "modules", name)); err != nil {
			return nil, err
		}
		k.Modules = append(k.Modules, filepath.Join(dir, "modules", name))
	}
	b, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(stage, "kernel.json"), b, 0o644); err != nil {
		return nil, err
	}
	// Publish the whole folder at once: a concurrent or interrupted run
	// never sees half of it.
	if err := os.Rename(stage, dir); err != nil {
		// Another run published it first; theirs is as good as ours.
		if _, statErr := os.Stat(manifest); statErr != nil {
			return nil, err
		}
	}
	return &k, nil
}

// aptListsDir holds apt's package lists.
const aptListsDir = "/var/lib/apt/lists"

// aptRun runs an apt command in dir and returns its output. When it fails
// and apt has no package lists, as on a machine whose packages were all
// installed and whose lists were then cleaned (container images do this),
// it runs `apt-get update` once and tries again. Its error says which.
func aptRun(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	run := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return out, nil
	}
	out, err := run()
	if err == nil {
		return out, nil
	}
	if lists, _ := filepath.Glob(filepath.Join(aptListsDir, "*_Packages*")); len(lists) > 0 {
		return nil, fmt.Errorf("%w (apt has package lists in %s, so apt-get update was not run)", err, aptListsDir)
	}
	if upd, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
		return nil, fmt.Errorf("%w; apt has no package lists and apt-get update failed: %v: %s", err, uerr, bytes.TrimSpace(upd))
	}
	out, err = run()
	if err != nil {
		return nil, fmt.Errorf("%w (apt had no package lists; this is after apt-get update)", err)
	}
	return out, nil
}

// moduleClosure resolves module names to .ko files under modDir (an
// unpacked /lib/modules/<release>, which in a .deb has no modules.dep) and
// adds their dependencies from each file's .modinfo "depends=". The result
// lists every dependency before its users.
func moduleClosure(modDir string, names []string) ([]string, error) {
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				builtin[modName(l)] = true
			}
		}
	}
	files := map[string]string{}
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[modName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string) error
	visit = func(n string) error {
		n = strings.ReplaceAll(n, "-", "_")
		switch {
		case state[n] == 2 || builtin[n]:
			return nil
		case state[n] == 1:
			return fmt.Errorf("module dependency cycle at %s", n)
		}
		p, ok := files[n]
		if !ok {
			return fmt.Errorf("module %s is neither built in nor shipped", n)
		}
		state[n] = 1
		deps, err := moduleDepends(p)
		if err != nil {
			return err
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		state[n] = 2
		out = append(out, p)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// modName turns a module path into the name the kernel uses.
func modName(p string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".ko"), "-", "_")
}

// moduleDepends reads "depends=" from a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("%s has no .modinfo", path)
	}
	data, err := s.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
