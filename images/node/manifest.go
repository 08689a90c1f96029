package nodeimage

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kubefarm/kubefarm/images/node/cni"
)

// Artifact names in an image's cache folder, and the manifest's.
const (
	Vmlinuz      = "vmlinuz"
	Initrd       = "initrd"
	Rootfs       = "rootfs.squashfs"
	ManifestFile = "manifest.json"
)

// Artifacts are the files a BootImage references, in a fixed order.
var Artifacts = []string{Vmlinuz, Initrd, Rootfs}

// Manifest describes one built node image. build.sh writes it as
// manifest.json next to the artifacts.
type Manifest struct {
	SchemaVersion int `json:"schemaVersion"`
	// Architecture is the machines' Debian architecture, amd64 or arm64
	// (a BootImage's spec.architecture). Manifests from before arm64 have
	// none: use Arch.
	Architecture string `json:"architecture,omitempty"`
	// Key is the cache key: sha256 over the recipe's inputs (build.sh).
	Key   string `json:"key"`
	Suite string `json:"suite"`
	// Mirror is the Debian mirror the root file system came from. Package
	// versions are whatever it served at build time (see Packages) unless
	// it is a snapshot mirror.
	Mirror          string `json:"mirror"`
	SourceDateEpoch int64  `json:"sourceDateEpoch"`

	Kernel     Kernel              `json:"kernel"`
	Kubelet    Binary              `json:"kubelet"`
	Containerd string              `json:"containerd"`
	Runc       string              `json:"runc"`
	Flannel    Binary              `json:"flannel"`
	Agent      string              `json:"agent"` // "none" or sha256:<hex> of /usr/bin/kubefarm-agent
	CNI        cni.Record          `json:"cni"`
	Modules    map[string][]string `json:"modules"`
	Artifacts  map[string]File     `json:"artifacts"`
	// Packages are the Debian packages of the root file system,
	// "name version", sorted.
	Packages []string `json:"packages"`
}

// Arch is the image's architecture: Architecture, or amd64 for a manifest
// written before images were built for anything else.
func (m *Manifest) Arch() string {
	if m.Architecture == "" {
		return "amd64"
	}
	return m.Architecture
}

// Kernel is the Debian kernel package the image boots.
type Kernel struct {
	Package   string `json:"package"`
	Version   string `json:"version"`
	Release   string `json:"release"`
	DebSHA256 string `json:"debSha256"`
}

// Binary is a binary built from a pinned Go module.
type Binary struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// File is one artifact.
type File struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// DpkgPackages reads root/var/lib/dpkg/status: "name version" of every
// installed package, sorted.
func DpkgPackages(root string) ([]string, error) {
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	var name, version, status string
	flush := func() {
		if name != "" && strings.HasSuffix(status, " installed") {
			out = append(out, name+" "+version)
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			flush()
		case strings.HasPrefix(l, "Package: "):
			name = strings.TrimPrefix(l, "Package: ")
		case strings.HasPrefix(l, "Version: "):
			version = strings.TrimPrefix(l, "Version: ")
		case strings.HasPrefix(l, "Status: "):
			status = strings.TrimPrefix(l, "Status: ")
		}
	}
	flush()
	sort.Strings(out)
	return out, sc.Err()
}

// PackageVersion finds a package's version in DpkgPackages' output.
func PackageVersion(pkgs []string, name string) string {
	for _, p := range pkgs {
		if n, v, ok := strings.Cut(p, " "); ok && n == name {
			return v
		}
	}
	return ""
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	return &m, nil
}

// WriteManifest writes m as dir/manifest.json (indented, trailing newline;
// encoding/json sorts map keys, so the bytes depend only on m).
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644)
}

// Verify checks that every artifact in dir has the size and sha256 the
// manifest records, and that the manifest names them all.
func Verify(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range Artifacts {
		want, ok := m.Artifacts[a]
		if !ok {
			errs = append(errs, fmt.Errorf("manifest has no %s", a))
			continue
		}
		got, n, err := cni.FileSHA256(filepath.Join(dir, a))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got != want.SHA256 || n != want.Size {
			errs = append(errs, fmt.Errorf("%s: manifest says sha256 %s size %d, file is %s size %d", a, want.SHA256, want.Size, got, n))
		}
	}
	return m, errors.Join(errs...)
}
